"""PostgreSQL fixtures: a fresh database per test on the session's private server, and a
capture service (a real child process) configured for it with a slot of its own."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import capture_factory
from tests.servers import PostgreSQL


@pytest.fixture
def pg_database(postgres: PostgreSQL, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh database named after the test; its replication slots are dropped afterwards
    (an unread slot keeps WAL forever)."""
    name = "t_" + request.node.name.replace("[", "_").replace("]", "").replace("-", "_")[:50].lower()
    _drop(postgres, name)
    postgres.execute(f'CREATE DATABASE "{name}"')
    yield name
    _drop(postgres, name)


def _drop(postgres: PostgreSQL, name: str) -> None:
    postgres.execute(
        f"SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = '{name}'"
        " AND active_pid IS NOT NULL"
    )
    for (slot,) in postgres.query(f"SELECT slot_name FROM pg_replication_slots WHERE database = '{name}'"):
        for _ in range(50):
            try:
                postgres.execute(f"SELECT pg_drop_replication_slot('{slot}')")
                break
            except Exception:  # still active for a moment after its walsender was told to stop
                import time

                time.sleep(0.1)
    postgres.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def make_pg_capture(postgres: PostgreSQL, pg_database: str, tmp_path: Path) -> Iterator:
    """Build a config for the private PostgreSQL and return a CaptureProcess for it (of `public.*`
    unless told; keyword arguments as for make_capture)."""
    yield from capture_factory(
        tmp_path,
        lambda source: {
            "kind": "postgresql",
            "host": "127.0.0.1",
            "port": postgres.port,
            "user": "postgres",
            "password": "${TEST_DB_PASSWORD:-}",
            "database": pg_database,
            "slot": f"lt_{pg_database}_{source}"[:63].lower().replace("-", "_"),
            "include": ["public.*"],
        },
    )


@pytest.fixture
def start_pg_capture(postgres: PostgreSQL, pg_database: str, make_pg_capture) -> Callable[..., Any]:
    """Return a function that runs its setup statements in the test's database, then starts
    capture (keyword arguments as for make_pg_capture) and waits until it streams: the first
    steps of most capture tests."""

    def start(*setup: str, **options: Any):
        if setup:
            postgres.execute(*setup, database=pg_database)
        capture = make_pg_capture(**options).start()
        capture.wait_running()
        return capture

    return start
