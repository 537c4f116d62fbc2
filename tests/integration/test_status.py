"""`logtide status` against a real MariaDB (and PostgreSQL) with the capture service running: lag,
dump progress, and the applied frontier read from Iceberg tables a real merge wrote."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from capture.dump.progress import dump_dir
from capture.landing.alive import ALIVE_STALE_S
from capture.status import capture_running, capture_state, collect, render
from tests.conftest import ROOT
from tests.integration.dumping import run_dump, wait_until_landed
from tests.integration.postgres.conftest import make_pg_capture, pg_database  # noqa: F401 - fixtures
from tests.servers import free_port, wait_for

pytestmark = pytest.mark.integration


def _cli(config: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "capture.cli", "--config", str(config), *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)


def _status(config: Path) -> dict:
    result = _cli(config, "status", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)[0]


def _insert_each_in_its_own_transaction(mariadb, database: str, first: int, count: int) -> None:
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        for n in range(first, first + count):
            cur.execute("INSERT INTO t (id, v) VALUES (%s, %s)", (n, n))


def test_lag_grows_while_capture_is_stopped_and_returns_to_zero(mariadb, database, start_capture):
    capture = start_capture("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    _insert_each_in_its_own_transaction(mariadb, database, 1, 5)
    wait_until_landed(mariadb, capture)
    caught_up = _status(capture.config_path)
    assert caught_up["lag"]["bytes"] == 0 and caught_up["lag"]["transactions"] == 0
    assert caught_up["lag"]["lag_s"] == 0.0 and caught_up["lag"]["last_commit_at"] is not None
    assert caught_up["events_by_table"] == {f"{database}.t": 5}
    assert caught_up["capture"] == {"running": True, "reason": f"a process holds {capture.zone.root}/capture.lock"}
    port = capture.config.source("src").metrics.port  # the instance's own view: it leads, with that epoch
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
        health = json.loads(response.read())
    assert health["leader"] is True and health["epoch"] == caught_up["epoch"] and health["lag_s"] == 0.0
    assert health["instance"].endswith(f":{capture.process.pid}")
    # what an Airflow merge logs (plugins/logtide_airflow/merge.py): the lock file held, or not
    running = capture_state(capture.config, "src", capture.zone)
    assert running["running"] is True and running["frontier"] == caught_up["frontier"], running
    assert running["last_commit_at"] == caught_up["lag"]["last_commit_at"]
    # kept in the checkpoint by the writer (no file read), equal to the newest `_commit_ts` of the files
    kept = capture.zone.checkpoint().last_commit_at
    assert kept is not None and kept == capture.zone.scan_newest_commit(), kept

    assert capture.stop() == 0
    stopped = capture_state(capture.config, "src", capture.zone)
    assert stopped["running"] is False and stopped["reason"].startswith("no process holds "), stopped
    _insert_each_in_its_own_transaction(mariadb, database, 100, 40)
    time.sleep(1.2)  # the binlog's commit times have a resolution of one second
    behind = _status(capture.config_path)
    lag = behind["lag"]
    assert lag["bytes"] > 40 * 50 and lag["transactions"] == 40
    assert lag["lag_s"] >= 1.0 and lag["lag_s"] == lag["since_last_commit_s"]
    text = _cli(capture.config_path, "status").stdout
    assert f"lag {lag['bytes']} bytes, 40 transactions" in text
    assert f"capture not running (no process holds {capture.zone.root}/capture.lock here and no heartbeat)" in text

    capture.start()
    capture.wait_events(database, "t", 45)
    wait_until_landed(mariadb, capture)
    again = _status(capture.config_path)["lag"]
    assert again["bytes"] == 0 and again["transactions"] == 0 and again["lag_s"] == 0.0
    capture.stop()


# what Airflow's `landed_<source>` (capture_stopped) and `log_landing` see, run in a PID namespace of
# its own: one line of JSON per line read (one process: importing Airflow takes seconds)
_ELSEWHERE = """
import json, sys
from capture.config import load_config
from capture.landing import LandingZone
from capture.status import capture_state
from logtide_airflow.merge import capture_stopped
config = load_config(sys.argv[1])
zone = LandingZone(config.landing.path, "src")
for _ in sys.stdin:
    print(json.dumps({"stopped": capture_stopped(config, zone), **capture_state(config, "src", zone)}), flush=True)
"""


class _AnotherContainer:
    """Airflow runs in another container than capture (docker-compose.yml): there /proc/locks does
    not show capture's lock, as here in a new PID namespace (`unshare --pid --mount-proc`, as root).
    `seen()`: what it sees now."""

    def __init__(self, config: Path, tmp_path: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}  # not this process's home
        env.update(PYTHONPATH=f"{ROOT}:{ROOT / 'plugins'}", AIRFLOW_HOME=str(tmp_path / "airflow"))
        command = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", _ELSEWHERE, str(config)]
        self.stderr = tmp_path / "elsewhere.log"
        with open(self.stderr, "wb") as log:
            self.process = subprocess.Popen(
                command, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
            )

    def seen(self) -> dict:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, self.stderr.read_text()
        return json.loads(line)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()  # its loop ends
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def test_an_idle_capture_in_another_container_runs_until_killed(mariadb, database, start_capture, tmp_path):
    """An idle source: capture writes no checkpoint. On main, once the checkpoint was 15 s old,
    Airflow in another container (the lock not visible there) said capture was not running: a
    dump's `landed_` failed at once and every merge warned `merge.capture_stopped`. Its heartbeat
    says it runs; killed, it is stopped within ALIVE_STALE_S of its last heartbeat."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare for a PID namespace of its own")
    capture = start_capture("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    elsewhere = _AnotherContainer(capture.config_path, tmp_path)  # starts (imports Airflow) meanwhile
    try:
        # idle: its last checkpoint stays as it is; it is made 20 s old instead of waiting 16 s for it
        # (were it rewritten meanwhile, checkpoint_age_s below would say so)
        quiet = lambda: time.time() - capture.zone.checkpoint().updated_at.timestamp() > 1  # noqa: E731
        wait_for(quiet, 30, 0.1, "capture's first checkpoint to settle")
        last = capture.zone.checkpoint()
        capture.zone.write_checkpoint(replace(last, updated_at=last.updated_at - timedelta(seconds=20)))
        seen = elsewhere.seen()
        assert seen["stopped"] is None and seen["running"] is True, seen
        assert f"capture (pid {capture.process.pid} on " in seen["reason"] and seen["checkpoint_age_s"] > 16

        capture.kill()
        killed = time.monotonic()
        running = lambda: capture_running(capture.config, "src", capture.zone)[0]  # noqa: E731
        wait_for(lambda: running() is False, 20, 0.2, "capture to be stopped")
        assert time.monotonic() - killed <= ALIVE_STALE_S + 1
        seen = elsewhere.seen()
        assert seen["running"] is False, seen
        assert seen["stopped"].startswith("capture for source src is not running (no process holds "), seen
        assert "its last heartbeat is " in seen["stopped"] and "its last checkpoint was written at " in seen["stopped"]
    finally:
        elsewhere.close()


def test_status_without_the_database_still_shows_the_landing_zone(mariadb, database, make_capture, tmp_path):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)", database=database)
    capture = make_capture([f"{database}.*"], watermarks="readonly").start()
    capture.wait_running()
    _insert_each_in_its_own_transaction(mariadb, database, 1, 3)
    wait_until_landed(mariadb, capture)
    capture.stop()
    config = yaml.safe_load(capture.config_path.read_text())
    config["sources"]["src"]["port"] = free_port()  # nothing listens there
    path = tmp_path / "unreachable.yaml"
    path.write_text(yaml.safe_dump(config))
    report = _status(path)
    assert report["lag"]["error"].startswith("database unreachable")
    assert report["frontier"] == str(capture.zone.checkpoint().frontier.encode())  # LSNs leave as text
    assert report["events_by_table"] == {f"{database}.t": 3} and report["watermarks"] == "readonly"
    text = _cli(path, "status")
    assert text.returncode == 0 and "database unreachable" in text.stdout and "frontier" in text.stdout
    assert "source src (mariadb, readonly watermarks)" in text.stdout


def test_dump_progress_while_running_paused_killed_and_finished(mariadb, database, start_capture):
    capture = start_capture(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t SELECT seq, seq FROM seq_1_to_400",
    )
    table = f"{database}.t"
    cmd = [
        *(sys.executable, "-m", "capture.cli", "--config", str(capture.config_path), "dump", "--source", "src"),
        *("--table", table, "--chunk-size", "10", "--delay", "0.5", "--dump-id", "watched"),
    ]
    run = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        record = dump_dir(capture.zone, "watched") / "dump.json"
        wait_for(
            lambda: record.exists() and json.loads(record.read_text())["tables"][table].get("chunks", 0) >= 3,
            60,
            what="3 chunks",
        )
        dump = _status(capture.config_path)["dumps"][0]
        progress = dump["tables"][table]
        assert dump["dump_id"] == "watched" and dump["state"] == "running" and dump["pid"] == run.pid
        # of_about comes from InnoDB's TABLE_ROWS, an estimate: seen 41 for 40 under load
        assert 38 <= progress["of_about"] <= 42 and 3 <= progress["chunks"] < progress["of_about"]
        assert 0 < progress["percent"] < 100 and progress["eta_s"] > 0 and not progress["done"]

        control = ("dump-control", "--source", "src", "--dump-id", "watched")
        assert _cli(capture.config_path, *control, "pause").returncode == 0
        wait_for(lambda: _status(capture.config_path)["dumps"][0]["state"] == "paused", 90, what="paused")
        assert _cli(capture.config_path, *control, "resume").returncode == 0
        wait_for(
            lambda: json.loads(record.read_text())["tables"][table].get("chunks", 0) >= progress["chunks"] + 2,
            60,
            what="2 more chunks",
        )
        run.send_signal(signal.SIGKILL)
        run.wait()
    finally:
        run.kill()
    dead = _status(capture.config_path)["dumps"][0]
    assert dead["state"] == "failed" and "process is gone" in dead["error"]

    rerun = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    done = _status(capture.config_path)["dumps"][0]
    assert done["state"] == "finished" and done["rows"] == 400 and done["tables_done"] == 1
    assert done["tables"][table]["percent"] == 100.0 and done["tables"][table]["done"]
    text = _cli(capture.config_path, "status").stdout
    assert "watched  finished  1/1 tables  400 rows" in text
    assert "source src (mariadb, table watermarks)" in text
    capture.stop()


def test_postgres_lag_is_the_slots_unconfirmed_wal(postgres, request):
    db, make = request.getfixturevalue("pg_database"), request.getfixturevalue("make_pg_capture")
    postgres.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)", database=db)
    capture = make(["public.*"]).start()
    capture.wait_running()
    postgres.execute("INSERT INTO t VALUES (1, 1)", database=db)
    capture.wait_events("public", "t", 1)
    capture.stop()
    postgres.execute(*(f"INSERT INTO t VALUES ({n}, {n})" for n in range(2, 42)), database=db)
    behind = _status(capture.config_path)["lag"]
    assert behind["bytes"] > 40 * 50 and behind["slot"] and behind["lag_s"] > 0

    capture.start()
    capture.wait_events("public", "t", 41)

    def caught_up() -> bool:
        return _status(capture.config_path)["lag"]["bytes"] < 1024  # the server keeps writing a little WAL

    wait_for(caught_up, 30, interval=0.5, what="the slot to confirm what landed")
    capture.stop()


# -- the applied frontier, read from Iceberg tables a real merge wrote (needs Spark) ------------


@pytest.mark.spark
@pytest.mark.parametrize("kind", ["hadoop", "jdbc"])
def test_applied_frontier_is_read_from_iceberg_metadata(mariadb, database, start_capture, request, kind):
    session, with_merge = request.getfixturevalue("spark"), request.getfixturevalue("merge_config")
    from capture.merge.app import run_merge
    from capture.merge.iceberg import applied_frontier

    capture = start_capture(
        "CREATE TABLE kv (k INT PRIMARY KEY, v INT)",
        "INSERT INTO kv SELECT seq, seq FROM seq_1_to_30",
    )
    config = with_merge(capture.config, kind)
    run_dump(capture, f"{database}.kv", 8, config=config.source("src"))
    wait_until_landed(mariadb, capture)
    before = collect(config, ["src"])[0]["targets"]
    assert before == [
        {
            "table": f"{database}.kv",
            "target": f"{config.merge.catalog_name}.{database}.{database}__kv",
            "applied": None,
            "note": "not merged yet",
        }
    ]

    merged = run_merge(session, config, "src")["frontier"]
    target = collect(config, ["src"])[0]["targets"][0]
    name = f"`{config.merge.catalog_name}`.`{database}`.`{database}__kv`"
    assert target["applied"] == merged == str(applied_frontier(session, name)) and int(merged) > 0
    assert target["events_behind"] == 0

    mariadb.execute("INSERT INTO kv VALUES (100, 1)", "UPDATE kv SET v = 0 WHERE k = 3", database=database)
    mariadb.execute("DELETE FROM kv WHERE k = 4", database=database)
    wait_until_landed(mariadb, capture)
    behind = collect(config, ["src"])[0]["targets"][0]
    assert behind["applied"] == merged and behind["events_behind"] == 3 and int(behind["landed"]) > int(merged)
    assert "3 landed events not applied" in render(collect(config, ["src"]))

    again = run_merge(session, config, "src")["frontier"]
    after = collect(config, ["src"])[0]["targets"][0]
    assert after["applied"] == again == str(applied_frontier(session, name)) and after["events_behind"] == 0
    capture.stop()
