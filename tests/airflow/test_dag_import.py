"""The DAG files import cleanly and build the graph the README describes."""

from __future__ import annotations

import sys

import pytest

from tests.airflow.airflow_helpers import recorded_events
from tests.airflow.conftest import DAGS

pytestmark = pytest.mark.airflow


def test_dag_files_import_without_errors(airflow_ready):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == ["logtide_backfill_nightly", "logtide_dump", "logtide_merge"]

    dump = bag.get_dag("logtide_dump")
    from airflow.sdk.definitions._internal.types import NOTSET

    assert dump.schedule is None and dump.catchup is False
    assert {t.task_id: t.pool for t in dump.tasks if t.task_id.startswith("dump_")} == {
        "dump_nightly": "logtide_nightly",
        "dump_src": "logtide_src",
    }
    assert {t.task_id: sorted(t.downstream_task_ids) for t in dump.tasks} == {
        "plan_src": ["dump_src", "landed_src"],
        "plan_nightly": ["dump_nightly", "landed_nightly"],
        "dump_src": ["landed_src", "summary"],
        "dump_nightly": ["landed_nightly", "summary"],
        "landed_src": ["merge_src"],
        "landed_nightly": ["merge_nightly"],
        "merge_src": [],
        "merge_nightly": [],
        "summary": [],
    }
    assert "source" in dump.params and dump.params.get_param("source").schema["enum"] == ["nightly", "src"]
    assert dump.params.get_param("source").value is NOTSET  # two sources: the form asks

    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk import AssetAlias

    merges = {t.task_id: t for t in dump.tasks if t.task_id.startswith("merge_")}
    assert all(isinstance(t, SparkSubmitOperator) for t in merges.values())
    assert merges["merge_src"].outlets == [AssetAlias("logtide_iceberg_src")]

    merge = bag.get_dag("logtide_merge")
    assert merge.schedule is None and merge.catchup is False and merge.max_active_runs == 1
    assert {t.task_id: sorted(t.downstream_task_ids) for t in merge.tasks} == {
        "plan_src": ["merge_src"],
        "plan_nightly": ["merge_nightly"],
        "merge_src": [],
        "merge_nightly": [],
    }
    assert merge.params["source"] is None and merge.params["tables"] == []

    backfill = bag.get_dag("logtide_backfill_nightly")
    assert backfill.catchup is False and backfill.schedule == "0 3 * * *"
    assert [t.pool for t in backfill.tasks if t.task_id.startswith("dump_")] == ["logtide_nightly"]
    assert backfill.params["source"] == "nightly"
    assert backfill.params["tables"] == ["shop.orders"]


def test_the_trigger_form_marks_optional_fields_optional_and_preselects_a_single_source(airflow_ready):
    """What the Airflow UI builds its form from: a field is required unless its type admits null,
    and an array whose items have no single type other than string gets a JSON editor rather than
    one string per line (screenshots of the form: tests/airflow/test_live.py)."""
    from airflow.sdk.definitions._internal.types import NOTSET

    from logtide_airflow.dag_factory import dump_params

    params = dump_params(["shop"])
    assert params["source"].value == "shop" and dump_params(["a", "b"])["source"].value is NOTSET
    for name in ("tables", "keys", "key_from", "key_to", "chunk_size", "delay_s", "max_rows_per_s"):
        assert "null" in params[name].schema["type"], name
    assert params["tables"].schema["items"]["type"] == "string"  # tables: one per line
    assert isinstance(params["keys"].schema["items"]["type"], list)  # keys: JSON, typed as written
    good = {"source": "shop", "keys": [17, 42], "key_from": [100, "a"], "key_to": "abc"}
    for name, value in good.items():
        assert params[name].resolve(value) == value
    assert params["key_from"].resolve(100) == 100


def test_the_plugin_loader_leaves_the_package_to_the_dag_files(airflow_ready):
    """plugins/.airflowignore keeps Airflow from importing each file of logtide_airflow again as a
    top-level module (`hooks`, `operators`...); the DAG files import the package itself."""
    from airflow import plugins_manager

    _, errors = plugins_manager._get_plugins()
    assert errors == {}
    assert not {"hooks", "operators", "control", "dag_factory"} & set(sys.modules)


def test_without_a_config_the_dag_files_define_nothing_and_say_why(airflow_ready, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.delenv("LOGTIDE_CONFIG")
    with recorded_events() as events:
        bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {} and bag.dag_ids == []
    assert [e["reason"] for e in events.named("airflow.no_config")] == [
        "LOGTIDE_CONFIG is not set in the DAG processor's environment"
    ] * 3
