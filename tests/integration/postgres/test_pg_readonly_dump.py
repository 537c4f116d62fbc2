"""Read-only watermarks (`watermarks: readonly`) on a real PostgreSQL 15 primary: an administrator
creates the publication, capture streams as a user with only the REPLICATION attribute, the dump
reads as a user with only SELECT, nothing is written to the database, and the reconciled landing
zone equals the table under a concurrent workload, on an idle server, and when a commit is in the
WAL long before it becomes visible. A hot standby is refused."""

from __future__ import annotations

import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from capture.dump.control import DumpSettings
from capture.dump.engine import DumpEngine, DumpRequest
from capture.errors import DumpInputError
from capture.landing.chunks import read_chunk_meta
from capture.landing.reader import DumpedTables, chunk_files, committed_frontier
from capture.sources import open_chunk_source
from capture.sources.base import WATERMARK_SCHEMA, WATERMARK_TABLE
from capture.sources.postgres.read_view import widen
from capture.sources.postgres.watcher import CHECK_S
from tests.integration.dumping import AlterAt
from tests.integration.postgres.dumping import (
    Workload,
    commit_stuck,
    reconciled_state,
    release_stuck,
    rewrite_chunk_meta,
    standby_that_never_answers,
    table_state,
    wait_until_landed,
)
from tests.servers import PostgreSQL, start_pg_standby, wait_for

pytestmark = pytest.mark.integration
CAPTURER = "capturer"  # REPLICATION attribute only: streams the administrator's slot and publication
DUMPER = "dumper"  # SELECT on the captured tables only


def _admin_setup(server: PostgreSQL, database: str, tables: str, slot: str) -> None:
    """What an administrator does once: the two roles, their grants, the publication, the slot."""
    for role, attributes in ((CAPTURER, "LOGIN REPLICATION"), (DUMPER, "LOGIN")):
        if not server.query(f"SELECT 1 FROM pg_roles WHERE rolname = '{role}'"):
            server.execute(f'CREATE ROLE "{role}" {attributes}')
    server.execute(
        f'GRANT SELECT ON {tables} TO "{DUMPER}"',
        f"CREATE PUBLICATION logtide_src FOR TABLE {tables}",
        f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')",
        database=database,
    )


def _readonly_capture(make_pg_capture, server: PostgreSQL, db: str, tables: str, **overrides):
    probe = make_pg_capture(watermarks="readonly", user=CAPTURER, **overrides)  # the slot name it will use
    _admin_setup(server, db, tables, probe.config.source("src").slot_name("src"))
    capture = probe.start()
    capture.wait_running()
    return capture


def _dump(capture, table: str, chunk_size: int) -> dict:
    config = capture.config.source("src").model_copy(update={"user": DUMPER})
    source = open_chunk_source("src", config)
    try:
        return DumpEngine(source, capture.zone).run(
            DumpRequest(tables=[table], settings=DumpSettings(chunk_size=chunk_size))
        )
    finally:
        source.close()


def _nothing_written(server: PostgreSQL, database: str, capture, tables: set[str]) -> None:
    assert not server.query(f"SELECT 1 FROM pg_namespace WHERE nspname = '{WATERMARK_SCHEMA}'", database=database)
    published = server.query(
        "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = 'logtide_src'",
        database=database,
    )
    assert {r[0] for r in published} == tables  # the administrator's publication, unchanged
    assert capture.zone.read_table(WATERMARK_SCHEMA, WATERMARK_TABLE) is None


@pytest.mark.parametrize("seed", [1, 2])
def test_a_readonly_dump_under_writes_reconciles_to_the_table_and_writes_nothing(
    postgres, pg_database, make_pg_capture, seed
):
    postgres.execute(
        "CREATE TABLE ledger (id int PRIMARY KEY, v int, note text)",
        "INSERT INTO ledger SELECT i, i % 100, 'row' || i FROM generate_series(1, 3000) i",
        database=pg_database,
    )
    capture = _readonly_capture(make_pg_capture, postgres, pg_database, "public.ledger")
    workload = Workload(postgres, pg_database, "ledger", 100_000, seed)  # inserts, updates, deletes, key changes
    workload.start()
    chunks = 0
    try:
        # a dump of 3,000 rows takes a second or two: dump again (up to 5 times) until the workload
        # has written a row of a chunk inside its window, which the reconciliation must drop
        for _ in range(5):
            summary = _dump(capture, "public.ledger", 37)
            chunks += summary["tables"][0]["chunks"]
            wait_until_landed(postgres, pg_database, capture)
            if reconciled_state(capture, "public", "ledger")[1].dropped_by_window:
                break
    finally:
        workload.stop()
    wait_until_landed(postgres, pg_database, capture)

    state, stats = reconciled_state(capture, "public", "ledger")
    assert state == table_state(postgres, pg_database, "ledger"), (stats, summary)
    assert workload.transactions > 50 and summary["tables"][0]["chunks"] > 50
    assert stats.chunks == chunks and stats.chunks_pending == 0
    assert stats.dropped_by_window > 0  # the workload did touch rows inside windows
    metas = [read_chunk_meta(p) for p in chunk_files(capture.zone, "public", "ledger")]
    assert all(m.low_lsn is not None and m.read_view is not None and m.read_view.readonly for m in metas)
    _nothing_written(postgres, pg_database, capture, {"public.ledger"})


def test_the_last_window_closes_on_an_idle_server(postgres, pg_database, make_pg_capture, caplog):
    """Nothing commits during or after the dump: capture's frontier stands just before the WAL end
    (the keepalives' position) and steps past each HIGH, which is placed above it; no chunk is read
    twice (a HIGH at the WAL end alone would be behind the frontier already: `dump.chunk_late`, again
    and again, until something wrote WAL)."""
    postgres.execute(
        "CREATE TABLE ledger (id int PRIMARY KEY, v int, note text)",
        "INSERT INTO ledger SELECT i, i % 100, 'row' || i FROM generate_series(1, 500) i",
        database=pg_database,
    )
    capture = _readonly_capture(make_pg_capture, postgres, pg_database, "public.ledger")
    summary = _dump(capture, "public.ledger", 100)
    finished = time.monotonic()
    assert summary["tables"][0]["chunks"] == 6
    wait_for(lambda: reconciled_state(capture, "public", "ledger")[1].chunks_pending == 0, 60, interval=0.2,
             what="the last read-only chunk to close")  # fmt: skip
    closed_s = time.monotonic() - finished
    state, stats = reconciled_state(capture, "public", "ledger")
    assert state == table_state(postgres, pg_database, "ledger") and stats.chunks == 6
    assert capture.zone.read_table("public", "ledger") is None  # no commit landed: only keepalives moved it
    assert committed_frontier(capture.zone) is not None
    assert "dump.chunk_late" not in caplog.text
    print(f"idle server: last window closed {closed_s:.2f} s after the dump finished")
    _nothing_written(postgres, pg_database, capture, {"public.ledger"})


def test_a_commit_in_the_wal_but_invisible_with_an_xid_past_xmax_never_leaves_a_stale_row(make_pg_capture):
    """A synchronous standby that never answers holds a committed, landed update (made in a
    subtransaction: pgoutput gives the top-level xid, which xip and xmax are compared with) invisible. No
    transaction completes after it, so the chunk's snapshot has xmax at or below its xid and does not
    list it in xip: only the read-only rule (every xid >= xmax before LOW is hidden, whatever its
    LSN) drops the stale chunk row; the table-watermark rule (xid >= xmax only after the position read
    before LOW) would keep it, since its commit record is long before LOW."""
    with standby_that_never_answers() as (server, stuck):
        server.execute(
            "CREATE TABLE hot (id int PRIMARY KEY, v int, body text)",
            "INSERT INTO hot SELECT i, 0, 'b' || i FROM generate_series(1, 20) i",
        )
        capture = _readonly_capture(make_pg_capture, server, "postgres", "public.hot", port=server.port,
                                    database="postgres")  # fmt: skip
        with stuck.cursor() as cur:
            cur.execute("SELECT txid_current()")  # the top-level xid
            (xid,) = cur.fetchone()
            # the update in a subtransaction: its row carries the subxid, the log the top-level xid
            cur.execute("SAVEPOINT s; UPDATE hot SET v = 100 WHERE id = 5; RELEASE SAVEPOINT s")
        committer = commit_stuck(server, stuck)  # waits for the standby that never comes
        assert server.query("SELECT v FROM hot WHERE id = 5")[0][0] == 0
        events = capture.wait_events("public", "hot", 1)  # in the WAL, and landed
        assert events[0]["after"]["v"] == 100 and events[0]["_txid"] == str(xid & 0xFFFFFFFF)
        time.sleep(1)  # the commit record is well before the dump's LOW

        _dump(capture, "public.hot", 50)
        (path,) = chunk_files(capture.zone, "public", "hot")
        meta = read_chunk_meta(path)
        view = meta.read_view
        assert widen(xid & 0xFFFFFFFF, view.xmax) >= view.xmax and xid not in view.xip  # past xmax, not listed
        assert int(events[0]["_lsn"]) < view.before_low
        release_stuck(server, stuck, committer)  # the wait ends: the commit becomes visible
        wait_until_landed(server, "postgres", capture)
        chunk = pq.read_table(path)
        assert {"id": 5, "v": 0, "body": "b5"} in chunk.column("after").to_pylist()  # the stale row

        state, stats = reconciled_state(capture, "public", "hot")
        assert state == table_state(server, "postgres", "hot") and state[(5,)]["v"] == 100
        assert stats.dropped_by_visibility == 1

        # the table-watermark rule would keep the stale row: its commit is before before_low
        rewrite_chunk_meta(chunk, path, replace(meta, read_view=replace(view, readonly=False)))
        state, stats = reconciled_state(capture, "public", "hot")
        assert state[(5,)]["v"] == 0 and stats.dropped_by_visibility == 0


def test_a_hot_standby_is_refused_before_anything_is_read(postgres, pg_database, make_pg_capture):
    postgres.execute("CREATE TABLE ledger (id int PRIMARY KEY, v int)", database=pg_database)
    postgres.execute("CREATE PUBLICATION logtide_src FOR TABLE public.ledger", database=pg_database)
    standby = start_pg_standby(postgres, Path(tempfile.mkdtemp(prefix="logtide-pg-standby-")))
    try:
        probe = make_pg_capture(watermarks="readonly", port=standby.port)
        source = open_chunk_source("src", probe.config.source("src"))
        try:
            with pytest.raises(DumpInputError, match="this server is a hot standby"):
                DumpEngine(source, probe.zone).run(DumpRequest(tables=["public.ledger"]))
        finally:
            source.close()
        assert not list(chunk_files(probe.zone, "public", "ledger"))
    finally:
        standby.destroy()


def test_a_truncate_waiting_on_a_chunks_copy_reconciles_to_the_table(postgres, pg_database, make_pg_capture):
    """A transaction that TRUNCATEs and refills the table, begun right after a read-only chunk's
    LOW and committed while the chunk's COPY waits for its lock: the COPY then reads the new, empty
    relation with its older snapshot (TRUNCATE is not MVCC-safe) and the dump ends there. The
    truncate is inside that chunk's window, and the reconciled landing zone equals the table."""
    postgres.execute(
        "CREATE TABLE ledger (id int PRIMARY KEY, v int, note text)",
        "INSERT INTO ledger SELECT i, i, 'row' || i FROM generate_series(1, 100) i",
        database=pg_database,
    )
    capture = _readonly_capture(make_pg_capture, postgres, pg_database, "public.ledger")
    truncater = postgres.connect(pg_database, autocommit=False)

    def truncate(_sql: str) -> None:
        with truncater.cursor() as cur:
            cur.execute("TRUNCATE ledger")
            cur.execute("INSERT INTO ledger SELECT i, -i, 'refill' FROM generate_series(30, 50) i")
        threading.Timer(1.5, truncater.commit).start()

    config = capture.config.source("src").model_copy(update={"user": DUMPER})
    source = open_chunk_source("src", config)
    try:
        summary = DumpEngine(AlterAt(source, truncate).at(2, "LOW", "truncate"), capture.zone).run(
            DumpRequest(tables=["public.ledger"], settings=DumpSettings(chunk_size=20))
        )
    finally:
        source.close()
        wait_for(lambda: truncater.info.transaction_status == 0, 10, what="the truncate's commit")
        truncater.close()
    wait_until_landed(postgres, pg_database, capture)
    wait_for(lambda: reconciled_state(capture, "public", "ledger")[1].chunks_pending == 0, 30, what="chunks closed")
    state, stats = reconciled_state(capture, "public", "ledger")
    assert state == table_state(postgres, pg_database, "ledger") and len(state) == 21, (stats, summary)


def test_a_table_dropped_on_an_idle_server_is_emptied_with_readonly_watermarks(postgres, pg_database, make_pg_capture):
    """DROP TABLE writes no row event: its truncate lands at the WAL end the idle stream reports, past
    the keepalive frontier's steps (README, PostgreSQL: Dropped tables); nothing is written to the source."""
    postgres.execute(
        "CREATE TABLE ledger (id int PRIMARY KEY, v int)",
        "INSERT INTO ledger SELECT i, i FROM generate_series(1, 50) i",
        database=pg_database,
    )
    capture = _readonly_capture(make_pg_capture, postgres, pg_database, "public.ledger")
    _dump(capture, "public.ledger", 20)
    wait_for(lambda: reconciled_state(capture, "public", "ledger")[1].chunks_pending == 0, 60, interval=0.2,
             what="the last read-only chunk to close")  # fmt: skip
    assert len(reconciled_state(capture, "public", "ledger")[0]) == 50
    postgres.execute("DROP TABLE ledger", database=pg_database)

    def truncated() -> bool:
        history = capture.zone.read_schema_history()
        return history is not None and "truncate" in history["kind"].to_pylist()

    wait_for(truncated, 30, what="the truncate of ledger")
    assert reconciled_state(capture, "public", "ledger")[0] == {}
    assert not postgres.query(f"SELECT 1 FROM pg_namespace WHERE nspname = '{WATERMARK_SCHEMA}'", database=pg_database)
    assert capture.stop() == 0


class _FailAt:
    """The real chunk source, except that the dump fails at one chunk's LOW (its earlier chunks landed)."""

    def __init__(self, source, chunk: int) -> None:
        self._source, self._chunk = source, chunk

    def __getattr__(self, name: str):
        return getattr(self._source, name)

    def write_watermark(self, mark, table=None) -> None:
        if (mark.chunk, mark.kind) == (self._chunk, "LOW"):
            raise RuntimeError("the dump's worker dies")
        self._source.write_watermark(mark, table)


def _truncates(capture, table: str) -> int:
    history = capture.zone.read_schema_history()
    rows = [] if history is None else history.to_pylist()
    return sum(1 for r in rows if r["kind"] == "truncate" and (r["schema"], r["table"]) == ("public", table))


def _create_brief(postgres, database: str) -> None:
    postgres.execute(
        "CREATE TABLE brief (id int PRIMARY KEY, v int)",
        "INSERT INTO brief SELECT i, i FROM generate_series(1, 6) i",
        f'GRANT SELECT ON brief TO "{DUMPER}"',
        "ALTER PUBLICATION logtide_src ADD TABLE brief",  # the administrator publishes it
        database=database,
    )


def test_a_table_dumped_again_into_its_dump_folder_and_dropped_is_emptied(postgres, pg_database, make_pg_capture):
    """A dump of `brief` dies after its first chunk; the table is dropped (emptied), created again and
    the dump resumed under its id: its chunks of the new relation land in the folder that was there,
    so no dump folder appears. On main the watcher looked at a dumped table's newest chunk only when a
    dump folder changed: it never watched the new relation, its DROP landed no truncate, and the target
    kept the resumed dump's rows for good."""
    postgres.execute("CREATE TABLE ledger (id int PRIMARY KEY, v int)", database=pg_database)
    capture = _readonly_capture(make_pg_capture, postgres, pg_database, "public.ledger")
    _create_brief(postgres, pg_database)
    config = capture.config.source("src").model_copy(update={"user": DUMPER})
    request = DumpRequest(dump_id="brief", tables=["public.brief"], settings=DumpSettings(chunk_size=2))
    source = open_chunk_source("src", config)
    try:
        with pytest.raises(RuntimeError, match="dies"):
            DumpEngine(_FailAt(source, 2), capture.zone).run(request)
    finally:
        source.close()
    time.sleep(2 * CHECK_S + DumpedTables.RACY_S)  # the dump folder looked through, its listing settled
    postgres.execute("DROP TABLE brief", database=pg_database)
    wait_for(lambda: _truncates(capture, "brief") == 1, 30, what="the first truncate of brief")
    _create_brief(postgres, pg_database)
    source = open_chunk_source("src", config)
    try:
        DumpEngine(source, capture.zone).run(request)  # resumed after chunk 1, in the same folder
    finally:
        source.close()
    wait_for(lambda: reconciled_state(capture, "public", "brief")[1].chunks_pending == 0, 60, interval=0.2,
             what="the read-only chunks to close")  # fmt: skip
    assert reconciled_state(capture, "public", "brief")[0]  # the resumed dump's rows
    postgres.execute("DROP TABLE brief", database=pg_database)
    wait_for(lambda: _truncates(capture, "brief") == 2, 30, what="the truncate of the dropped new brief")
    assert reconciled_state(capture, "public", "brief")[0] == {}
    assert capture.stop() == 0


def test_a_table_the_readonly_publication_lacks_stays_unconverged_until_published_and_dumped(
    postgres, pg_database, make_pg_capture
):
    """A captured table the administrator's publication lacks is listed not converged with the statement
    that adds it; it stays listed while it is missing (no dump can converge it: its changes are in no
    log) and, once added, until a dump begun after capture found it published finishes."""
    from capture.config import load_config
    from capture.status import source_status

    def not_converged() -> dict[str, dict]:
        report = source_status(load_config(capture.config_path), "src")
        return {t["table"]: t for t in report["not_converged"]}

    postgres.execute(
        "CREATE TABLE ledger (id int PRIMARY KEY, v int)",
        "CREATE TABLE extra (id int PRIMARY KEY, v int)",
        "INSERT INTO extra SELECT i, i FROM generate_series(1, 5) i",
        database=pg_database,
    )
    capture = _readonly_capture(make_pg_capture, postgres, pg_database, "public.ledger")
    wait_for(lambda: "public.extra" in not_converged(), 10, what="extra listed not converged")
    entry = not_converged()["public.extra"]
    assert entry.get("unpublished") and "ALTER PUBLICATION" in entry["action"] and "ADD TABLE" in entry["action"]
    postgres.execute(
        "ALTER PUBLICATION logtide_src ADD TABLE extra", f'GRANT SELECT ON extra TO "{DUMPER}"', database=pg_database
    )
    wait_for(lambda: not not_converged()["public.extra"].get("unpublished"), 10, what="extra found published")
    assert "public.extra" in not_converged()
    time.sleep(1.1)  # the dump's record is to the second: it starts in a later one
    _dump(capture, "public.extra", 2)
    assert not_converged() == {}
    wait_until_landed(postgres, pg_database, capture)
    assert reconciled_state(capture, "public", "extra")[0] == table_state(postgres, pg_database, "extra")
    assert capture.stop() == 0


def test_a_table_published_with_its_schema_is_found_at_once_and_converges_after_a_dump(
    postgres, pg_database, make_pg_capture
):
    """`ALTER PUBLICATION ... ADD TABLES IN SCHEMA` (PostgreSQL 15) publishes a table without a row in
    pg_publication_rel: on main capture never found such a table published (it read the table list
    only; the watcher's catalog stamp left pg_publication_namespace out as well), so it stayed listed
    'not published' whatever was dumped. Now the next round finds it; the rows written once it is
    published land from the log, and a dump started after that converges it."""
    from capture.config import load_config
    from capture.status import source_status

    def not_converged() -> dict[str, dict]:
        report = source_status(load_config(capture.config_path), "src")
        return {t["table"]: t for t in report["not_converged"]}

    postgres.execute(
        "CREATE TABLE ledger (id int PRIMARY KEY, v int)",
        "CREATE TABLE extra (id int PRIMARY KEY, v int)",
        "INSERT INTO extra SELECT i, i FROM generate_series(1, 5) i",
        database=pg_database,
    )
    capture = _readonly_capture(make_pg_capture, postgres, pg_database, "public.ledger")
    wait_for(lambda: not_converged().get("public.extra", {}).get("unpublished"), 10, what="extra not published")
    postgres.execute(
        "ALTER PUBLICATION logtide_src ADD TABLES IN SCHEMA public",
        f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{DUMPER}"',
        database=pg_database,
    )
    # written before capture's next round: in the log, so they land
    postgres.execute("INSERT INTO extra VALUES (6, 6)", "UPDATE extra SET v = 10 WHERE id = 1", database=pg_database)
    began = time.monotonic()
    wait_for(lambda: not not_converged()["public.extra"].get("unpublished"), 20, what="extra found published")
    assert time.monotonic() - began < 10 * CHECK_S  # the next rounds, not the full sync's (60 s)
    assert "publication.table_added" in capture.log()
    assert [e["after"]["id"] for e in capture.wait_events("public", "extra", 2)] == [6, 1]
    time.sleep(1.1)  # the dump's record is to the second: it starts in a later one
    _dump(capture, "public.extra", 2)
    assert not_converged() == {}
    postgres.execute("DELETE FROM extra WHERE id = 2", database=pg_database)
    wait_until_landed(postgres, pg_database, capture)
    assert reconciled_state(capture, "public", "extra")[0] == table_state(postgres, pg_database, "extra")
    assert capture.stop() == 0
