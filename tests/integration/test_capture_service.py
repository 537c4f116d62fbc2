"""The capture service against a real MariaDB: what lands, in which order, across stops and restarts."""

from __future__ import annotations

import json
import re
import signal
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from capture.sources.base import Watermark
from capture.sources.mysql.reader import file_number, read_timeout_s
from tests.integration.events import op_keys, write_watermark
from tests.servers import wait_for

pytestmark = pytest.mark.integration


def _get(capture, path: str) -> tuple[int, str]:
    """GET `path` from the capture's metrics port: (status, body)."""
    port = capture.config.source(capture.source).metrics.port
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _health_turns(capture, status: int, timeout: float = 10) -> dict:
    """Wait until /health answers `status`; its JSON."""
    answer = wait_for(lambda: (got := _get(capture, "/health"))[0] == status and got, timeout, what=f"/health {status}")
    return json.loads(answer[1])


def _metrics(capture) -> dict[str, float]:
    """The capture's /metrics samples of its source, by sample name."""
    status, text = _get(capture, "/metrics")
    assert status == 200
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.labels.get("source") == capture.source
    }


def test_row_changes_land_in_commit_order_with_images(mariadb, database, make_capture):
    mariadb.execute(
        "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(20), qty INT)",
        "CREATE TABLE skipped (id INT PRIMARY KEY)",
        database=database,
    )
    capture = make_capture([f"{database}.*"], exclude=[f"{database}.skipped"]).start()
    capture.wait_running()
    with mariadb.connect(database, autocommit=False) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO items VALUES (1, 'one', 1), (2, 'two', 2)")
        cur.execute("INSERT INTO skipped VALUES (1)")
        conn.commit()
        cur.execute("UPDATE items SET qty = 10 WHERE id = 1")
        cur.execute("UPDATE items SET id = 20 WHERE id = 2")  # key change
        conn.commit()
        conn.commit()
    write_watermark(capture, Watermark("d1", f"{database}.items", 1, "LOW", "wm-1"))
    mariadb.execute("DELETE FROM items WHERE id = 1", database=database)

    events = capture.wait_events(database, "items", 6)
    assert op_keys(events) == [
        ("c", None, 1),
        ("c", None, 2),
        ("u", 1, 1),
        ("d", 2, None),
        ("c", None, 20),
        ("d", 1, None),
    ]
    assert events[2]["before"] == {"id": 1, "name": "one", "qty": 1}
    assert events[2]["after"] == {"id": 1, "name": "one", "qty": 10}
    assert events[4]["after"] == {"id": 20, "name": "two", "qty": 2}
    lsns = [int(e["_lsn"]) for e in events]
    assert lsns == sorted(lsns) and len(set(lsns)) == len(lsns)
    # one transaction, one id and one commit time
    assert events[0]["_txid"] == events[1]["_txid"] != events[2]["_txid"] == events[4]["_txid"]
    assert all(e["_txid"].count("-") == 2 for e in events)  # MariaDB GTIDs
    assert not any(e["_watermark"] for e in events)

    watermarks = capture.wait_events("logtide", "watermarks", 1)
    mark = watermarks[-1]["after"]
    assert watermarks[-1]["_watermark"] is True
    assert (mark["dump_id"], mark["table_name"], mark["chunk"], mark["kind"], mark["watermark_id"]) == (
        "d1",
        f"{database}.items",
        1,
        "LOW",
        "wm-1",
    )
    assert lsns[-2] < int(watermarks[-1]["_lsn"]) < lsns[-1]  # between the transactions around it
    assert capture.events(database, "skipped") == []
    assert capture.stop() == 0
    assert "capture.stopped" in capture.log()


def test_ddl_goes_to_schema_history_and_new_columns_are_carried(mariadb, database, make_capture):
    mariadb.execute("CREATE TABLE evolving (id INT PRIMARY KEY, a INT)", database=database)
    capture = make_capture([f"{database}.*"], column_rewrites="accept").start()  # ADD COLUMN ... DEFAULT
    capture.wait_running()
    mariadb.execute(
        "INSERT INTO evolving VALUES (1, 1)",
        "ALTER TABLE evolving ADD COLUMN b VARCHAR(10) DEFAULT 'x'",
        "INSERT INTO evolving VALUES (2, 2, 'two')",
        "UPDATE evolving SET a = 11 WHERE id = 1",
        database=database,
    )
    events = capture.wait_events(database, "evolving", 3)
    assert events[0]["after"] == {"id": 1, "a": 1, "b": None}  # older file, column added on read
    assert events[1]["after"] == {"id": 2, "a": 2, "b": "two"}
    assert events[2]["before"] == {"id": 1, "a": 1, "b": "x"}

    history = capture.zone.read_schema_history().to_pylist()
    ddl = [h for h in history if h["kind"] == "ddl" and "ALTER TABLE" in h["statement"]]
    assert len(ddl) == 1 and ddl[0]["schema"] == database
    versions = [h for h in history if h["kind"] == "table" and h["table"] == "evolving"]
    assert [[c["name"] for c in v["columns"]] for v in versions] == [["id", "a"], ["id", "a", "b"]]
    assert versions[0]["_lsn"] < ddl[0]["_lsn"] < versions[1]["_lsn"]
    assert versions[1]["key"] == ["id"]


def test_sigterm_stops_cleanly_and_restart_resumes_exactly(mariadb, database, start_capture):
    capture = start_capture("CREATE TABLE t (id INT PRIMARY KEY)")
    mariadb.execute("INSERT INTO t SELECT seq FROM seq_1_to_100", database=database)
    capture.wait_events(database, "t", 100)
    assert capture.stop(signal.SIGTERM) == 0
    mariadb.execute("INSERT INTO t SELECT seq FROM seq_101_to_250", database=database)  # while stopped
    capture.start()
    events = capture.wait_events(database, "t", 250)
    assert [e["after"]["id"] for e in events] == list(range(1, 251))
    assert "capture.resuming" in capture.log()
    assert capture.stop(signal.SIGINT) == 0


def test_second_instance_for_the_same_source_is_refused(database, make_capture, start_capture):
    start_capture()  # the first instance, left running
    second = make_capture([f"{database}.*"])
    assert second.run_to_exit() == 2
    assert "another capture instance" in second.log()


def test_survives_a_database_restart(mariadb, database, start_capture):
    capture = start_capture("CREATE TABLE t (id INT PRIMARY KEY)")
    mariadb.execute("INSERT INTO t SELECT seq FROM seq_1_to_50", database=database)
    capture.wait_events(database, "t", 50)
    assert _get(capture, "/health")[0] == 200
    mariadb.stop()
    try:
        health = _health_turns(capture, 503)
        assert health["state"] == "reconnecting" and health["healthy"] is False and health["error"]
    finally:
        mariadb.start()
    mariadb.execute("INSERT INTO t SELECT seq FROM seq_51_to_120", database=database)
    events = capture.wait_events(database, "t", 120, timeout=60)
    assert [e["after"]["id"] for e in events] == list(range(1, 121))
    assert "capture.source_lost" in capture.log()
    assert capture.process.poll() is None
    health = _health_turns(capture, 200)
    assert health["state"] == "running" and "error" not in health


def test_purged_checkpoint_stops_with_instructions_and_reset_recovers(mariadb, database, start_capture):
    capture = start_capture("CREATE TABLE t (id INT PRIMARY KEY)")
    assert capture.stop() == 0
    before = capture.zone.checkpoint()
    mariadb.execute("INSERT INTO t VALUES (1)", database=database)

    def purged() -> bool:
        # the server keeps a file until its binlog checkpoint and dump threads have moved on
        mariadb.execute("FLUSH BINARY LOGS")
        current = mariadb_query(mariadb, "SHOW MASTER STATUS")[0][0]
        mariadb.execute(f"PURGE BINARY LOGS TO '{current}'")
        return before.resume["file"] not in [r[0] for r in mariadb_query(mariadb, "SHOW BINARY LOGS")]

    wait_for(purged, 30, interval=0.5, what="the checkpoint's binlog to be purged")

    files = landed_files(capture)
    assert capture.run_to_exit() == 2
    log = capture.log()
    assert "has been purged" in log and "--reset" in log and "full dump" in log
    assert capture.zone.checkpoint() == before and landed_files(capture) == files  # refused: nothing written

    capture.start("--reset")
    wait_for(lambda: "capture.reset" in capture.log(), 30, what="reset")
    mariadb.execute("INSERT INTO t VALUES (2)", database=database)
    events = capture.wait_events(database, "t", 1)
    assert [e["after"]["id"] for e in events] == [2]
    assert capture.zone.checkpoint().frontier > before.frontier


def landed_files(capture) -> dict[str, bytes]:
    """Every file of the capture's landing zone with its content (the instance lock file aside)."""
    root = capture.zone.root
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file() and "lock" not in p.name}


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("binlog_row_metadata", "MINIMAL", "binlog_row_metadata is MINIMAL, must be FULL: SET GLOBAL "
         "binlog_row_metadata='FULL' and put binlog_row_metadata=FULL under [mysqld] in the config"),
        ("binlog_format", "STATEMENT", "binlog_format is STATEMENT, must be ROW: SET GLOBAL binlog_format='ROW' "
         "and put binlog_format=ROW under [mysqld] in the config"),
    ],
)  # fmt: skip
def test_a_wrong_binlog_setting_is_refused_with_its_fix_and_nothing_written(
    mariadb, database, make_capture, setting, value, message
):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=database)
    mariadb.execute(f"SET GLOBAL {setting} = '{value}'")
    try:
        capture = make_capture([f"{database}.*"])
        mariadb.execute("INSERT INTO t VALUES (1)", database=database)
        assert capture.run_to_exit() == 2
        assert f"error: source src (mariadb 127.0.0.1:{mariadb.port}) is not ready for capture:" in capture.log()
        assert message in capture.log()
        assert landed_files(capture) == {}  # no checkpoint, no event file, no schema history
    finally:
        mariadb.execute(
            f"SET GLOBAL {setting} = 'ROW'" if setting == "binlog_format" else f"SET GLOBAL {setting} = 'FULL'"
        )


def test_a_user_without_replication_grants_is_told_each_grant_and_nothing_is_written(mariadb, database, make_capture):
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY)",
        "DROP USER IF EXISTS 'noreplica'@'%'",
        "CREATE USER 'noreplica'@'%' IDENTIFIED BY 'pw'",
        f"GRANT SELECT ON `{database}`.* TO 'noreplica'@'%'",
        database=database,
    )
    capture = make_capture([f"{database}.*"], user="noreplica")
    assert capture.run_to_exit(env={"TEST_DB_PASSWORD": "pw"}) == 2
    log = capture.log()
    assert "user 'noreplica' lacks REPLICATION SLAVE: GRANT REPLICATION SLAVE ON *.* TO 'noreplica'" in log
    assert "user 'noreplica' may not read binlog positions: GRANT BINLOG MONITOR ON *.* TO 'noreplica'" in log
    assert landed_files(capture) == {}


def mariadb_query(mariadb, sql: str) -> list[tuple]:
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def test_metrics_and_health_endpoints(mariadb, database, make_capture):
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)", "CREATE TABLE skipped (id INT PRIMARY KEY)", database=database
    )
    capture = make_capture([f"{database}.*"], exclude=[f"{database}.skipped"]).start()
    capture.wait_running()
    committed_at = 1_700_000_000  # the session's clock, which the binlog carries as commit time
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.execute(f"SET timestamp = {committed_at - 60}")
        cur.execute("INSERT INTO t SELECT seq, 0 FROM seq_1_to_30")  # 30 creates
        cur.execute("INSERT INTO skipped VALUES (1), (2)")  # not captured: not counted
        cur.execute(f"SET timestamp = {committed_at}")
        cur.execute("UPDATE t SET v = 1 WHERE id <= 10")  # 10 updates
        cur.execute("DELETE FROM t WHERE id > 25")  # 5 deletes
    capture.wait_events(database, "t", 45)
    file, pos = mariadb_query(mariadb, "SHOW MASTER STATUS")[0][:2]

    def caught_up() -> dict[str, float] | None:
        values = _metrics(capture)
        done = values["logtide_capture_events_total"] >= 45 and values["logtide_capture_lag_seconds"] == 0
        return values if done else None

    values = wait_for(caught_up, 10, what="45 events and a heartbeat in the metrics")
    assert values["logtide_capture_events_total"] == 45
    assert values["logtide_capture_last_commit_timestamp_seconds"] == committed_at
    # the exact binlog position, as SHOW MASTER STATUS and the checkpoint give it
    assert values["logtide_capture_frontier_lsn_high"] == file_number(file)
    assert values["logtide_capture_frontier_lsn_low"] == pos
    checkpoint = capture.zone.checkpoint()
    assert (checkpoint.resume["file"], checkpoint.resume["pos"]) == (file, pos)
    assert "logtide_capture_frontier_lsn" not in values  # a float64 cannot hold the encoded LSN
    for name in ("logtide_capture_rows_per_second", "logtide_capture_lag_bytes", "logtide_capture_up"):
        assert name in values
    status, body = _get(capture, "/health")
    health = json.loads(body)
    assert status == 200 and health["healthy"] is True and health["state"] == "running"
    # the frontier as text: it passes 2**64
    assert health["position"] == checkpoint.resume and health["frontier"] == str(checkpoint.frontier.encode())


def test_user_errors_and_passwords_never_reach_the_log(mariadb, database, make_capture):
    secret = "Sup3r-Secret-Pa55"
    mariadb.execute(
        "DROP USER IF EXISTS 'weak'@'%'",
        f"CREATE USER 'weak'@'%' IDENTIFIED BY '{secret}'",
        f"GRANT SELECT ON `{database}`.* TO 'weak'@'%'",
    )
    capture = make_capture([f"{database}.*"], user="weak")
    assert capture.run_to_exit(env={"TEST_DB_PASSWORD": secret}) == 2
    log = capture.log()
    assert "lacks REPLICATION SLAVE" in log and "BINLOG MONITOR" in log
    assert secret not in log

    assert capture.run_to_exit(env={"TEST_DB_PASSWORD": "wrong-" + secret}) == 2
    assert "access denied" in capture.log() and secret not in capture.log()

    mariadb.execute("GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'weak'@'%'")
    capture.start(env={"TEST_DB_PASSWORD": secret})
    capture.wait_running()
    assert capture.stop() == 0
    assert secret not in capture.log()


def test_preflight_names_every_wrong_setting(mariadb, make_capture):
    mariadb.execute(
        "SET GLOBAL binlog_row_metadata = 'MINIMAL'",
        "SET GLOBAL binlog_format = 'MIXED'",
        "SET GLOBAL binlog_row_image = 'MINIMAL'",
    )
    try:
        capture = make_capture(["nothing.*"])
        assert capture.run_to_exit() == 2
        log = capture.log()
        assert "binlog_row_metadata is MINIMAL, must be FULL: SET GLOBAL binlog_row_metadata='FULL'" in log
        assert "binlog_format is MIXED, must be ROW" in log
        assert (
            "binlog_row_image is MINIMAL, must be FULL: SET GLOBAL binlog_row_image='FULL' "
            "and put binlog_row_image=FULL under [mysqld] in the config"
        ) in log
        assert capture.zone.checkpoint() is None
    finally:
        mariadb.execute(
            "SET GLOBAL binlog_row_metadata = 'FULL'",
            "SET GLOBAL binlog_format = 'ROW'",
            "SET GLOBAL binlog_row_image = 'FULL'",
        )


def _fields(line: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)', line))


def test_idle_past_the_read_timeout_stays_healthy_and_logs_progress_not_rows(mariadb, database, make_capture):
    """An idle source beyond the binlog connection's read timeout: heartbeats keep it open and
    the lag at 0, `capture.progress` still reports; rows and the password never reach the log.
    The user holds its replication privileges through a default role, as many setups grant them."""
    secret, marker = "Idle-Pa55-word", "ROWMARKER-7f3a"
    mariadb.execute(
        "DROP USER IF EXISTS 'idler'@'%'",
        "DROP ROLE IF EXISTS logtide_capture",
        f"CREATE USER 'idler'@'%' IDENTIFIED BY '{secret}'",
        "CREATE ROLE logtide_capture",
        "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO logtide_capture",
        "GRANT logtide_capture TO 'idler'@'%'",
        "SET DEFAULT ROLE logtide_capture FOR 'idler'@'%'",
        f"GRANT SELECT ON `{database}`.* TO 'idler'@'%'",
        "CREATE TABLE notes (id INT PRIMARY KEY, body VARCHAR(60), data BLOB)",
        database=database,
    )
    capture = make_capture([f"{database}.*"], user="idler", log_level="DEBUG")  # debug lines are checked too
    capture.start(env={"TEST_DB_PASSWORD": secret})
    capture.wait_running()
    mariadb.execute(
        f"INSERT INTO notes VALUES (1, '{marker} one', '{marker}'), (2, 'two', NULL)",
        f"UPDATE notes SET body = '{marker} two' WHERE id = 2",
        "DELETE FROM notes WHERE id = 1",
        database=database,
    )
    capture.wait_events(database, "notes", 4)
    idle = read_timeout_s(capture.config.source("src").heartbeat_s) + 1.0
    deadline = time.monotonic() + idle
    while time.monotonic() < deadline:  # nothing written anywhere: only heartbeats
        status, body = _get(capture, "/health")
        assert status == 200, body
        time.sleep(0.5)
    values = _metrics(capture)
    assert values["logtide_capture_lag_seconds"] == 0  # heartbeats: nothing left to read
    assert values["logtide_capture_lag_bytes"] == 0  # measured (NaN until then) and caught up
    assert values["logtide_capture_reconnects_total"] == 0
    assert "capture.source_lost" not in capture.log()

    # progress is reported while idle too: where it stands, how many events, no lag
    checkpoint, idle_log = capture.zone.checkpoint(), capture.log()
    progress = [_fields(line) for line in idle_log.splitlines() if "event=capture.progress" in line]
    assert progress, idle_log
    assert progress[-1]["events"] == "4" and float(progress[-1]["lag_s"]) == 0
    assert (progress[-1]["file"], int(progress[-1]["pos"])) == (checkpoint.resume["file"], checkpoint.resume["pos"])
    assert int(progress[-1]["frontier"]) == checkpoint.frontier.encode()

    mariadb.execute("INSERT INTO notes VALUES (3, 'after the idle', NULL)", database=database)
    assert capture.wait_events(database, "notes", 5, timeout=5)[-1]["after"]["id"] == 3
    assert capture.stop() == 0
    log = capture.log()
    assert marker not in log and secret not in log
