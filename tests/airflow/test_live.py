"""`logtide_dump` triggered the way the UI does it: through the REST API of a running Airflow
(api-server, scheduler with the LocalExecutor, dag-processor) on SQLite."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.airflow.conftest import AIRFLOW, AirflowHome
from tests.integration.dumping import Workload, reconciled_state, table_state, wait_until_landed
from tests.servers import free_port, wait_for

pytestmark = [pytest.mark.airflow, pytest.mark.airflow_live]

PASSWORD = "live-test-admin"


class LiveAirflow:
    """api-server, scheduler and dag-processor as child processes, each in its own process group."""

    def __init__(self, home: Path, env: dict[str, str], port: int) -> None:
        self.home, self.env, self.port = home, env, port
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)

    def start(self) -> None:
        for name in ("api-server", "scheduler", "dag-processor"):
            log = open(self.home / f"{name}.log", "wb")  # noqa: SIM115 - owned by the child
            self.processes[name] = subprocess.Popen(
                [str(AIRFLOW), name], env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def login(self, timeout: float = 60) -> None:
        def healthy() -> bool:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise AssertionError(f"airflow {name} exited with {process.returncode}:\n{self.logs()}")
            try:
                return self.client.get("/api/v2/monitor/health").status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(healthy, timeout, interval=0.2, what="the Airflow API server")
        token = self.client.post("/auth/token", json={"username": "admin", "password": PASSWORD})
        assert token.status_code == 201, token.text
        self.client.headers["Authorization"] = f"Bearer {token.json()['access_token']}"

    def stop(self) -> None:
        """SIGTERM to each process group (the scheduler's task processes included), then SIGKILL."""
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # stragglers of the group, if any
            process.wait()
        self.client.close()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-4000:]}" for p in sorted(self.home.glob("*.log")))


@pytest.fixture
def start_airflow(airflow_home: AirflowHome, tmp_path: Path) -> Iterator:
    """Start a live Airflow on a copy of the migrated database, with LOGTIDE_CONFIG for its DAG processor."""
    started: list[LiveAirflow] = []

    def start(logtide_config: Path) -> LiveAirflow:
        home = tmp_path / "live_airflow"
        home.mkdir()
        shutil.copy(airflow_home.home / "pristine.db", home / "airflow.db")
        passwords = home / "passwords.json"
        passwords.write_text(json.dumps({"admin": PASSWORD}))
        port = free_port()
        env = {
            **os.environ,
            **airflow_home.env,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "LOGTIDE_CONFIG": str(logtide_config),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": "logtide-live-test-jwt-secret-0123456789",
            "AIRFLOW__API__SECRET_KEY": "logtide-live-test-secret-key",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        }
        live = LiveAirflow(home, env, port)
        started.append(live)
        live.start()
        live.login()
        return live

    yield start
    for live in started:
        live.stop()


def test_trigger_through_the_api_like_the_ui(mariadb, database, make_capture, start_airflow):
    mariadb.execute(
        "CREATE TABLE ledger (id INT PRIMARY KEY, v INT, note VARCHAR(20))",
        "INSERT INTO ledger SELECT seq, seq % 100, CONCAT('row', seq) FROM seq_1_to_800",
        database=database,
    )
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    airflow = start_airflow(capture.config_path)
    api = airflow.client
    assert api.post("/api/v2/pools", json={"name": "logtide_src", "slots": 2}).status_code == 201
    variable = {"key": "logtide_config_path", "value": str(capture.config_path)}
    assert api.post("/api/v2/variables", json=variable).status_code == 201
    wait_for(lambda: api.get("/api/v2/dags/logtide_dump").status_code == 200, 60, 0.5, "the DAG to be parsed")
    assert api.patch("/api/v2/dags/logtide_dump", json={"is_paused": False}).status_code == 200

    # the trigger form's conf: every param, nulls included
    conf = {
        "source": "src",
        "tables": [f"{database}.ledger"],
        "keys": None,
        "key_from": None,
        "key_to": None,
        "chunk_size": 0,
        "delay_s": None,
        "max_rows_per_s": None,
        "merge": False,  # the merge at the end of a dump: test_merge_dag.py
    }
    refused = api.post("/api/v2/dags/logtide_dump/dagRuns", json={"logical_date": None, "conf": conf})
    assert refused.status_code == 400 and "0 is less than the minimum of 1" in refused.text

    workload = Workload(mariadb, database, "ledger", 100_000, seed=7)
    workload.start()
    try:
        triggered = api.post(
            "/api/v2/dags/logtide_dump/dagRuns", json={"logical_date": None, "conf": {**conf, "chunk_size": 60}}
        )
        assert triggered.status_code == 200, triggered.text
        run_url = f"/api/v2/dags/logtide_dump/dagRuns/{triggered.json()['dag_run_id']}"

        def finished() -> str | None:
            try:
                state = api.get(run_url).json()["state"]
            except httpx.TimeoutException:  # a busy machine; ask again
                return None
            return state if state in ("success", "failed") else None

        state = wait_for(finished, 90, interval=0.5, what="the DAG run to finish")
    finally:
        workload.stop()
    instances = api.get(f"{run_url}/taskInstances").json()["task_instances"]
    tasks = {(t["task_id"], t["map_index"]): t["state"] for t in instances}
    assert state == "success", (tasks, airflow.logs())
    assert tasks[("plan_src", -1)] == "success" and tasks[("dump_src", 0)] == "success"
    summary = api.get(f"{run_url}/taskInstances/summary/xcomEntries/return_value").json()["value"]
    # progress in the task log, one line per chunk with its fields (what a person watches in the UI)
    task_log = api.get(f"{run_url}/taskInstances/dump_src/logs/1", params={"map_index": 0}).json()["content"]
    chunk_lines = [e["event"] for e in task_log if str(e.get("event", "")).startswith("dump.chunk ")]
    assert len(chunk_lines) == summary["chunks"] and f"table={database}.ledger chunk=1 " in chunk_lines[0]
    assert summary["tables"] == 1 and summary["rows"] >= 800
    assert summary["per_table"][0]["table"] == f"{database}.ledger"

    wait_until_landed(mariadb, capture)
    state, stats = reconciled_state(capture, database, "ledger")
    assert state == table_state(mariadb, database, "ledger")
    assert stats.chunks == summary["chunks"]
