"""Two dumps of one table never run at once: `logtide dump` processes against a real MariaDB with
capture running, the table claims held in the landing zone (local) or in a real ZooKeeper."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from capture.dump.progress import dump_dir
from tests.conftest import ROOT
from tests.integration.dumping import reconciled_state, table_state, wait_until_landed
from tests.servers import wait_for

pytestmark = pytest.mark.integration

SESSION_S = 2.0


def _populate(mariadb, database: str, table: str, rows: int) -> None:
    mariadb.execute(
        f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT, note VARCHAR(20))",
        f"INSERT INTO {table} SELECT seq, seq % 100, CONCAT('row', seq) FROM seq_1_to_{rows}",
        database=database,
    )


@pytest.fixture(params=["local", "zookeeper"])
def dump_config(request, make_capture, tmp_path: Path):
    """(capture process, config file for the dumps): the dumps' config adds the coordination."""

    def make(database: str) -> tuple:
        capture = make_capture([f"{database}.*"]).start()
        config = yaml.safe_load(capture.config_path.read_text())
        if request.param == "zookeeper":
            zookeeper = request.getfixturevalue("zookeeper")
            config["coordination"] = {
                "kind": "zookeeper",
                "hosts": zookeeper.hosts,
                "session_timeout_s": SESSION_S,
                "root": f"/claims-{request.node.name.replace('[', '-').rstrip(']')}",
            }
        path = tmp_path / "dumps.yaml"
        path.write_text(yaml.safe_dump(config))
        capture.wait_running()
        return capture, path

    make.kind = request.param  # type: ignore[attr-defined]
    return make


def _dump_cmd(config: Path, table: str, dump_id: str, chunk: int = 10, delay: float = 0.05) -> list[str]:
    return [
        *(sys.executable, "-m", "capture.cli", "--config", str(config), "dump", "--source", "src"),
        *("--table", table, "--chunk-size", str(chunk), "--delay", str(delay), "--dump-id", dump_id),
    ]


def _start(cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_chunks(zone, dump_id: str, table: str, at_least: int) -> None:
    progress = dump_dir(zone, dump_id) / f"{table}.json"
    wait_for(
        lambda: progress.exists() and json.loads(progress.read_text())["chunk"] >= at_least,
        60,
        what=f"{at_least} chunks of {dump_id}",
    )


def _log_time(log: str, event: str) -> float:
    """Epoch seconds of the first log line with `event` (logfmt `ts=2026-...Z`)."""
    line = next(line for line in log.splitlines() if f"event={event}" in line)
    stamp = line.split()[0].removeprefix("ts=").removesuffix("Z")
    return datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp()


def _watermarks_of(mariadb, dump_id: str) -> int:
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM logtide.watermarks WHERE dump_id = %s", (dump_id,))
        return cur.fetchone()[0]


def test_a_second_dump_of_the_same_table_is_refused_and_the_first_completes(mariadb, database, dump_config):
    _populate(mariadb, database, "ledger", 400)
    capture, config = dump_config(database)
    table = f"{database}.ledger"
    first = _start(_dump_cmd(config, table, "first"))
    try:
        _wait_chunks(capture.zone, "first", table, 2)
        second = subprocess.run(
            _dump_cmd(config, table, "second"), cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        out, err = first.communicate(timeout=120)
    finally:
        first.kill()
    assert second.returncode == 2, second.stderr
    assert f"error: table {table} is being dumped by dump first (host " in second.stderr
    assert f"pid {first.pid}, since " in second.stderr
    assert "logtide dump-control --source src --dump-id first cancel" in second.stderr
    assert _watermarks_of(mariadb, "second") == 0  # refused before any watermark
    assert not dump_dir(capture.zone, "second").exists()

    assert first.returncode == 0, err
    assert json.loads(out)["tables"][0]["rows"] == 400
    wait_until_landed(mariadb, capture)
    state, stats = reconciled_state(capture, database, "ledger")
    assert state == table_state(mariadb, database, "ledger") and len(state) == 400
    assert stats.chunks_pending == 0

    # the claim went with the first dump: the table can be dumped again
    again = subprocess.run(
        _dump_cmd(config, table, "third", chunk=100, delay=0), cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0, again.stderr


def test_dumps_of_different_tables_run_at_once(mariadb, database, dump_config):
    for name in ("ledger", "other"):
        _populate(mariadb, database, name, 300)
    capture, config = dump_config(database)
    runs = {name: _start(_dump_cmd(config, f"{database}.{name}", f"d-{name}")) for name in ("ledger", "other")}
    try:
        for name in runs:  # both are dumping at the same time
            _wait_chunks(capture.zone, f"d-{name}", f"{database}.{name}", 2)
        assert all(p.poll() is None for p in runs.values())
        results = {name: p.communicate(timeout=120) for name, p in runs.items()}
    finally:
        for p in runs.values():
            p.kill()
    for name, (out, err) in results.items():
        assert runs[name].returncode == 0, err
        assert json.loads(out)["tables"][0]["rows"] == 300
    wait_until_landed(mariadb, capture)
    for name in runs:
        state, _ = reconciled_state(capture, database, name)
        assert state == table_state(mariadb, database, name) and len(state) == 300


def test_a_rerun_after_kill9_takes_the_claim_and_finishes(mariadb, database, dump_config):
    _populate(mariadb, database, "ledger", 400)
    capture, config = dump_config(database)
    table = f"{database}.ledger"
    cmd = _dump_cmd(config, table, "retried")
    first = _start(cmd)
    _wait_chunks(capture.zone, "retried", table, 5)
    first.send_signal(signal.SIGKILL)
    first.communicate()
    killed_at = time.time()
    began = time.monotonic()
    rerun = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - began
    assert rerun.returncode == 0, rerun.stderr
    assert f"dump.table_resumed dump_id=retried table={table}" in rerun.stderr
    if dump_config.kind == "zookeeper":  # the dead process's node lived until its session expired
        assert "dump.claim_waiting" in rerun.stderr or took < SESSION_S * 3
    claimed = _log_time(rerun.stderr, "dump.claimed") - killed_at
    print(f"rerun after kill -9 ({dump_config.kind}): claim taken {claimed:.2f} s after the kill, done in {took:.2f} s")
    assert json.loads(rerun.stdout)["tables"][0]["rows"] == 400
    wait_until_landed(mariadb, capture)
    state, _ = reconciled_state(capture, database, "ledger")
    assert state == table_state(mariadb, database, "ledger") and len(state) == 400
