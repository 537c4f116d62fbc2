"""PostgreSQL makes a commit visible to new snapshots only after its commit record is in the WAL
(and, with synchronous replication, only after the standby answered). A chunk SELECT that starts
right after LOW committed can therefore miss a transaction the log places before LOW: measured
here, about one LOW in ten under heavy concurrent commits. Each chunk records its snapshot, and
reconciliation drops chunk rows such a transaction touched (the log has the newer state)."""

from __future__ import annotations

import random
import threading
from dataclasses import replace

import psycopg2.errors
import pyarrow.parquet as pq
import pytest

from capture.dump.control import DumpSettings
from capture.dump.engine import DumpEngine, DumpRequest
from capture.landing.chunks import read_chunk_meta
from capture.landing.reader import chunk_files
from capture.sources import open_chunk_source
from tests.integration.postgres import dumping
from tests.integration.postgres.dumping import reconciled_state, table_state, wait_until_landed

pytestmark = pytest.mark.integration

ROWS = 120
WRITERS = 6
DUMPS = 3


def _writer(postgres, database: str, stop: threading.Event, seed: int, errors: list) -> None:
    """Short transactions, each updating a few random rows, committed as fast as possible."""
    rng = random.Random(seed)
    conn = postgres.connect(database, autocommit=False)
    try:
        with conn.cursor() as cur:
            cur.execute("SET enable_seqscan = off; SET enable_bitmapscan = off")  # rows locked in key order
            while not stop.is_set():
                keys = sorted(rng.sample(range(1, ROWS + 1), 6))
                try:
                    cur.execute("UPDATE hot SET v = v + 1, note = %s WHERE id = ANY(%s)", (str(seed), keys))
                    conn.commit()
                except psycopg2.errors.DeadlockDetected:
                    conn.rollback()
    except Exception as exc:
        errors.append(exc)
    finally:
        conn.close()


def test_chunks_under_heavy_concurrent_commits_reconcile_to_the_table(postgres, pg_database, make_pg_capture):
    postgres.execute(
        "CREATE TABLE hot (id int PRIMARY KEY, v int, note text)",
        f"INSERT INTO hot SELECT i, 0, '' FROM generate_series(1, {ROWS}) i",
        database=pg_database,
    )
    capture = make_pg_capture().start()
    capture.wait_running()
    stop, errors = threading.Event(), []
    writers = [
        threading.Thread(target=_writer, args=(postgres, pg_database, stop, seed, errors)) for seed in range(WRITERS)
    ]
    for thread in writers:
        thread.start()
    source = open_chunk_source("src", capture.config.source("src"))
    try:
        for _ in range(DUMPS):
            DumpEngine(source, capture.zone).run(
                DumpRequest(tables=["public.hot"], settings=DumpSettings(chunk_size=10))
            )
    finally:
        source.close()
        stop.set()
        for thread in writers:
            thread.join()
    assert not errors
    wait_until_landed(postgres, pg_database, capture)
    state, stats = reconciled_state(capture, "public", "hot")
    assert state == table_state(postgres, pg_database, "hot")
    assert stats.chunks == DUMPS * (ROWS // 10 + 1) and stats.dropped_by_window > 0


def test_a_commit_in_the_wal_but_not_yet_visible_never_leaves_a_stale_row(make_pg_capture):
    """Made deterministic with synchronous replication to a standby that never answers: the
    transaction's commit is in the WAL (so capture lands it, before LOW) but it stays invisible
    to every snapshot until its wait is cancelled. The chunk reads the old row. The update leaves
    a TOASTed column unchanged, so its event does not carry it: the stale chunk row is dropped,
    yet its copy of that column must survive (nothing else holds it)."""
    with dumping.standby_that_never_answers() as (server, stuck):
        server.execute(
            "CREATE TABLE hot (id int PRIMARY KEY, v int, body text)",
            "ALTER TABLE hot ALTER COLUMN body SET STORAGE EXTERNAL",  # out of line from ~2 kB, uncompressed
            "INSERT INTO hot SELECT i, 0, repeat(md5(i::text), 200) FROM generate_series(1, 20) i",
        )
        body = server.query("SELECT body FROM hot WHERE id = 5")[0][0]
        capture = make_pg_capture(port=server.port, database="postgres").start()
        capture.wait_running()
        with stuck.cursor() as cur:
            cur.execute("UPDATE hot SET v = 100 WHERE id = 5")
        committer = dumping.commit_stuck(server, stuck)  # commit record flushed; the row is not visible meanwhile
        assert server.query("SELECT v FROM hot WHERE id = 5")[0][0] == 0
        events = capture.wait_events("public", "hot", 1)  # ... but in the WAL, and landed
        assert events[0]["after"] == {"id": 5, "v": 100, "body": None} and events[0]["_missing"] == ["body"]

        source = open_chunk_source("src", capture.config.source("src"))
        try:
            DumpEngine(source, capture.zone).run(
                DumpRequest(tables=["public.hot"], settings=DumpSettings(chunk_size=50))
            )
        finally:
            source.close()
        dumping.release_stuck(server, stuck, committer)  # the wait ends: the commit becomes visible
        wait_until_landed(server, "postgres", capture)
        (path,) = chunk_files(capture.zone, "public", "hot")
        chunk = pq.read_table(path)
        assert {"id": 5, "v": 0, "body": body} in chunk.column("after").to_pylist()  # the stale row

        state, stats = reconciled_state(capture, "public", "hot")
        assert state == table_state(server, "postgres", "hot") and state[(5,)] == {"id": 5, "v": 100, "body": body}
        assert stats.dropped_by_visibility == 1

        # without the snapshot the chunk's stale row would win: the log event is before LOW
        meta = read_chunk_meta(path)
        assert meta.read_view is not None
        dumping.rewrite_chunk_meta(chunk, path, replace(meta, read_view=None))
        state, stats = reconciled_state(capture, "public", "hot")
        assert state[(5,)]["v"] == 0 and stats.dropped_by_visibility == 0
