"""Helpers for PostgreSQL dump tests: a random concurrent workload, catching up with the log,
and the table state to compare the reconciled stream with."""

from __future__ import annotations

import time
from typing import Any

from capture.sources.postgres.connection import parse_lsn
from tests.integration.dumping import Workload as SharedWorkload
from tests.integration.dumping import reconciled_state  # noqa: F401 - the same for both sources
from tests.servers import wait_for


class Workload(SharedWorkload):
    """The shared random workload (tests/integration/dumping.py) with PostgreSQL's random()."""

    def __init__(self, postgres, database: str, table: str, first_free_id: int, seed: int, **options: Any) -> None:
        super().__init__(postgres, database, table, first_free_id, seed, random_sql="random()", **options)


def wait_until_landed(postgres, database: str, capture, timeout: float = 60) -> None:
    """Commit a marker row and wait until the capture's frontier is past it: everything
    committed before the marker has landed. The marker table is published by capture's next
    publication sync (README, PostgreSQL: the publication) when it is new, and until then its
    rows are not in the log: so a new marker is committed every second until one has landed."""
    conn = postgres.connect(database, autocommit=False)
    deadline = time.monotonic() + timeout
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS lt_marker (id bigserial PRIMARY KEY)")
            conn.commit()
            while True:
                cur.execute("INSERT INTO lt_marker DEFAULT VALUES")
                cur.execute("SELECT pg_current_wal_insert_lsn()::text")
                before_commit = parse_lsn(cur.fetchone()[0])
                conn.commit()
                try:
                    landed = lambda lsn=before_commit: capture.zone.checkpoint().frontier.major > lsn  # noqa: E731
                    wait_for(landed, 1.0, interval=0.1)
                    return
                except TimeoutError:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"capture did not land a marker in {timeout} s") from None
    finally:
        conn.close()


def table_state(postgres, database: str, table: str, key: tuple[str, ...] = ("id",)) -> dict:
    conn = postgres.connect(database)
    try:
        with conn.cursor() as cur:
            cur.execute(f'SELECT * FROM "{table}"')
            names = [d[0] for d in cur.description]
            rows = [
                {n: bytes(v) if isinstance(v, memoryview) else v for n, v in zip(names, r, strict=True)}
                for r in cur.fetchall()
            ]
    finally:
        conn.close()
    return {tuple(r[k] for k in key): r for r in rows}
