"""Airflow as its users run it: api-server, scheduler (LocalExecutor) and dag-processor as child
processes on a private PostgreSQL metadata database (tests/airflow/live.py says why not SQLite),
one for the whole module, with a configuration of two sources (MariaDB `maria`, PostgreSQL `pg`)
each captured by its own `logtide capture`. Runs are triggered through the REST API as the UI
does, tasks run in their own processes and XComs and Asset events go through Airflow's real
serialization (which `dag.test()` skips: a frontier past 2**64 failed every merge task there).
A headless Chromium takes screenshots of the UI (tests/airflow/browser.py)."""

from __future__ import annotations

import os
import struct
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from capture.config import LogtideConfig, load_config
from capture.coordination.claims import LocalClaims
from capture.dump.progress import ProgressStore
from capture.dump.record import RECORD, read_record
from tests.airflow.airflow_helpers import iceberg
from tests.airflow.browser import Browser
from tests.airflow.conftest import AirflowHome
from tests.airflow.live import LiveAirflow, metadata_url, server_env, start_metadata_server
from tests.conftest import ROOT, CaptureProcess
from tests.integration import dumping as maria_dumping
from tests.integration.postgres import dumping as pg_dumping
from tests.integration.postgres.conftest import _drop as drop_pg_database
from tests.servers import PostgreSQL, free_port, wait_for

# the module's Airflow, captures and first runs start in the first test that needs them: on this
# shared 2-core machine under load that alone can take several minutes
pytestmark = [pytest.mark.airflow, pytest.mark.airflow_live, pytest.mark.timeout(1200)]

DATABASE = "t_live"  # MariaDB database and PostgreSQL database of the module's sources
TABLES = ("ledger",)  # one table a source: every Spark merge on this small machine costs minutes under load
ROWS = 600
SCHEMA = {"maria": DATABASE, "pg": "public"}  # the first part of a table's name, per source
SCREENSHOTS = os.environ.get("LOGTIDE_SCREENSHOTS")  # a folder (docs/airflow) to keep them; else the test's tmp


@dataclass
class Live:
    airflow: LiveAirflow
    config: LogtideConfig
    captures: dict[str, CaptureProcess]
    servers: dict[str, Any]  # source -> its test server
    folder: Path

    def table_state(self, source: str, table: str) -> dict:
        module = maria_dumping if source == "maria" else pg_dumping
        return module.table_state(self.servers[source], DATABASE, table)

    def wait_until_landed(self, source: str) -> None:
        if source == "maria":
            maria_dumping.wait_until_landed(self.servers[source], self.captures[source])
        else:
            pg_dumping.wait_until_landed(self.servers[source], DATABASE, self.captures[source])

    def workload(self, source: str, table: str, seed: int) -> Any:
        module = maria_dumping if source == "maria" else pg_dumping
        return module.Workload(self.servers[source], DATABASE, table, 100_000, seed)

    def targets_equal_sources(self, sources: tuple[str, ...] = ("maria", "pg")) -> None:
        from capture.merge.spark_types import quote

        with iceberg(self.config) as spark:
            for source in sources:
                for table in TABLES:
                    name = ".".join(quote(p) for p in ("logtide", source, f"{SCHEMA[source]}__{table}"))
                    rows = [r.asDict() for r in spark.table(name).drop("_lsn", "_applied_at").collect()]
                    assert {(r["id"],): r for r in rows} == self.table_state(source, table), (source, table)


def _sources(mariadb: Any, postgres: Any, landing: Path, warehouse: Path) -> dict[str, Any]:
    """The module's configuration: both sources, one landing zone, a Hadoop catalog."""
    common = {"host": "127.0.0.1", "password": "${TEST_DB_PASSWORD:-}", "heartbeat_s": 0.2}
    return {
        "landing": {"path": str(landing), "flush_interval_s": 0.5},
        "merge": {
            "warehouse": str(warehouse),
            "jars_dir": str(ROOT / "var" / "jars"),
            "spark_master": "local[2]",
            "spark_conf": {"spark.sql.shuffle.partitions": "4"},
        },
        "sources": {
            "maria": {**common, "kind": "mariadb", "port": mariadb.port, "user": "root", "server_id": 9101,
                      "include": [f"{DATABASE}.*"], "metrics": {"port": free_port()}},
            "pg": {**common, "kind": "postgresql", "port": postgres.port, "user": "postgres", "database": DATABASE,
                   "slot": "lt_live_pg", "include": ["public.*"], "metrics": {"port": free_port()}},
        },
    }  # fmt: skip


def _create_tables(mariadb: Any, postgres: Any) -> None:
    mariadb.execute(f"DROP DATABASE IF EXISTS `{DATABASE}`", f"CREATE DATABASE `{DATABASE}`")
    drop_pg_database(postgres, DATABASE)
    postgres.execute(f'CREATE DATABASE "{DATABASE}"')
    for table in TABLES:
        mariadb.execute(
            f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT, note VARCHAR(20))",
            f"INSERT INTO {table} SELECT seq, seq % 100, CONCAT('row', seq) FROM seq_1_to_{ROWS}",
            database=DATABASE,
        )
        postgres.execute(  # text under a non-C collation: the keyset order is the database's
            f'CREATE TABLE "{table}" (id int PRIMARY KEY, v int, note text COLLATE "en-x-icu")',
            f"INSERT INTO \"{table}\" SELECT i, i % 100, 'row' || i FROM generate_series(1, {ROWS}) i",
            database=DATABASE,
        )


@pytest.fixture(scope="module")
def live(
    airflow_home: AirflowHome,
    mariadb,
    postgres,
    jvm_class_archive,
    spark,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Live]:
    """Two sources with capture running, and a live Airflow whose DAG processor reads their config
    (its merges map the class archive: they start warm); `targets_equal_sources` reads the targets
    in sessions on the run's one SparkContext (`spark`)."""
    folder = tmp_path_factory.mktemp("live")
    _create_tables(mariadb, postgres)
    config_path = folder / "logtide.yaml"
    config_path.write_text(yaml.safe_dump(_sources(mariadb, postgres, folder / "landing", folder / "warehouse")))
    captures = {name: CaptureProcess(config_path, name, folder) for name in ("maria", "pg")}
    home = folder / "airflow"
    home.mkdir()
    # not under pytest's temp folder, as the `postgres` fixture's: the server's own user must reach it
    metadb = PostgreSQL(Path(tempfile.mkdtemp(prefix="logtide-airflow-metadb-")))
    port, password = free_port(), "live-test-admin"
    settings = {**airflow_home.env, "LOGTIDE_CONFIG": str(config_path)}
    airflow = LiveAirflow(home, server_env(home, port, password, settings, metadata_url(metadb)), port, password)
    try:
        for capture in captures.values():
            capture.start()
        start_metadata_server(metadb)
        airflow.migrate()
        airflow.start()  # starts while capture does
        for capture in captures.values():
            capture.wait_running()
        airflow.login()
        api = airflow.client
        for name in captures:
            assert api.post("/api/v2/pools", json={"name": f"logtide_{name}", "slots": 2}).status_code == 201
        variable = {"key": "logtide_config_path", "value": str(config_path)}
        assert api.post("/api/v2/variables", json=variable).status_code == 201
        for dag_id in ("logtide_dump", "logtide_merge"):
            airflow.wait_dag(dag_id)
        yield Live(airflow, load_config(config_path, require_env=False), captures, {"maria": mariadb, "pg": postgres},
                   folder)  # fmt: skip
    finally:
        airflow.stop()
        metadb.destroy()
        for capture in captures.values():
            capture.kill()
        drop_pg_database(postgres, DATABASE)  # its replication slot too


@pytest.fixture(scope="module")
def dump_runs(live: Live) -> dict[str, str]:
    """A `logtide_dump` of each source, ending with its merge, both triggered at once; a workload
    writes to every table from the start of the dumps until each table has 4 chunks (of about 15),
    so the merge at the end must bring the targets exactly to the tables. The run id per source."""
    from logtide_airflow.operators import dump_id_for_run

    runs = {}
    for source in live.captures:
        tables = [f"{SCHEMA[source]}.{t}" for t in TABLES]
        runs[source] = live.airflow.trigger("logtide_dump", {"source": source, "tables": tables, "chunk_size": 40,
                                                             "delay_s": 0.2})  # fmt: skip
    stores = {s: ProgressStore(live.captures[s].zone, dump_id_for_run(run_id)) for s, run_id in runs.items()}
    wait_for(lambda: all(store.folder.exists() for store in stores.values()), 600, 0.1, "the dumps to start")
    workloads = [live.workload(s, t, seed) for s in live.captures for seed, t in enumerate(TABLES)]
    for w in workloads:
        w.start()
    try:
        wait_for(
            lambda: all(store.load(SCHEMA[s], t).chunk >= 4 for s, store in stores.items() for t in TABLES),
            300,
            interval=0.05,
            what="4 chunks of every table",
        )
    finally:
        for w in workloads:
            w.stop()
    assert all(w.transactions > 0 for w in workloads)
    for run_id in runs.values():
        live.airflow.wait_finished("logtide_dump", run_id)
    return runs


def test_bad_params_are_refused_when_triggered(live: Live):
    conf = {"source": "maria", "tables": [f"{DATABASE}.ledger"], "chunk_size": 0}
    refused = live.airflow.client.post("/api/v2/dags/logtide_dump/dagRuns", json={"logical_date": None, "conf": conf})
    assert refused.status_code == 400 and "0 is less than the minimum of 1" in refused.text


OTHER_DATABASE = "t_live_uncaptured"  # left out by the maria source's include
DUMP_PASSWORD = "Dump-Pw-7731-live"  # of the MariaDB user the Airflow connection logtide_maria supplies


@pytest.fixture(scope="module")
def password_connection(live: Live) -> Iterator[None]:
    """The maria dumps connect as a user with a password, given by the Airflow connection
    `logtide_maria`, so the task logs can be searched for it."""
    live.servers["maria"].execute(
        f"CREATE USER IF NOT EXISTS 'lt_dump'@'%' IDENTIFIED BY '{DUMP_PASSWORD}'",
        "GRANT ALL ON *.* TO 'lt_dump'@'%'",
    )
    conn = {"connection_id": "logtide_maria", "conn_type": "mysql", "login": "lt_dump", "password": DUMP_PASSWORD}
    assert live.airflow.client.post("/api/v2/connections", json=conn).status_code == 201
    yield
    live.airflow.client.delete("/api/v2/connections/logtide_maria")


def _log_text(
    airflow: LiveAirflow, run_id: str, task_id: str, map_index: int = -1, attempt: int = 1, dag_id: str = "logtide_dump"
) -> str:
    """A task's log as the UI shows it: each line's event, and the message of the exception that failed it."""
    url = f"{airflow.run_url(dag_id, run_id)}/taskInstances/{task_id}/logs/{attempt}"
    lines = []
    for entry in airflow.get(url, map_index=map_index)["content"]:
        entry = entry if isinstance(entry, dict) else {"event": entry}
        lines.append(str(entry.get("event", "")))
        lines += [str(e.get("exc_value")) for e in entry.get("error_detail") or [] if isinstance(e, dict)]
    return "\n".join(lines)


def _no_password_in_the_task_logs(live: Live) -> None:
    logs = [p for p in (live.airflow.home / "logs").rglob("*") if p.is_file()]
    assert logs and not [p for p in logs if DUMP_PASSWORD in p.read_text(errors="replace")]


def test_bad_params_fail_the_plan_with_the_reason_and_write_nothing(live: Live, password_connection: None):
    """Params the trigger form's schema cannot check: the plan fails the run at once, its log
    says what is wrong and what to do, and no dump of the run exists in the landing zone."""
    live.servers["maria"].execute(
        f"DROP DATABASE IF EXISTS `{OTHER_DATABASE}`",
        f"CREATE DATABASE `{OTHER_DATABASE}`",
        f"CREATE TABLE `{OTHER_DATABASE}`.nokey (v INT)",
    )
    ledger = f"{DATABASE}.ledger"
    cases = {  # conf -> what the plan's log must say
        f"table {DATABASE}.nope does not exist": {"tables": [f"{DATABASE}.nope"]},
        f"did you mean {DATABASE}.ledger?": {"tables": [f"{DATABASE}.LEDGER"]},  # names match as spelled
        f"table {OTHER_DATABASE}.nokey is not captured": {"tables": [f"{OTHER_DATABASE}.nokey"]},
        "key value 'abc' for column 'id' is not an integer": {"tables": [ledger], "keys": ["abc"]},
        f"key range of {ledger} is empty": {"tables": [ledger], "key_from": 500, "key_to": 100},
    }
    runs = {expected: live.airflow.trigger("logtide_dump", {"source": "maria", **conf})
            for expected, conf in cases.items()}  # fmt: skip
    # a key past 64 bits: accepted on main, then the plan task never started (Airflow's task runner
    # could not encode the conf: OverflowError in the scheduler's log, the run left running)
    for bad in ({"chunk_size": -5}, {"chunk_size": "10"}, {"keys": "1,2"}, {"tables": ledger}, {"keys": [2**64]}):
        refused = live.airflow.client.post(
            "/api/v2/dags/logtide_dump/dagRuns", json={"logical_date": None, "conf": {"source": "maria", **bad}}
        )
        assert refused.status_code == 400 and f"Invalid input for param {next(iter(bad))}" in refused.text
    from logtide_airflow.operators import dump_id_for_run

    zone = live.captures["maria"].zone
    for expected, run_id in runs.items():
        assert live.airflow.wait_finished("logtide_dump", run_id, timeout=300) == "failed"
        states = live.airflow.task_states("logtide_dump", run_id)
        assert states[("plan_maria", -1)] == "failed" and states[("dump_maria", -1)] == "upstream_failed"
        text = _log_text(live.airflow, run_id, "plan_maria")
        assert expected in text and "nothing was written; correct the params and trigger a new run" in text, text
        assert not ProgressStore(zone, dump_id_for_run(run_id)).folder.exists()
    claims = LocalClaims(zone)
    assert claims.probe(ledger) is None


def test_concurrent_dumps_are_refused_and_a_stopped_dump_resumes(live: Live, password_connection: None):
    """Run A dumps the ledger slowly. A second dump of it (B) and a dump of every table (C) are
    refused with the holder and how to cancel it in Airflow. A's task marked failed through the
    API stops before its next chunk, releasing its claim; cleared, it resumes where it stopped,
    and B, cleared, dumps the table too. No task log holds the database password."""
    from logtide_airflow.operators import dump_id_for_run

    airflow, zone, ledger = live.airflow, live.captures["maria"].zone, f"{DATABASE}.ledger"
    slow = {"source": "maria", "tables": [ledger], "chunk_size": 30, "delay_s": 2, "merge": False}  # 40 s
    a = airflow.trigger("logtide_dump", slow)
    a_dump = dump_id_for_run(a)
    store = ProgressStore(zone, a_dump)
    wait_for(lambda: store.load(DATABASE, "ledger").chunk >= 2, 300, 0.1, "run A's second chunk")
    b = airflow.trigger("logtide_dump", {**slow, "chunk_size": 200, "delay_s": 0})
    c = airflow.trigger("logtide_dump", {"source": "maria", "merge": False})  # every captured table
    for run_id in (b, c):
        assert airflow.wait_finished("logtide_dump", run_id, timeout=300) == "failed"
        text = _log_text(airflow, run_id, "dump_maria", 0)
        assert f"table {ledger} is being dumped by dump {a_dump}" in text, text
        assert (
            f'cancel it by setting the Airflow Variable logtide_dump_control_{a_dump} to {{"state": "cancelled"}}'
            in text
        )
        assert "clear this task once it is done" in text
        assert not ProgressStore(zone, dump_id_for_run(run_id)).folder.exists()  # nothing written
    assert airflow.get(airflow.run_url("logtide_dump", a))["state"] == "running"

    ti = f"{airflow.run_url('logtide_dump', a)}/taskInstances/dump_maria/0"
    assert airflow.client.patch(ti, json={"new_state": "failed"}).status_code == 200
    # the task stops before its next chunk: it says so, its record says so, its claim is free
    wait_for(lambda: "dump.stopped" in _log_text(airflow, a, "dump_maria", 0), 60, 0.5, "A's task to stop")
    record = read_record(store.folder / RECORD) or {}
    assert record["state"] == "failed" and "stopped by Airflow" in record["error"], record
    stopped_at = store.load(DATABASE, "ledger").chunk
    assert 2 <= stopped_at < ROWS // 30 and LocalClaims(zone).probe(ledger) is None

    # no more waiting between A's chunks (its control Variable), then clear A's task and B's
    variable = {"key": f"logtide_dump_control_{a_dump}", "value": '{"delay_s": 0}'}
    assert airflow.client.post("/api/v2/variables", json=variable).status_code == 201

    clear = {"dry_run": False, "task_ids": [["dump_maria", 0]], "only_failed": True, "reset_dag_runs": True,
             "include_downstream": True}  # fmt: skip
    for run_id in (a, b):
        response = airflow.client.post(
            "/api/v2/dags/logtide_dump/clearTaskInstances", json={**clear, "dag_run_id": run_id}
        )
        assert response.status_code == 200, response.text
        assert airflow.wait_finished("logtide_dump", run_id, timeout=300) == "success", airflow.task_states(
            "logtide_dump", run_id
        )
    assert f"dump.table_resumed dump_id={a_dump} table={ledger} after_chunk={stopped_at}" in _log_text(
        airflow, a, "dump_maria", 0, attempt=2
    )
    for run_id in (a, b):
        progress = ProgressStore(zone, dump_id_for_run(run_id)).load(DATABASE, "ledger")
        assert progress.done and progress.rows == ROWS, progress
    _no_password_in_the_task_logs(live)


@pytest.mark.parametrize("source", ["maria", "pg"])
def test_a_dump_ends_with_its_merge_under_a_real_scheduler(live: Live, dump_runs: dict[str, str], source: str):
    airflow, run_id = live.airflow, dump_runs[source]
    states = airflow.task_states("logtide_dump", run_id)
    state = airflow.get(airflow.run_url("logtide_dump", run_id))["state"]
    assert state == "success", (states, airflow.logs())
    other = "pg" if source == "maria" else "maria"
    assert states[(f"plan_{other}", -1)] == states[(f"merge_{other}", -1)] == "skipped"
    assert states[(f"dump_{source}", 0)] == states[(f"landed_{source}", -1)] == states[(f"merge_{source}", -1)]
    assert states[(f"merge_{source}", -1)] == "success"

    summary = airflow.xcom("logtide_dump", run_id, "summary")
    assert summary["tables"] == 1 and summary["rows"] >= ROWS
    # progress in the task log, one line per chunk (what a person watches in the UI)
    task_log = airflow.task_log("logtide_dump", run_id, f"dump_{source}", map_index=0)
    chunk_lines = [e["event"] for e in task_log if str(e.get("event", "")).startswith("dump.chunk ")]
    assert len(chunk_lines) == summary["chunks"] > ROWS // 40 and " chunk=1 " in chunk_lines[0]

    # the merge's report and its Asset events crossed Airflow's serializer: LSNs as decimal text
    report = airflow.xcom("logtide_dump", run_id, f"merge_{source}")
    assert isinstance(report["frontier"], str) and int(report["frontier"]) > 2**32
    merged = {t["table"]: t for t in report["tables"]}
    assert sorted(merged) == sorted(f"{SCHEMA[source]}.{t}" for t in TABLES)
    assert all(int(t["frontier"]) == int(report["frontier"]) and t["chunks"] > ROWS // 40 for t in merged.values())
    events = airflow.get("/api/v2/assets/events", source_run_id=run_id)["asset_events"]
    assert sorted(e["uri"] for e in events) == sorted(
        f"iceberg://logtide/{source}/{SCHEMA[source]}__{t}" for t in TABLES
    )
    assert all(e["extra"]["frontier"] == report["frontier"] for e in events)

    live.targets_equal_sources((source,))


def test_logtide_merge_brings_later_changes_of_every_source(live: Live, dump_runs: dict[str, str]):
    for source, server in live.servers.items():
        quote = "`" if source == "maria" else '"'
        server.execute(
            f"UPDATE {quote}ledger{quote} SET v = v + 1000, note = 'later' WHERE id % 7 = 0",
            f"DELETE FROM {quote}ledger{quote} WHERE id % 11 = 0",
            f"INSERT INTO {quote}ledger{quote} (id, v, note) VALUES (500000, 1, 'new')",
            database=DATABASE,
        )
        live.wait_until_landed(source)
    run_id = live.airflow.trigger("logtide_merge", {})  # source null: every source, every landed table
    state = live.airflow.wait_finished("logtide_merge", run_id)
    states = live.airflow.task_states("logtide_merge", run_id)
    assert state == "success" and states[("merge_maria", -1)] == states[("merge_pg", -1)] == "success", states
    live.targets_equal_sources()


def _png_width(path: Path) -> int:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">I", data[16:20])[0]


def test_screenshots_of_the_trigger_form_a_finished_run_and_a_task_log(
    live: Live, dump_runs: dict[str, str], tmp_path: Path
):
    """What a person sees: the trigger form (optional fields not marked required, keys as JSON),
    the grid of the finished dump run, the log of its dump task with a line per chunk.
    `LOGTIDE_SCREENSHOTS=docs/airflow` keeps them where the README shows them."""
    folder = Path(SCREENSHOTS) if SCREENSHOTS else tmp_path
    run_id, url = dump_runs["maria"], live.airflow.url
    browser = Browser(live.folder)
    try:
        browser.get(f"{url}/api/v2/version")  # a page of the host, for its cookie
        browser.add_cookie("_token", live.airflow.token)

        browser.resize(1400, 2000)  # the whole form
        browser.get(f"{url}/dags/logtide_dump")
        browser.click("//button[normalize-space()='Trigger']")
        browser.wait_text("Key range start, inclusive", "max_rows_per_s")
        # one field takes a string per line (tables); keys and key ranges take JSON
        assert len(browser.elements("//textarea[@placeholder='Enter each string on a new line']")) == 1
        browser.screenshot(folder / "trigger-form.png")

        browser.resize(1400, 760)
        browser.get(f"{url}/dags/logtide_dump/runs/{run_id}")
        browser.wait_text("merge_maria", "landed_maria", "Success")
        browser.screenshot(folder / "run-grid.png")

        browser.resize(1800, 760)  # log lines are long
        browser.get(f"{url}/dags/logtide_dump/runs/{run_id}/tasks/dump_maria/mapped/0")
        browser.wait_text("dump.chunk", "dump.table_finished")
        browser.screenshot(folder / "task-log.png")
    finally:
        browser.quit()
    widths = {name: _png_width(folder / name) for name in ("trigger-form.png", "run-grid.png", "task-log.png")}
    assert widths == {"trigger-form.png": 1400, "run-grid.png": 1400, "task-log.png": 1800}


def test_with_capture_stopped_a_dump_is_not_merged_and_a_merge_warns(live: Live):
    """Capture of maria stopped: a dump's `landed_maria` fails at once (its HIGH watermarks cannot
    land, so nothing is reported merged) and says what to clear; a `logtide_merge` merges what has
    landed, with a warning saying how far that reaches. Capture started again, clearing the failed
    task alone leaves the merge upstream_failed (the log said so); clearing it with its downstream
    tasks, as the UI's Clear > Downstream does, merges the dump: the target equals the table."""
    airflow, capture, ledger = live.airflow, live.captures["maria"], f"{DATABASE}.ledger"
    live.servers["maria"].execute("UPDATE ledger SET note = 'before stop' WHERE id = 3", database=DATABASE)
    live.wait_until_landed("maria")
    capture.stop()
    try:
        run = airflow.trigger("logtide_dump", {"source": "maria", "tables": [ledger], "chunk_size": 200})
        merge = airflow.trigger("logtide_merge", {"source": "maria"})
        assert airflow.wait_finished("logtide_dump", run, timeout=300) == "failed"
        states = airflow.task_states("logtide_dump", run)
        assert states[("dump_maria", 0)] == "success" and states[("landed_maria", -1)] == "failed", states
        assert states[("merge_maria", -1)] == "upstream_failed", states
        text = _log_text(airflow, run, "landed_maria")
        assert "capture for source maria is not running (no process holds " in text, text
        assert f"of {ledger} (chunk " in text and "cannot be merged and nothing was merged" in text
        assert "clear this task with its downstream tasks (in the UI: Clear, Downstream)" in text

        assert airflow.wait_finished("logtide_merge", merge) == "success"
        text = _log_text(airflow, merge, "merge_maria", dag_id="logtide_merge")
        assert "merge.landing source=maria frontier=" in text and " last_commit_at=" in text, text
        assert "merge.capture_stopped source=maria" in text
        assert "changes made in the source since are not merged" in text
    finally:
        capture.start()
        capture.wait_running()
    live.servers["maria"].execute("UPDATE ledger SET note = 'after stop' WHERE id = 4", database=DATABASE)
    live.wait_until_landed("maria")
    clear = {"dry_run": False, "task_ids": ["landed_maria"], "only_failed": False, "reset_dag_runs": True,
             "dag_run_id": run}  # fmt: skip
    for downstream in (False, True):
        response = airflow.client.post(
            "/api/v2/dags/logtide_dump/clearTaskInstances", json={**clear, "include_downstream": downstream}
        )
        assert response.status_code == 200, response.text
        state = airflow.wait_finished("logtide_dump", run, timeout=600)
        states = airflow.task_states("logtide_dump", run)
        assert states[("landed_maria", -1)] == "success", states
        if not downstream:
            assert state == "failed" and states[("merge_maria", -1)] == "upstream_failed", states
    assert state == "success" and states[("merge_maria", -1)] == "success", states
    live.targets_equal_sources(("maria",))


def test_a_run_marked_failed_finishes_when_its_failed_task_is_cleared_with_downstream(live: Live):
    """Marking a running dump run failed stops its dump task and marks `summary`, `landed_maria`
    and `merge_maria` skipped. The stopped task's log says what to clear; clearing it with its
    downstream tasks (the UI's Clear > Downstream, not Only failed) resumes the dump, merges it
    and ends the run `success`: the target equals the table."""
    from logtide_airflow.operators import dump_id_for_run

    airflow, ledger = live.airflow, f"{DATABASE}.ledger"
    run = airflow.trigger("logtide_dump", {"source": "maria", "tables": [ledger], "chunk_size": 60, "delay_s": 1})
    store = ProgressStore(live.captures["maria"].zone, dump_id_for_run(run))
    wait_for(lambda: store.load(DATABASE, "ledger").chunk >= 2, 300, 0.1, "the second chunk")
    assert airflow.client.patch(airflow.run_url("logtide_dump", run), json={"state": "failed"}).status_code == 200
    wait_for(lambda: "dump.stopped" in _log_text(airflow, run, "dump_maria", 0), 60, 0.5, "the task to stop")
    states = airflow.task_states("logtide_dump", run)
    assert states[("dump_maria", 0)] == "failed", states
    assert states[("landed_maria", -1)] == states[("merge_maria", -1)] == states[("summary", -1)] == "skipped"
    text = _log_text(airflow, run, "dump_maria", 0)
    assert "clear this task with its downstream tasks (in the UI: Clear, Downstream; not Only failed)" in text, text

    clear = {"dry_run": False, "task_ids": [["dump_maria", 0]], "only_failed": False, "reset_dag_runs": True,
             "include_downstream": True, "dag_run_id": run}  # fmt: skip
    response = airflow.client.post("/api/v2/dags/logtide_dump/clearTaskInstances", json=clear)
    assert response.status_code == 200, response.text
    assert airflow.wait_finished("logtide_dump", run, timeout=600) == "success", airflow.task_states(
        "logtide_dump", run
    )
    states = airflow.task_states("logtide_dump", run)
    assert states[("merge_maria", -1)] == states[("summary", -1)] == "success", states
    live.targets_equal_sources(("maria",))


def test_hostile_params_and_tables_of_an_every_table_dump(live: Live):
    """Runs triggered together, without merges, then a dump of every table of a database that holds a keyless
    table, a key under a case-insensitive collation and a table named in Unicode; keys that no row
    has; a Unicode table name in the params; a table name quoted as in SQL."""
    airflow, ledger = live.airflow, f"{DATABASE}.ledger"
    live.servers["maria"].execute(
        "CREATE TABLE nokey_live (v INT)",
        "INSERT INTO nokey_live VALUES (1), (1)",
        "CREATE TABLE ci_keys (k VARCHAR(10) COLLATE utf8mb4_general_ci PRIMARY KEY, v INT)",
        "INSERT INTO ci_keys VALUES ('a', 1), ('B', 2), ('c', 3), ('ö', 4)",
        "CREATE TABLE `café` (id INT PRIMARY KEY, `naïve` VARCHAR(10)) DEFAULT CHARSET utf8mb4",
        "INSERT INTO `café` VALUES (1, 'é'), (2, '漢字')",
        database=DATABASE,
    )
    base = {"source": "maria", "merge": False, "chunk_size": 2}
    runs = {
        "no keys": airflow.trigger("logtide_dump", {**base, "tables": [ledger], "keys": [999_999, 1_000_000]}),
        "unicode": airflow.trigger("logtide_dump", {**base, "tables": [f"{DATABASE}.café"]}),
        "quoted": airflow.trigger("logtide_dump", {**base, "tables": [f"`{DATABASE}`.`ci_keys`"]}),
    }
    ends = {name: airflow.wait_finished("logtide_dump", run_id, timeout=600) for name, run_id in runs.items()}
    # after them: the ledger is claimed by the run dumping it (tested above)
    runs["every"] = airflow.trigger("logtide_dump", {"source": "maria", "merge": False, "tables": []})
    ends["every"] = airflow.wait_finished("logtide_dump", runs["every"], timeout=600)
    summaries = {n: airflow.xcom("logtide_dump", r, "summary") for n, r in runs.items() if ends[n] == "success"}
    texts = {n: _log_text(airflow, r, "plan_maria") for n, r in runs.items()}
    assert ends == {"every": "success", "no keys": "success", "unicode": "success", "quoted": "failed"}, ends
    every = {t["table"]: t for t in summaries["every"]["per_table"]}
    assert {t: every[t]["rows"] for t in (f"{DATABASE}.ci_keys", f"{DATABASE}.café")} == {
        f"{DATABASE}.ci_keys": 4,
        f"{DATABASE}.café": 2,
    }
    assert [s["table"] for s in summaries["every"]["skipped"]] == [f"{DATABASE}.nokey_live"]
    assert summaries["no keys"]["missing_keys"] == 2 and summaries["no keys"]["rows"] == 0
    assert summaries["unicode"]["rows"] == 2
    assert f"write table names without quotes: {DATABASE}.ci_keys" in texts["quoted"], texts["quoted"]


def test_the_runs_of_a_backfill_queue_for_their_table_instead_of_failing(live: Live):
    """`logtide_backfill_maria` appears (its schedule added to the config) and starts its scheduled
    run at once (no catchup: the latest past fire time); a backfill over two more dates, created
    through the API as `airflow backfill create` does (Airflow starts up to 10 of its runs at once,
    whatever the DAG's max_active_runs), competes for the ledger's claim: the runs that find it
    held by another run of the DAG wait (rescheduled, saying which dump holds it), then dump it.
    Every run ends `success`, each with a whole dump of the table."""
    from logtide_airflow.operators import dump_id_for_run

    airflow, zone, dag_id = live.airflow, live.captures["maria"].zone, "logtide_backfill_maria"
    config = yaml.safe_load((live.folder / "logtide.yaml").read_text())
    config["sources"]["maria"]["dump"] = {"backfill_schedule": "0 3 1 1 *", "backfill_tables": [f"{DATABASE}.ledger"],
                                          "chunk_size": 100, "delay_s": 1}  # fmt: skip
    (live.folder / "logtide.yaml").write_text(yaml.safe_dump(config))
    airflow.wait_dag(dag_id, timeout=300)
    body = {"dag_id": dag_id, "from_date": "2024-01-01T00:00:00Z", "to_date": "2025-06-01T00:00:00Z",
            "dag_run_conf": {"merge": False}}  # fmt: skip
    # on SQLite Airflow refused it with 503 while its metadata database was busy; on PostgreSQL it takes it
    response = airflow.client.post("/api/v2/backfills", json=body)
    assert response.status_code == 200, response.text
    wait_for(lambda: len(airflow.get(f"/api/v2/dags/{dag_id}/dagRuns")["dag_runs"]) >= 3, 120, 1, "three runs")
    runs = [r["dag_run_id"] for r in airflow.get(f"/api/v2/dags/{dag_id}/dagRuns")["dag_runs"]]
    states = {run_id: airflow.wait_finished(dag_id, run_id, timeout=900) for run_id in runs}
    assert set(states.values()) == {"success"}, {r: airflow.task_states(dag_id, r) for r in runs}
    rows = len(live.table_state("maria", "ledger"))
    for run_id in runs:
        progress = ProgressStore(zone, dump_id_for_run(run_id, "backfill-")).load(DATABASE, "ledger")
        assert progress.done and progress.rows == rows, (run_id, progress)
    queued = [
        text
        for run_id in runs
        if "dump.claim_queued" in (text := _log_text(airflow, run_id, "dump_maria", 0, dag_id=dag_id))
    ]
    assert queued and f"table={DATABASE}.ledger holder=backfill-" in queued[0], queued


MANY_TABLES = 28  # a dump run each, triggered at once: Airflow's SQLite metadata database gave out
MANY_ROWS = 60


def test_many_dump_runs_triggered_at_once_all_succeed(live: Live):
    """A data engineer's script (or several people in the UI) triggers a dump of each of 28 tables
    at once through the REST API, without merges, then one `logtide_merge` of them. On a SQLite
    metadata database the scheduler and the dag-processor exited with `database is locked` within
    30 s and the triggers timed out (at load 8); with a 60 s busy timeout no trigger was answered
    within 30 s. Every trigger must be accepted, every run end `success`, no Airflow process exit,
    and every target equal its table."""
    import time

    airflow = live.airflow
    tables = [f"many_{i:02d}" for i in range(MANY_TABLES)]
    live.servers["maria"].execute(
        *(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT, note VARCHAR(20))" for t in tables),
        *(f"INSERT INTO {t} SELECT seq, seq * {i}, CONCAT('{t}-', seq) FROM seq_1_to_{MANY_ROWS}"
          for i, t in enumerate(tables)),
        database=DATABASE,
    )  # fmt: skip
    live.wait_until_landed("maria")
    began, load = time.monotonic(), os.getloadavg()[0]
    conf = {"source": "maria", "chunk_size": 15, "merge": False}

    def dump(table: str) -> str:
        return airflow.trigger("logtide_dump", {**conf, "tables": [f"{DATABASE}.{table}"]})

    with ThreadPoolExecutor(len(tables)) as pool:  # at once, as a script over the REST API (or many users) would
        runs = dict(zip(tables, pool.map(dump, tables), strict=True))
    states = {t: airflow.wait_finished("logtide_dump", run_id, timeout=900) for t, run_id in runs.items()}
    dumped_s = time.monotonic() - began
    assert airflow.exited() == {}, airflow.logs()
    assert set(states.values()) == {"success"}, {t: s for t, s in states.items() if s != "success"}
    live.wait_until_landed("maria")
    merge = airflow.trigger("logtide_merge", {"source": "maria", "tables": [f"{DATABASE}.{t}" for t in tables]})
    assert airflow.wait_finished("logtide_merge", merge, timeout=900) == "success"
    print(f"\n{MANY_TABLES} dump runs triggered at load {load:.1f}: all success in {dumped_s:.0f} s, "
          f"merged in {time.monotonic() - began:.0f} s; load now {os.getloadavg()[0]:.1f}")  # fmt: skip
    assert airflow.exited() == {}, airflow.logs()
    from capture.merge.spark_types import quote

    with iceberg(live.config) as spark:
        for t in tables:
            name = ".".join(quote(p) for p in ("logtide", "maria", f"{DATABASE}__{t}"))
            rows = [r.asDict() for r in spark.table(name).drop("_lsn", "_applied_at").collect()]
            assert {(r["id"],): r for r in rows} == live.table_state("maria", t), t
