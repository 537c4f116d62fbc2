"""A running Airflow as its users run it: api-server, scheduler (LocalExecutor) and dag-processor,
each a child process in its own process group, on a PostgreSQL metadata database of its own,
driven through the REST API as the UI drives it. Used by tests/airflow/test_live.py and
scripts/quickstart.py; imports neither pytest nor Airflow.

Why not SQLite: Airflow's docs call it a backend for development only, and it gave out here. With
28 dump runs triggered at once through the REST API the scheduler and the dag-processor exited
with `database is locked` (one writer at a time, each waiting 5 s at most) and the triggers timed
out; PostgreSQL locks rows, not the database."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.servers import PostgreSQL, wait_for

AIRFLOW = Path(sys.executable).with_name("airflow")
PROCESSES = ("api-server", "scheduler", "dag-processor")
USER = "admin"
SUCCESS, FAILED = "success", "failed"


METADATA_DATABASE = "airflow"


def metadata_url(server: PostgreSQL, database: str = METADATA_DATABASE) -> str:
    """Airflow's `sql_alchemy_conn` for `database` on a private server (tests/servers.py: trust
    authentication on 127.0.0.1); psycopg2, the driver Airflow's docs recommend."""
    return f"postgresql+psycopg2://postgres@127.0.0.1:{server.port}/{database}"


def start_metadata_server(server: PostgreSQL, database: str = METADATA_DATABASE) -> str:
    """Start `server`, a private PostgreSQL for one Airflow's metadata (whoever made it destroys
    it), with the empty database `database`; its `metadata_url`. About 1 s; `airflow db migrate`
    then creates the tables in about 4 s."""
    server.start()
    server.execute(f'CREATE DATABASE "{database}"')
    return metadata_url(server, database)


def server_env(
    home: Path,
    port: int,
    password: str,
    settings: dict[str, str],
    database_url: str,
    base: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment of the three processes: `settings` (DAG and plugin folders, LOGTIDE_CONFIG...)
    over `base` (default: this process's), the metadata database at `database_url` (`metadata_url`),
    the simple auth manager with one admin, `USER`, whose password is `password` (its file is
    written here), and secrets the processes share."""
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps({USER: password}))
    passwords.chmod(0o600)
    return {
        **(os.environ if base is None else base),
        **settings,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_url,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "6",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(24),
        "AIRFLOW__API__SECRET_KEY": secrets.token_hex(24),
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
    }


class LiveAirflow:
    """The three processes of one Airflow home (migrated already), and a REST client logged in as `USER`."""

    def __init__(self, home: Path, env: dict[str, str], port: int, password: str) -> None:
        self.home, self.env, self.port, self.password = home, env, port, password
        self.url = f"http://127.0.0.1:{port}"
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.client = httpx.Client(base_url=self.url, timeout=30)
        self.token = ""

    def migrate(self, timeout: float = 300) -> None:
        """`airflow db migrate`: the metadata database's tables (its output in migrate.log)."""
        with open(self.home / "migrate.log", "wb") as log:
            done = subprocess.run(
                [str(AIRFLOW), "db", "migrate"], env=self.env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout
            )
        if done.returncode != 0:
            raise RuntimeError(f"airflow db migrate exited with {done.returncode}:\n{self.logs()}")

    def start(self) -> None:
        for name in PROCESSES:
            log = open(self.home / f"{name}.log", "wb")  # noqa: SIM115 - owned by the child
            self.processes[name] = subprocess.Popen(
                [str(AIRFLOW), name],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def login(self, timeout: float = 120) -> None:
        def healthy() -> bool:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"airflow {name} exited with {process.returncode}:\n{self.logs()}")
            try:
                return self.client.get("/api/v2/monitor/health").status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(healthy, timeout, interval=0.2, what="the Airflow API server")
        token = self.client.post("/auth/token", json={"username": USER, "password": self.password})
        if token.status_code != 201:
            raise RuntimeError(f"logging in to Airflow failed: {token.status_code} {token.text}")
        self.token = token.json()["access_token"]
        self.client.headers["Authorization"] = f"Bearer {self.token}"

    def get(self, path: str, **params: Any) -> Any:
        """GET with retries: on a busy machine a request can time out while tasks start."""
        for attempt in range(5):
            try:
                response = self.client.get(path, params=params)
                response.raise_for_status()
                return response.json()
            except httpx.TimeoutException:
                if attempt == 4:
                    raise
        raise AssertionError("unreachable")

    def wait_dag(self, dag_id: str, timeout: float = 120) -> None:
        """Until the DAG processor has parsed `dag_id`."""

        def parsed() -> bool:
            try:
                return self.client.get(f"/api/v2/dags/{dag_id}").status_code == 200
            except httpx.TimeoutException:
                return False

        wait_for(parsed, timeout, interval=0.5, what=f"the DAG {dag_id} to be parsed")

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> str:
        """Trigger a run as the UI's form does; the run id."""
        response = self.client.post(f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf})
        if response.status_code != 200:
            raise RuntimeError(f"triggering {dag_id} was refused: {response.status_code} {response.text}")
        return response.json()["dag_run_id"]

    @staticmethod
    def run_url(dag_id: str, run_id: str) -> str:
        return f"/api/v2/dags/{dag_id}/dagRuns/{run_id}"

    def wait_finished(self, dag_id: str, run_id: str, timeout: float = 900) -> str:
        def finished() -> str | None:
            state = self.get(self.run_url(dag_id, run_id))["state"]
            return state if state in (SUCCESS, FAILED) else None

        return wait_for(finished, timeout, interval=1.0, what=f"{dag_id} run {run_id} to finish")

    def task_states(self, dag_id: str, run_id: str) -> dict[tuple[str, int], str | None]:
        instances = self.get(f"{self.run_url(dag_id, run_id)}/taskInstances")["task_instances"]
        return {(t["task_id"], t["map_index"]): t["state"] for t in instances}

    def xcom(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> Any:
        url = f"{self.run_url(dag_id, run_id)}/taskInstances/{task_id}/xcomEntries/return_value"
        return self.get(url, map_index=map_index)["value"]

    def task_log(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> list[dict[str, Any]]:
        url = f"{self.run_url(dag_id, run_id)}/taskInstances/{task_id}/logs/1"
        return self.get(url, map_index=map_index)["content"]

    def exited(self) -> dict[str, int]:
        """The processes that have exited, with their exit codes: none should while Airflow is in use."""
        return {name: code for name, process in self.processes.items() if (code := process.poll()) is not None}

    def pids(self) -> dict[str, int]:
        return {name: process.pid for name, process in self.processes.items()}

    def stop(self) -> None:
        """SIGTERM to each process group (the scheduler's task processes included), then SIGKILL."""
        stop_groups(list(self.processes.values()))
        self.client.close()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-4000:]}" for p in sorted(self.home.glob("*.log")))


def stop_groups(processes: list[subprocess.Popen[bytes]], timeout: float = 20) -> None:
    """SIGTERM to the process group of each (they were started in sessions of their own), SIGKILL
    to what is left of a group after `timeout`."""
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(max(0.1, deadline - time.monotonic()))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # stragglers of the group, if any
        process.wait()
