"""The Spark merge from Airflow: `logtide_dump` ends with a merge of what it dumped, once capture
has landed the dump's last chunks, and `logtide_merge` runs on demand; the Iceberg targets then
equal the source tables row for row. Runs with `dag.test()` against the private MariaDB while
capture runs; each merge is a real spark-submit (local[2])."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from capture.config import LogtideConfig, load_config
from tests.airflow.airflow_helpers import (
    TABLES,
    iceberg,
    load_dag,
    populate,
    recorded_events,
    set_variable,
    task_states,
    xcoms,
)
from tests.conftest import ROOT
from tests.integration.dumping import Workload, table_state, wait_until_landed
from tests.servers import wait_for

pytestmark = [pytest.mark.airflow, pytest.mark.usefixtures("jvm_class_archive")]  # its merges start warm


def with_merge(capture, tmp_path: Path, **merge: Any) -> LogtideConfig:
    """Add a `merge` section (a Hadoop catalog in the test's folder) to the capture's config file."""
    data = yaml.safe_load(capture.config_path.read_text())
    data["merge"] = {
        "warehouse": str(tmp_path / "warehouse"),
        "jars_dir": str(ROOT / "var" / "jars"),
        "spark_master": "local[2]",
        "spark_conf": {"spark.sql.shuffle.partitions": "4"},
        **merge,
    }
    capture.config_path.write_text(yaml.safe_dump(data))
    return load_config(capture.config_path, require_env=False)


def target_state(spark: Any, config: LogtideConfig, database: str, table: str) -> dict:
    from capture.merge.spark_types import quote

    name = ".".join(quote(p) for p in (config.merge.catalog_name, "src", f"{database}__{table}"))
    rows = [r.asDict() for r in spark.table(name).drop("_lsn", "_applied_at").collect()]
    return {(r["id"],): r for r in rows}


def asset_events(uri: str) -> list[tuple[str | None, dict]]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        query = session.query(AssetEvent).join(AssetModel, AssetModel.id == AssetEvent.asset_id)
        return [(e.source_run_id, dict(e.extra)) for e in query.filter(AssetModel.uri == uri).all()]


@pytest.mark.usefixtures("spark")  # `iceberg` reads the targets in a session on the run's SparkContext
def test_a_dump_ends_with_a_merge_and_logtide_merge_runs_on_demand(
    airflow_ready, mariadb, database, make_capture, tmp_path
):
    populate(mariadb, database, 1003)  # history only a dump brings; 1003: the last chunk has rows
    # capture commits every 2 s: a merge that did not wait for the last HIGH watermarks would miss chunks
    capture = make_capture([f"{database}.*"], landing={"flush_interval_s": 2.0})
    config = with_merge(capture, tmp_path)
    capture.start()
    capture.wait_running()
    set_variable("logtide_config_path", str(capture.config_path))
    names = [f"{database}.{t}" for t in TABLES]

    # writes during the first chunks of the dump (their windows), none after its last chunks
    workloads = [Workload(mariadb, database, t, 100_000, seed) for seed, t in enumerate(TABLES)]
    stopped: dict[str, Any] = {}

    def stop_after_first_chunks(events) -> None:
        try:
            wait_for(lambda: len(events.named("dump.chunk")) >= 3, 120, interval=0.02, what="the first chunks")
        except BaseException as exc:
            stopped["error"] = exc
        finally:
            for w in workloads:
                w.stop()
            stopped["chunks_before_stop"] = len(events.named("dump.chunk"))

    for w in workloads:
        w.start()
    with recorded_events() as events:
        stopper = threading.Thread(target=stop_after_first_chunks, args=(events,))
        stopper.start()
        try:
            run = load_dag("logtide_dump").test(
                run_conf={"source": "src", "tables": names, "chunk_size": 100, "delay_s": 0.1}
            )
        finally:
            stopper.join(60)
    assert "error" not in stopped, stopped["error"]
    assert stopped["chunks_before_stop"] < 11  # stopped before the last chunk of the first table
    states = task_states("logtide_dump", run.run_id)
    assert run.state == "success", states
    assert states[("landed_src", -1)] == states[("merge_src", -1)] == "success"
    assert states[("landed_nightly", -1)] == states[("merge_nightly", -1)] == "skipped"
    assert all(w.transactions > 5 for w in workloads)

    report = xcoms("logtide_dump", run.run_id)[("merge_src", -1, "return_value")]
    merged = {t["table"]: t for t in report["tables"]}
    assert sorted(merged) == sorted(names)
    landed = {e["table"]: e for e in events.named("merge.dump_landed")}
    assert sorted(landed) == sorted(names)
    for name in names:  # the merge applied everything up to past each table's last HIGH watermark
        assert int(landed[name]["high_lsn"]) < int(landed[name]["frontier"]) <= int(report["frontier"])
        assert merged[name]["chunks"] == landed[name]["chunk"] >= 11  # every chunk of the dump, the last too

    with iceberg(config) as spark:
        for table in TABLES:
            assert target_state(spark, config, database, table) == table_state(mariadb, database, table), table

        # later changes reach the target with an on-demand logtide_merge of one table
        mariadb.execute(
            "UPDATE ledger SET v = v + 1000, note = 'later' WHERE id % 7 = 0",
            "DELETE FROM ledger WHERE id % 11 = 0",
            "INSERT INTO ledger VALUES (500000, 1, 'new'), (500001, 2, 'new')",
            "DELETE FROM accounts WHERE id < 10",
            database=database,
        )
        wait_until_landed(mariadb, capture)
        before = target_state(spark, config, database, "accounts")
        on_demand = load_dag("logtide_merge").test(run_conf={"source": "src", "tables": [f"{database}.ledger"]})
        states = task_states("logtide_merge", on_demand.run_id)
        assert on_demand.state == "success", states
        assert states[("plan_nightly", -1)] == states[("merge_nightly", -1)] == "skipped"
        report = xcoms("logtide_merge", on_demand.run_id)[("merge_src", -1, "return_value")]
        assert [t["table"] for t in report["tables"]] == [f"{database}.ledger"]
        ledger = target_state(spark, config, database, "ledger")
        assert ledger == table_state(mariadb, database, "ledger")
        assert ledger[(500001,)]["note"] == "new" and (77,) not in ledger
        assert target_state(spark, config, database, "accounts") == before  # not asked for: untouched

    # Assets: one event per merge that committed to the table
    ledger_uri = f"iceberg://logtide/src/{database}__ledger"
    events_ledger = asset_events(ledger_uri)
    assert [run_id for run_id, _ in events_ledger] == [run.run_id, on_demand.run_id]
    assert events_ledger[-1][1]["table"] == f"{database}.ledger" and int(events_ledger[-1][1]["frontier"]) > 0
    assert [run_id for run_id, _ in asset_events(f"iceberg://logtide/src/{database}__accounts")] == [run.run_id]


def test_the_merge_waits_for_capture_and_says_so_when_it_does_not_land(
    airflow_ready, mariadb, database, make_capture, tmp_path
):
    mariadb.execute(
        "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(10))",
        "INSERT INTO items SELECT seq, CONCAT('i', seq) FROM seq_1_to_30",
        database=database,
    )
    capture = make_capture([f"{database}.*"])  # never started: nothing lands
    with_merge(capture, tmp_path, landed_timeout_s=2)
    set_variable("logtide_config_path", str(capture.config_path))
    with recorded_events() as events:
        run = load_dag("logtide_dump").test(run_conf={"source": "src", "tables": [f"{database}.items"]})
    states = task_states("logtide_dump", run.run_id)
    assert run.state == "failed"
    assert states[("dump_src", 0)] == states[("summary", -1)] == "success", states
    assert states[("landed_src", -1)] == "failed" and states[("merge_src", -1)] == "upstream_failed"
    [error] = [e["error"] for e in events.named("merge.not_landed")]
    # capture not running: it says so at once, not after merge.landed_timeout_s
    assert error.startswith("capture for source src is not running (no process holds "), error
    assert "no checkpoint): HIGH watermark " in error and f"of {database}.items (chunk 1 of dump " in error
    assert "cannot be merged and nothing was merged. Start `logtide capture --source src`" in error
    assert "clear this task with its downstream tasks (in the UI: Clear, Downstream)" in error


def test_bad_merge_params_are_refused_with_the_reason(airflow_ready, mariadb, database, make_capture, tmp_path):
    from airflow.sdk.exceptions import ParamValidationError

    for conf, message in [
        ({"source": "elsewhere"}, "'elsewhere' is not one of [None, 'nightly', 'src']"),
        ({"source": "src", "tables": ["no_database"]}, "'no_database' does not match"),
    ]:
        with pytest.raises(ParamValidationError) as info:
            load_dag("logtide_merge").test(run_conf=conf)
        assert message in str(info.value), (conf, str(info.value))

    mariadb.execute("CREATE TABLE present (id INT PRIMARY KEY)", "INSERT INTO present VALUES (1)", database=database)
    capture = make_capture([f"{database}.*"])
    with_merge(capture, tmp_path)
    set_variable("logtide_config_path", str(capture.config_path))
    with recorded_events() as events:  # capture not started: a merge of the source is no silent success
        run = load_dag("logtide_merge").test(run_conf={"source": "src"})
    states = task_states("logtide_merge", run.run_id)
    assert run.state == "failed" and states[("merge_src", -1)] == "upstream_failed", states
    [error] = [e["error"] for e in events.named("merge.refused")]
    assert error.startswith("nothing of source src has landed in ") and "`logtide capture --source src`" in error

    capture.start()
    capture.wait_running()
    mariadb.execute("INSERT INTO present VALUES (2)", database=database)
    capture.wait_events(database, "present", 1)
    with recorded_events() as events:
        run = load_dag("logtide_merge").test(run_conf={"source": "src", "tables": [f"{database}.missing"]})
    states = task_states("logtide_merge", run.run_id)
    assert run.state == "failed"
    assert states[("plan_src", -1)] == "failed" and states[("merge_src", -1)] == "upstream_failed", states
    [error] = [e["error"] for e in events.named("merge.refused")]
    assert error.startswith(f"table {database}.missing has nothing in the landing zone of source src")
    assert error.endswith(f"tables there: {database}.present")

    with recorded_events() as events:  # a conf key that is no param fails the run before any merge
        run = load_dag("logtide_merge").test(run_conf={"source": "src", "table": f"{database}.present"})
    states = task_states("logtide_merge", run.run_id)
    assert run.state == "failed" and states[("merge_src", -1)] == "upstream_failed", states
    refusal = events.named("airflow.conf_refused")[0]
    assert (refusal["unknown"], refusal["known"]) == ("table", "source,tables")
    assert refusal["error"].startswith("unknown param(s) in the run's conf: table; the params of logtide_merge are")
    assert not list((tmp_path / "warehouse").glob("*"))  # nothing merged
