"""A source with keyed tables and one keyless table, on MariaDB or PostgreSQL (issue 10, part 4):
the tables, and what the keyless tests do the same way on both databases."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, CaptureProcess
from tests.integration import dumping as maria
from tests.integration.postgres import dumping as pg

# orders: a primary key; codes: only a UNIQUE index (PostgreSQL publishes it USING INDEX); events:
# no key (PostgreSQL: REPLICA IDENTITY FULL, so that it is published); clash: a column named like
# the merge's bookkeeping, which fails that table's merge
TABLES = [
    "CREATE TABLE orders (id INT PRIMARY KEY, v INT)",
    "CREATE TABLE codes (code VARCHAR(10) NOT NULL, v INT, CONSTRAINT codes_code UNIQUE (code))",
    "CREATE TABLE events (n INT NOT NULL, v INT)",
    "CREATE TABLE clash (id INT PRIMARY KEY, _lsn INT)",
    "INSERT INTO orders VALUES (1, 10), (2, 20), (3, 30)",
    "INSERT INTO codes VALUES ('a', 1), ('b', 2)",
    "INSERT INTO events VALUES (1, 100), (2, 200), (3, 300), (4, 400)",
    "INSERT INTO clash VALUES (1, 1)",
]


@dataclass
class Db:
    kind: str
    server: Any
    database: str
    schema: str
    make: Any  # make_capture / make_pg_capture

    def execute(self, *statements: str) -> None:
        self.server.execute(*statements, database=self.database)

    def capture(self, source: str = "src", **overrides: Any) -> CaptureProcess:
        if self.kind == "mariadb":
            return self.make([f"{self.database}.*"], source=source, **overrides)
        return self.make(source=source, **overrides)

    def landed(self, capture: CaptureProcess) -> None:
        if self.kind == "mariadb":
            maria.wait_until_landed(self.server, capture)
        else:
            pg.wait_until_landed(self.server, self.database, capture)

    def state(self, table: str, key: tuple[str, ...]) -> dict:
        if self.kind == "mariadb":
            return maria.table_state(self.server, self.database, table, key)
        return pg.table_state(self.server, self.database, table, key)


@pytest.fixture(params=["mariadb", "postgres"])
def db(request: pytest.FixtureRequest) -> Db:
    return open_db(request, request.param)


def open_db(request: pytest.FixtureRequest, kind: str) -> Db:
    """The adapter for `kind`, its fixtures taken from pytest (only that server starts)."""
    if kind == "mariadb":
        database, make = request.getfixturevalue("database"), request.getfixturevalue("make_capture")
        return Db("mariadb", request.getfixturevalue("mariadb"), database, database, make)
    return Db(
        "postgres",
        request.getfixturevalue("postgres"),
        request.getfixturevalue("pg_database"),
        "public",
        request.getfixturevalue("make_pg_capture"),
    )


def cli(config: Path, *args: str) -> subprocess.CompletedProcess:
    """`logtide --config config ...` as a user runs it."""
    cmd = [sys.executable, "-m", "capture.cli", "--config", str(config), *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
