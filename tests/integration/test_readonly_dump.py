"""Read-only watermarks (`watermarks: readonly`) against a real MariaDB primary and its GTID
replica: capture and the dump read the replica with a user that may only SELECT and read the
binlog, the workload writes the primary, and the reconciled landing zone equals the primary's table."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from capture.config import SourceConfig
from capture.dump.control import DumpSettings
from capture.dump.engine import DumpEngine, DumpRequest
from capture.errors import DumpInputError, PreflightError, SourceConnectionError
from capture.landing import LandingZone
from capture.landing.chunks import read_chunk_meta
from capture.landing.reader import chunk_files
from capture.sources import open_chunk_source
from capture.sources.base import WATERMARK_SCHEMA, WATERMARK_TABLE
from capture.sources.mysql.reader import position_lsn
from capture.sources.mysql.source import MySqlSource
from tests.conftest import CaptureProcess
from tests.integration.dumping import (
    AlterAt,
    Workload,
    nudge,
    populate_ledger,
    reconciled_state,
    run_dump,
    table_state,
    wait_chunks_closed,
    wait_until_landed,
)
from tests.servers import MariaDB, free_port, start_replica, wait_for, wait_replicated

pytestmark = pytest.mark.integration
READER = ("reader", "reader-pw")  # SELECT and binlog reading only: no write grant anywhere


@pytest.fixture(scope="module")
def replication(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MariaDB, MariaDB]]:
    """A fresh primary and its GTID replica, applying in parallel (4 threads, optimistic); the
    read-only user is made on the primary and replicated (a user made on the replica would be a
    transaction of the replica's own)."""
    primary = MariaDB(tmp_path_factory.mktemp("primary"))
    replica = None
    try:
        primary.start()
        primary.execute(
            f"CREATE USER '{READER[0]}'@'%' IDENTIFIED BY '{READER[1]}'",
            f"GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{READER[0]}'@'%'",
        )
        replica = start_replica(primary, tmp_path_factory.mktemp("replica"), parallel_threads=4)
        wait_replicated(primary, replica)
        yield primary, replica
    finally:
        if replica is not None:
            replica.destroy()
        primary.destroy()


@pytest.fixture
def replica_capture(replication, tmp_path: Path) -> Iterator:
    """`logtide capture` of the replica as the read-only user, `watermarks: readonly`."""
    _, replica = replication
    made: list[CaptureProcess] = []

    def make(database: str, port: int | None = None) -> CaptureProcess:
        source = {
            "kind": "mariadb",
            "port": port or replica.port,
            "user": READER[0],
            "password": READER[1],
            "server_id": 4000 + len(made),
            "include": [f"{database}.*"],
            "heartbeat_s": 0.2,
            "watermarks": "readonly",
            "metrics": {"port": free_port()},
        }
        path = tmp_path / "logtide.yaml"
        landing = {"path": str(tmp_path / "landing"), "flush_interval_s": 0.2}
        path.write_text(yaml.safe_dump({"landing": landing, "sources": {"src": source}}))
        made.append(CaptureProcess(path, "src", tmp_path))
        return made[-1]

    yield make
    for process in made:
        process.kill()


def _database(primary: MariaDB, name: str) -> str:
    primary.execute(f"DROP DATABASE IF EXISTS `{name}`", f"CREATE DATABASE `{name}`")
    return name


def _replica_capture_under_workload(
    replication, replica_capture, name: str, rows: int, seed: int
) -> tuple[str, CaptureProcess, Workload]:
    """A ledger of `rows` replicated, the replica's capture running, and a random workload writing the primary."""
    primary, replica = replication
    database = _database(primary, name)
    populate_ledger(primary, database, rows)
    wait_replicated(primary, replica)
    capture = replica_capture(database).start()
    capture.wait_running()
    workload = Workload(primary, database, "ledger", 100_000, seed=seed)
    workload.start()
    return database, capture, workload


def _readonly_capture(mariadb: MariaDB, database: str, make_capture, rows: int, **overrides) -> CaptureProcess:
    """A ledger of `rows`, and capture of it running with read-only watermarks."""
    populate_ledger(mariadb, database, rows)
    capture = make_capture([f"{database}.*"], **{"watermarks": "readonly", **overrides}).start()
    capture.wait_running()
    return capture


FLUSH = ("FLUSH BINARY LOGS",)
REFILL = ("TRUNCATE TABLE ledger", "INSERT INTO ledger (id, v, note) SELECT seq, seq, 'refill' FROM seq_30_to_50")


def _statements_at(mariadb: MariaDB, database: str, *at: tuple[int, str, tuple[str, ...]]):
    """A `run_dump` wrap that runs each (chunk, "LOW" or "HIGH", statements) at that watermark."""

    def wrap(source) -> AlterAt:
        altering = AlterAt(source, lambda sql: mariadb.execute(*sql, database=database))
        for chunk, kind, statements in at:
            altering.at(chunk, kind, statements)
        return altering

    return wrap


def _landed(primary: MariaDB, replica: MariaDB, capture: CaptureProcess, timeout: float = 60) -> None:
    """Until the replica's capture has landed all the primary wrote, and a commit after the dump
    (made on the primary: the replica must not write) has moved its log past the last chunk's HIGH."""
    nudge(primary)
    wait_replicated(primary, replica)
    wait_until_landed(replica, capture, timeout, nudge_first=False)


def _gtid(server: MariaDB) -> str:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        return cur.fetchone()[0]


class ReplicaAt:
    """The real chunk source, except that the replica is acted on at chunk boundaries: `at(n, kind,
    action)` runs `action()` right before LOW (`kind` "LOW") or HIGH ("HIGH") of chunk n."""

    def __init__(self, source) -> None:
        self._source, self._actions = source, {}

    def at(self, chunk: int, kind: str, action) -> ReplicaAt:
        self._actions[(chunk, kind)] = action
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)

    def write_watermark(self, mark, table=None) -> None:
        action = self._actions.pop((mark.chunk, mark.kind), None)
        if action is not None:
            action()
        self._source.write_watermark(mark, table)


def _no_writes(replica: MariaDB, primary: MariaDB, capture: CaptureProcess) -> None:
    """The dump wrote nothing: no watermark table on the replica, no watermark event landed, and the
    replica's binlog holds only the primary's transactions (a write of its own would be 0-2-n)."""
    with replica.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (WATERMARK_SCHEMA,))
        assert cur.fetchone()[0] == 0
        cur.execute(f"SHOW GRANTS FOR '{READER[0]}'@'%'")
        grants = " ".join(r[0] for r in cur.fetchall())
    assert "INSERT" not in grants and "UPDATE" not in grants and "ALL PRIVILEGES" not in grants
    assert capture.events(WATERMARK_SCHEMA, WATERMARK_TABLE) == []
    assert _gtid(replica) == _gtid(primary) and "-2-" not in _gtid(replica)


def test_a_readonly_dump_of_a_lagging_replica_under_a_primary_workload_equals_the_primary(replication, replica_capture):
    primary, replica = replication
    with replica.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@slave_parallel_threads, @@slave_parallel_mode")
        assert cur.fetchone() == (4, "optimistic")
    database, capture, workload = _replica_capture_under_workload(replication, replica_capture, "ro_lag", 3000, 3)
    behind: list[bool] = []

    def lagging() -> None:  # the replica is behind the primary while chunks 6-19 are read
        behind.append(_gtid(replica) != _gtid(primary))

    def lag(source) -> ReplicaAt:
        lag = ReplicaAt(source)
        lag.at(6, "LOW", lambda: replica.execute("STOP SLAVE SQL_THREAD"))
        lag.at(12, "LOW", lagging)
        return lag.at(20, "LOW", lambda: replica.execute("START SLAVE SQL_THREAD"))

    try:
        summary = run_dump(capture, f"{database}.ledger", 37, wrap=lag)
    finally:
        workload.stop()
    _landed(primary, replica, capture)

    state, stats = reconciled_state(capture, database, "ledger")
    assert state == table_state(primary, database, "ledger") == table_state(replica, database, "ledger")
    assert behind == [True] and workload.transactions > 50
    assert stats.chunks == summary["tables"][0]["chunks"] > 50 and stats.chunks_pending == 0
    metas = sorted((read_chunk_meta(p) for p in chunk_files(capture.zone, database, "ledger")), key=lambda m: m.chunk)
    lows = [m.low_lsn for m in metas]
    assert None not in lows and lows == sorted(lows)
    assert len(set(lows[6:18])) == 1  # the replica applied nothing meanwhile: one snapshot position
    _no_writes(replica, primary, capture)


def test_a_readonly_dump_resumes_after_the_replica_restarts(replication, replica_capture):
    primary, replica = replication
    database, capture, workload = _replica_capture_under_workload(replication, replica_capture, "ro_restart", 1000, 4)

    def restart() -> None:
        replica.stop()
        replica.start()

    request = DumpRequest(dump_id="restart", tables=[f"{database}.ledger"], settings=DumpSettings(chunk_size=50))
    try:
        with pytest.raises(SourceConnectionError):
            run_dump(capture, request, wrap=lambda source: ReplicaAt(source).at(8, "HIGH", restart))
        summary = run_dump(capture, request)  # the rerun resumes after chunk 7
    finally:
        workload.stop()
    _landed(primary, replica, capture, timeout=90)
    assert "capture.source_lost" in capture.log()
    state, stats = reconciled_state(capture, database, "ledger")
    assert state == table_state(primary, database, "ledger")
    assert stats.chunks == summary["tables"][0]["chunks"] and stats.chunks_pending == 0
    _no_writes(replica, primary, capture)


def test_readonly_refuses_a_replica_that_does_not_log_what_it_applies(replication, tmp_path):
    primary, _ = replication
    database = _database(primary, "ro_bare")
    populate_ledger(primary, database, 10)
    bare = MariaDB(tmp_path / "bare", extra_options=["--server-id=3", "--log-slave-updates=0"])
    bare.start()
    try:
        bare.execute(
            f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, MASTER_USER='root', "
            "MASTER_USE_GTID=slave_pos",
            "START SLAVE",
        )
        wait_replicated(primary, bare)
        config = SourceConfig(
            kind="mariadb", port=bare.port, user=READER[0], password=READER[1], server_id=77, watermarks="readonly"
        )
        source = open_chunk_source("src", config)
        try:
            with pytest.raises(DumpInputError, match="replica with log_slave_updates OFF: what it applies"):
                DumpEngine(source, LandingZone(tmp_path / "landing", "src")).run(
                    DumpRequest(tables=[f"{database}.ledger"])
                )
        finally:
            source.close()
        assert not chunk_files(LandingZone(tmp_path / "landing", "src"), database, "ledger")
    finally:
        bare.destroy()


def test_readonly_refuses_a_dump_of_another_server_than_capture_reads(replication, replica_capture, tmp_path):
    """Capture reads the primary, the dump is pointed at its replica (say, an Airflow connection whose
    host is not capture's): the binlog positions of the two do not compare, and the dump refuses
    before it reads anything, naming both servers. Pointed at the primary, it runs."""
    primary, replica = replication
    database = _database(primary, "ro_other")
    populate_ledger(primary, database, 10)
    wait_replicated(primary, replica)
    capture = replica_capture(database, port=primary.port).start()
    capture.wait_running()
    wait_for(lambda: (capture.zone.checkpoint() or None) and "server" in capture.zone.checkpoint().resume, 30)
    for server, refused in ((replica, True), (primary, False)):
        config = SourceConfig(
            kind="mariadb", port=server.port, user=READER[0], password=READER[1], server_id=78, watermarks="readonly"
        )
        if refused:
            with pytest.raises(
                DumpInputError, match=rf"this dump reads .*:{replica.port} .*read from .*:{primary.port}"
            ):
                run_dump(capture, DumpRequest(tables=[f"{database}.ledger"]), config=config)
            assert not chunk_files(capture.zone, database, "ledger")
        else:
            run_dump(capture, DumpRequest(tables=[f"{database}.ledger"]), config=config)
    wait_chunks_closed(capture, database, "ledger", 10)
    assert reconciled_state(capture, database, "ledger")[0] == table_state(primary, database, "ledger")


def test_readonly_refuses_a_server_without_gtid_strict_mode(mariadb, database, make_capture):
    """With gtid_strict_mode OFF a domain's GTIDs may repeat or go backwards, and capture's resume by
    GTID state would no longer name its frontier's binlog position: both the dump and capture's
    preflight refuse a read-only source there, with the reason and the fix."""
    populate_ledger(mariadb, database, 5)
    mariadb.execute("SET GLOBAL gtid_strict_mode = 0")
    try:
        capture = make_capture([f"{database}.*"], watermarks="readonly")
        config = capture.config.source("src")
        with pytest.raises(DumpInputError, match=r"gtid_strict_mode is OFF: .* SET GLOBAL gtid_strict_mode=ON"):
            run_dump(capture, DumpRequest(tables=[f"{database}.ledger"]))
        with pytest.raises(PreflightError, match="cannot place read-only watermarks:\n  - gtid_strict_mode is OFF"):
            MySqlSource("src", config).preflight()
        assert capture.run_to_exit(timeout=60) != 0
        assert "gtid_strict_mode is OFF" in capture.log()
    finally:
        mariadb.execute("SET GLOBAL gtid_strict_mode = 1")
    assert not chunk_files(capture.zone, database, "ledger")


def _no_commit_since(mariadb: MariaDB, gtid: str) -> None:
    """No transaction committed on the server since `gtid` was read (the test did not nudge; a
    binlog rotation writes events, but no transaction)."""
    assert _gtid(mariadb) == gtid


def _heartbeat_frontier(mariadb: MariaDB, capture: CaptureProcess):
    """Capture's frontier once a heartbeat placed it at the binlog's end (minor > 0): with nothing
    committed, at the end of the last transaction or of a rotation's events."""

    def placed():
        frontier = capture.zone.checkpoint().frontier
        return frontier if frontier.minor > 0 and frontier.major == position_lsn(*_binlog_end(mariadb)).major else None

    return wait_for(placed, 10, what="a heartbeat's frontier at the binlog end")


def _binlog_end(mariadb: MariaDB) -> tuple[str, int]:
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    return file, int(pos)


def test_a_readonly_dump_of_an_idle_server_closes_on_heartbeats(mariadb, database, make_capture):
    """On a server where nothing commits, the binlog heartbeat (0.2 s here) names the binlog end that
    capture has read to, and the frontier moves there: every read-only chunk, the last one included,
    closes within about a heartbeat and a flush, with no commit after the dump."""
    capture = _readonly_capture(mariadb, database, make_capture, 50)
    wait_until_landed(mariadb, capture, nudge_first=False)
    end, gtid = _binlog_end(mariadb), _gtid(mariadb)
    run_dump(capture, f"{database}.ledger", 20)
    dumped = time.monotonic()
    wait_chunks_closed(capture, database, "ledger", 5)
    closed_s = time.monotonic() - dumped
    state, stats = reconciled_state(capture, database, "ledger")
    assert stats.chunks == 3 and state == table_state(mariadb, database, "ledger")
    _no_commit_since(mariadb, gtid)
    frontier = _heartbeat_frontier(mariadb, capture)  # moved by heartbeats alone
    assert closed_s < 5
    # a binlog rotation commits no transaction: the heartbeats then name the new file's end (after
    # the binlog checkpoint event the server writes there a moment later), and a second dump's
    # chunks close there
    mariadb.execute("FLUSH BINARY LOGS")
    assert _binlog_end(mariadb)[0] != end[0]
    again = run_dump(capture, f"{database}.ledger", 20)
    wait_chunks_closed(capture, database, "ledger", 5)
    state, stats = reconciled_state(capture, database, "ledger")
    assert stats.chunks == 6 and state == table_state(mariadb, database, "ledger") and again["rows"] == 50
    _no_commit_since(mariadb, gtid)
    frontier = _heartbeat_frontier(mariadb, capture)
    assert frontier.major >> 32 > position_lsn(*end).major >> 32  # in the new file
    # and the log goes on from there: the next commit lands past the heartbeat's frontier, exactly once
    mariadb.execute("UPDATE ledger SET v = v + 1 WHERE id = 7", database=database)
    wait_until_landed(mariadb, capture, nudge_first=False)
    (event,) = [e for e in capture.events(database, "ledger") if e["_op"] == "u"]
    assert int(event["_lsn"]) > frontier.encode()
    state, _ = reconciled_state(capture, database, "ledger")
    assert state == table_state(mariadb, database, "ledger")


def test_a_readonly_dump_of_an_idle_server_closes_across_a_capture_restart(mariadb, database, make_capture):
    """Capture killed during a read-only dump of an idle server and started again: it resumes from a
    checkpoint a heartbeat placed (at the binlog end, minor > 0), lands nothing twice, and its own
    heartbeats close the chunks, the ones whose HIGH was read while it was down included."""
    capture = _readonly_capture(mariadb, database, make_capture, 60)
    mariadb.execute("UPDATE ledger SET v = v + 1 WHERE id <= 3", database=database)
    wait_until_landed(mariadb, capture, nudge_first=False)
    gtid = _gtid(mariadb)
    _heartbeat_frontier(mariadb, capture)
    run_dump(
        capture,
        f"{database}.ledger",
        15,
        wrap=lambda source: (
            ReplicaAt(source).at(2, "HIGH", capture.kill).at(4, "LOW", lambda: capture.start().wait_running())
        ),
    )
    wait_chunks_closed(capture, database, "ledger", 10)
    state, stats = reconciled_state(capture, database, "ledger")
    assert stats.chunks == 5 and state == table_state(mariadb, database, "ledger")
    _no_commit_since(mariadb, gtid)
    _heartbeat_frontier(mariadb, capture)
    assert len(capture.events(database, "ledger")) == 3  # the update before the dump, landed once


def test_changes_committed_between_the_snapshot_and_the_chunk_file_win_over_the_chunk(mariadb, database, make_capture):
    """Writes that commit right after a chunk's snapshot began (before its SELECT) and right before
    it ends (after the SELECT) are not in the chunk's rows: they are in its window, so the chunk's
    rows of those keys are dropped. With LOW read anywhere later than the snapshot (say, the binlog
    end after the SELECT), they would fall before the window and the chunk's older rows win."""
    capture = _readonly_capture(mariadb, database, make_capture, 100)

    def racing(source) -> AlterAt:
        racing = AlterAt(source, lambda sql: mariadb.execute(sql, database=database))
        racing.at(2, "LOW", "UPDATE ledger SET v = -2, note = 'after low' WHERE id IN (12, 13)")
        racing.at(2, "HIGH", "DELETE FROM ledger WHERE id = 15")
        racing.at(3, "HIGH", "UPDATE ledger SET id = 1000 WHERE id = 25")
        racing.at(4, "LOW", "DELETE FROM ledger WHERE id = 35")
        return racing.at(4, "HIGH", "INSERT INTO ledger VALUES (35, -4, 'back'), (101, -4, 'past the end')")

    run_dump(capture, f"{database}.ledger", 10, wrap=racing)
    wait_until_landed(mariadb, capture)
    state, stats = reconciled_state(capture, database, "ledger")
    assert stats.chunks_pending == 0
    assert stats.dropped_by_window == 5  # 12, 13, 15, 25 and 35: their events are in their chunk's window
    assert state == table_state(mariadb, database, "ledger")
    assert state[(12,)]["v"] == -2 and (15,) not in state and (1000,) in state and (25,) not in state
    assert state[(35,)]["note"] == "back"


class OvertakenAt:
    """The real chunk source, except that right after HIGH of one chunk is placed (before the engine
    writes its HIGH file) a commit is made and landed past it, as if the dump had stalled there.
    Hooked where HIGH is placed, not where it is read: a commit landed before the read would only
    move the binlog end the HIGH is read from (under load the test then saw no overtaking)."""

    def __init__(self, source, chunk: int, overtake) -> None:
        self._source, self._chunk, self._overtake = source, chunk, overtake
        self.lows: list[tuple[int, str]] = []
        self._armed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)

    def write_watermark(self, mark, table=None) -> None:
        self._source.write_watermark(mark, table)
        if mark.kind == "LOW":
            self.lows.append((mark.chunk, mark.id))
        elif mark.chunk == self._chunk and [c for c, _ in self.lows].count(mark.chunk) == 1:
            self._armed = True

    def place_high(self, high: int, frontier: int | None) -> int:
        placed = self._source.place_high(high, frontier)
        if self._armed:
            self._armed = False
            self._overtake(placed)
        return placed


def test_a_chunk_whose_high_the_frontier_passed_before_its_file_was_written_is_read_again(
    mariadb, database, make_capture
):
    """A merge that read a frontier past a read-only HIGH before its file existed would skip the chunk
    for good; the dump sees the frontier past HIGH once the file is written and reads the chunk again."""
    capture = _readonly_capture(mariadb, database, make_capture, 100)

    def overtake(high: int) -> None:
        nudge(mariadb)
        wait_for(lambda: capture.zone.checkpoint().frontier.encode() > high, 30, what="the frontier past HIGH")

    source = open_chunk_source("src", capture.config.source("src"))
    stalled = OvertakenAt(source, 3, overtake)
    try:
        DumpEngine(stalled, capture.zone).run(
            DumpRequest(tables=[f"{database}.ledger"], settings=DumpSettings(chunk_size=20))
        )
    finally:
        source.close()
    wait_until_landed(mariadb, capture)
    assert [c for c, _ in stalled.lows] == [1, 2, 3, 3, 4, 5, 6]  # chunk 3 read twice
    metas = {m.chunk: m for m in (read_chunk_meta(p) for p in chunk_files(capture.zone, database, "ledger"))}
    assert metas[3].low_id == stalled.lows[3][1]
    state, stats = reconciled_state(capture, database, "ledger")
    assert (stats.chunks, stats.chunks_pending) == (6, 0)
    assert state == table_state(mariadb, database, "ledger")


def test_the_airflow_merge_waits_for_read_only_highs(mariadb, database, make_capture):
    """`logtide_dump`'s `landed` task (wait_for_high_watermarks) takes a read-only chunk's HIGH from its
    HIGH file: it waits until the frontier passes it, which on an idle server a heartbeat does."""
    from logtide_airflow.merge import wait_for_high_watermarks

    capture = _readonly_capture(mariadb, database, make_capture, 30)
    wait_until_landed(mariadb, capture, nudge_first=False)
    run_dump(capture, DumpRequest(dump_id="af", tables=[f"{database}.ledger"]))
    table = f"{database}.ledger"
    landed = wait_for_high_watermarks(capture.zone, "af", [table], timeout_s=5, poll_s=0.1)[table]  # no commit
    (meta,) = [read_chunk_meta(p) for p in chunk_files(capture.zone, database, "ledger")]
    assert landed["chunk"] == 1 and meta.low_lsn <= int(landed["high_lsn"]) < int(landed["frontier"])


def test_a_readonly_dump_of_an_idle_server_closes_across_rotations_inside_windows(mariadb, database, make_capture):
    """FLUSH BINARY LOGS inside read-only windows of an idle server (right after LOW of one chunk,
    right before HIGH of another: the window spans two files), and a TRUNCATE with a refill inside a
    third: every chunk closes on heartbeats alone (nothing commits after the dump), and the
    reconciled landing zone equals the table."""
    capture = _readonly_capture(mariadb, database, make_capture, 80)
    wait_until_landed(mariadb, capture, nudge_first=False)
    run_dump(
        capture,
        f"{database}.ledger",
        20,
        wrap=_statements_at(mariadb, database, (1, "LOW", FLUSH), (2, "HIGH", FLUSH), (3, "HIGH", REFILL)),
    )
    gtid = _gtid(mariadb)
    wait_chunks_closed(capture, database, "ledger", 10)
    state, stats = reconciled_state(capture, database, "ledger")
    assert state == table_state(mariadb, database, "ledger") and len(state) == 21, stats
    _no_commit_since(mariadb, gtid)


@pytest.mark.parametrize("watermarks", ["readonly", "table"])
def test_a_truncate_right_after_a_chunks_low_reconciles_to_the_table(mariadb, database, make_capture, watermarks):
    """A TRUNCATE and a refill right after a chunk's LOW, before its SELECT (read-only: after its
    consistent snapshot began): the dump finishes and the reconciled landing zone equals the table."""
    capture = _readonly_capture(mariadb, database, make_capture, 80, watermarks=watermarks)
    wait_until_landed(mariadb, capture, nudge_first=False)
    run_dump(
        capture,
        f"{database}.ledger",
        20,
        wrap=_statements_at(mariadb, database, (2, "LOW", REFILL)),
    )
    wait_until_landed(mariadb, capture)
    wait_chunks_closed(capture, database, "ledger", 10)
    state, stats = reconciled_state(capture, database, "ledger")
    assert state == table_state(mariadb, database, "ledger") and len(state) == 21, stats
