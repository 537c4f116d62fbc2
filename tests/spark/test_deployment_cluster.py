"""The merge as docker-compose.yml runs it, on this machine: a Spark standalone master and worker
started by docker/entrypoint.sh (as the spark-master and spark-worker services are), the Iceberg
JDBC catalog in PostgreSQL set up by config/compose-metadb.sql (as metadb is), the merge section of
config/compose.yaml, and `logtide merge` submitted through the entrypoint (as the merge service does).
Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from benchmarks.merge_throughput import SOURCE, Landing
from capture.dump.reconcile import apply, reconcile_table
from tests.servers import PostgreSQL, free_port, wait_for

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
SECRET = "cluster-test-Secret-1"  # never a real password


def _env(**extra: str) -> dict[str, str]:
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"  # logtide, spark-class, spark-submit
    return {**os.environ, "PATH": path, "SPARK_LOCAL_HOSTNAME": "127.0.0.1", **extra}


def _json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=3) as response:
        return json.loads(response.read())


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[str]:
    """spark-master and spark-worker through the image's entrypoint; yields the master URL."""
    port, ui, worker_ui = free_port(), free_port(), free_port()
    logs = [open(tmp_path / name, "wb") for name in ("master.log", "worker.log")]  # noqa: SIM115
    processes = []
    try:
        env = _env(SPARK_MASTER_PORT=str(port), SPARK_MASTER_WEBUI_PORT=str(ui))
        processes.append(
            subprocess.Popen(
                [str(ENTRYPOINT), "spark-master"], env=env, stdout=logs[0], stderr=logs[0], start_new_session=True
            )
        )
        wait_for(lambda: _probe(f"http://127.0.0.1:{ui}/json/"), 60, 0.5, "the Spark master's UI")
        master = f"spark://127.0.0.1:{port}"
        env = _env(
            SPARK_WORKER_CORES="2",
            SPARK_WORKER_MEMORY="1g",
            SPARK_WORKER_WEBUI_PORT=str(worker_ui),
            SPARK_WORKER_DIR=str(tmp_path / "work"),
        )
        processes.append(
            subprocess.Popen(
                [str(ENTRYPOINT), "spark-worker", master],
                env=env,
                stdout=logs[1],
                stderr=logs[1],
                start_new_session=True,
            )
        )
        wait_for(lambda: _json(f"http://127.0.0.1:{ui}/json/")["aliveworkers"] == 1, 60, 0.5, "a registered worker")
        yield master
    finally:
        for process in reversed(processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(10)
        for log in logs:
            log.close()


def _probe(url: str) -> bool:
    try:
        _json(url)
        return True
    except OSError:
        return False


@pytest.fixture()
def metadb() -> Iterator[PostgreSQL]:
    server = PostgreSQL(Path(tempfile.mkdtemp(prefix="logtide-metadb-")))  # not under pytest's 0700 tmp
    server.start()
    try:
        secrets = {"AIRFLOW_DB_PASSWORD": SECRET, "ICEBERG_DB_PASSWORD": SECRET}
        done = server.psql_file("postgres", ROOT / "config/compose-metadb.sql", secrets)
        assert done.returncode == 0, done.stderr
        yield server
    finally:
        server.destroy()


def test_merge_on_the_compose_spark_cluster_with_the_postgresql_catalog(cluster, metadb, tmp_path):
    landing = Landing(tmp_path / "landing", random.Random(11))
    landing.dump(300, 100, 150)  # 3 chunks with log events between and inside their windows
    landing.changes(50, 300)
    landing.checkpoint()
    expected = apply(reconcile_table(landing.zone, "bench", "orders")[0])

    compose = yaml.safe_load((ROOT / "config/compose.yaml").read_text())
    merge = {
        **compose["merge"],
        "jdbc_uri": compose["merge"]["jdbc_uri"].replace("metadb:5432", f"127.0.0.1:{metadb.port}"),
        "warehouse": str(tmp_path / "warehouse"),
        "spark_master": cluster,
        "jars_dir": str(ROOT / "var" / "jars"),
    }
    config = {
        "landing": {"path": str(tmp_path / "landing")},
        "sources": {SOURCE: {"kind": "mariadb", "user": "bench", "server_id": 9}},
        "merge": merge,
    }
    config_path = tmp_path / "logtide.yaml"
    config_path.write_text(yaml.safe_dump(config))
    env = _env(LOGTIDE_CONFIG=str(config_path), ICEBERG_DB_PASSWORD=SECRET)

    def run() -> dict:
        began = time.monotonic()
        done = subprocess.run(
            [str(ENTRYPOINT), "merge", "--source", SOURCE],
            env=env,
            capture_output=True,
            text=True,
            timeout=400,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        report = json.loads(lines[-1])
        report["wall_s"] = round(time.monotonic() - began, 1)
        return report

    first = run()
    table = first["tables"][0]
    assert table["total_records"] == len(expected), first
    data = sorted((tmp_path / "warehouse").glob("*/bench__orders/data/*.parquet"))
    assert data, "no data files in the warehouse"
    rows = pq.ParquetDataset(data).read().to_pylist()
    columns = ("customer", "amount", "status", "note")
    assert {r["id"]: tuple(r[c] for c in columns) for r in rows} == {
        key[0]: tuple(row[c] for c in columns) for key, row in expected.items()
    }
    assert metadb.query(
        "SELECT table_namespace, table_name FROM iceberg_tables ORDER BY table_name", database="iceberg"
    ) == [("bench", "bench__orders"), ("bench", "bench__orders__changelog")]
    executors = list((tmp_path / "work").glob("app-*/*/stderr"))
    assert executors, "no executor ran on the worker"

    second = run()  # nothing new: nothing applied twice
    assert second["tables"] == [] or all(t.get("skipped") for t in second["tables"]), second
    print(f"cluster merge: first run {first['wall_s']} s, second {second['wall_s']} s")
