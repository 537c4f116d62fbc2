"""Helpers for PostgreSQL dump tests: a random concurrent workload, catching up with the log,
and the table state to compare the reconciled stream with."""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from capture.dump.control import DumpSettings
from capture.dump.engine import DumpRequest
from capture.landing.chunks import META_KEY, ChunkMeta
from capture.sources.postgres.connection import parse_lsn
from tests.integration.dumping import Workload as SharedWorkload
from tests.integration.dumping import open_engine, reconciled_state
from tests.servers import PostgreSQL, wait_for


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


@contextmanager
def standby_that_never_answers() -> Iterator[tuple[PostgreSQL, Any]]:
    """A private server whose synchronous standby never answers, and a connection whose commits
    wait for it (`commit_stuck`): such a commit is in the WAL, so capture lands it, yet stays
    invisible to every snapshot until `release_stuck` cancels the wait."""
    server = PostgreSQL(
        Path(tempfile.mkdtemp(prefix="logtide-pg-")),
        options={"synchronous_standby_names": "nobody", "synchronous_commit": "local"},
    )
    server.start()
    stuck = None
    try:
        stuck = server.connect(autocommit=False)
        with stuck.cursor() as cur:
            cur.execute("SET synchronous_commit = on")
        stuck.commit()  # no xid: nothing to wait for
        yield server, stuck
    finally:
        if stuck is not None:  # end the wait first: closing a connection busy in COMMIT would block
            server.execute("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
            stuck.close()
        server.destroy()


def commit_stuck(server: PostgreSQL, stuck) -> threading.Thread:
    """Commit `stuck`'s transaction in a thread and return once the commit record is flushed and
    the commit waits for the standby that never comes: the rows are not visible meanwhile."""
    pid = stuck.info.backend_pid
    committer = threading.Thread(target=stuck.commit)
    committer.start()
    wait_for(
        lambda: server.query(f"SELECT wait_event FROM pg_stat_activity WHERE pid = {pid}")[0][0] == "SyncRep",
        10,
        what="the commit to wait for the standby",
    )
    return committer


def release_stuck(server: PostgreSQL, stuck, committer: threading.Thread) -> None:
    """End the wait: the commit becomes visible."""
    server.execute(f"SELECT pg_cancel_backend({stuck.info.backend_pid})")
    committer.join(10)


def rewrite_chunk_meta(chunk: pa.Table, path: Path, meta: ChunkMeta) -> None:
    """Write `chunk` back to `path` with `meta` in place of its metadata: what reconciliation
    would do had the chunk been read with other knowledge (say, without its snapshot)."""
    schema = chunk.schema.with_metadata({**chunk.schema.metadata, META_KEY: meta.to_json()})
    pq.write_table(chunk.cast(schema), path)


def dump_table(capture, table: str, chunk_size: int = 2) -> dict:
    """Dump `public.<table>` in small chunks (several chunks even for a few rows)."""
    engine, source = open_engine(capture)
    try:
        return engine.run(DumpRequest(tables=[f"public.{table}"], settings=DumpSettings(chunk_size=chunk_size)))
    finally:
        source.close()


def published_tables(postgres, database: str) -> list[str]:
    """The `schema.table` names capture's publication holds now."""
    rows = postgres.query(
        "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = 'logtide_src' ORDER BY 1",
        database=database,
    )
    return [r[0] for r in rows]


def change_and_land(postgres, database: str, capture, *statements: str) -> None:
    """Run `statements` and wait until capture has landed them."""
    postgres.execute(*statements, database=database)
    wait_until_landed(postgres, database, capture)


def assert_target_is_source(capture, postgres, database: str, table: str, key: tuple[str, ...] = ("id",)) -> None:
    """The reconciled target of `public.<table>` equals the source table, row for row."""
    state, _ = reconciled_state(capture, "public", table)
    assert state == table_state(postgres, database, table, key), table


def assert_target_holds_source(capture, postgres, database: str, table: str) -> None:
    """As assert_target_is_source, over the source's columns only: a target holds every column it
    ever saw, NULL where no event or chunk carried one, and dropped ones stay."""
    state, _ = reconciled_state(capture, "public", table)
    source = table_state(postgres, database, table)
    assert {k: {c: row.get(c) for c in source[k]} for k, row in state.items()} == source, table
