"""`logtide_dump` run with `dag.test()` against the private PostgreSQL while capture runs: the same
DAG, operator and hook as for MariaDB, the source's kind chosen by the config the tasks read."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from capture.landing.chunks import chunk_files, read_chunk_meta
from tests.airflow.airflow_helpers import load_dag, set_variable, task_states, xcoms
from tests.integration.postgres.conftest import make_pg_capture, pg_database  # noqa: F401 - fixtures
from tests.integration.postgres.dumping import Workload, reconciled_state, table_state, wait_until_landed

# Airflow (and logtide_airflow) is imported inside the tests, see tests/airflow/test_dump_dag.py.

pytestmark = pytest.mark.airflow

TABLES = ("ledger", "accounts")


def test_dump_of_two_postgres_tables_during_writes_reconciles(airflow_ready, postgres, request):
    database, make = request.getfixturevalue("pg_database"), request.getfixturevalue("make_pg_capture")
    for table in TABLES:
        postgres.execute(
            f'CREATE TABLE "{table}" (id int PRIMARY KEY, v int, note text COLLATE "en-x-icu")',
            f"INSERT INTO \"{table}\" SELECT i, i % 100, 'row' || i FROM generate_series(1, 1500) i",
            database=database,
        )
    capture = make().start()
    capture.wait_running()
    set_variable("logtide_config_path", str(capture.config_path))
    workloads = [Workload(postgres, database, t, 100_000, seed) for seed, t in enumerate(TABLES)]
    for w in workloads:
        w.start()
    try:
        run = load_dag("logtide_dump").test(
            run_conf={
                "source": "src",
                "tables": [f"public.{t}" for t in TABLES],
                "chunk_size": 40,
                "merge": False,  # the merge at the end: tests/airflow/test_merge_dag.py
            }
        )
    finally:
        for w in workloads:
            w.stop()
    states = task_states("logtide_dump", run.run_id)
    assert run.state == "success", states
    assert states[("dump_src", 0)] == states[("dump_src", 1)] == states[("summary", -1)] == "success"

    wait_until_landed(postgres, database, capture)
    summary = xcoms("logtide_dump", run.run_id)[("summary", -1, "return_value")]
    per_table = {t["table"]: t for t in summary["per_table"]}
    assert sorted(per_table) == sorted(f"public.{t}" for t in TABLES)
    for table in TABLES:
        state, stats = reconciled_state(capture, "public", table)
        assert state == table_state(postgres, database, table), table
        metas = [read_chunk_meta(p) for p in chunk_files(capture.zone, "public", table)]
        assert all(m.read_view for m in metas)  # PostgreSQL chunks record their snapshot
        assert per_table[f"public.{table}"]["rows"] == sum(m.rows for m in metas) >= 1500
        assert per_table[f"public.{table}"]["chunks"] == stats.chunks > 1500 // 40
    assert all(w.transactions > 20 for w in workloads)


def test_key_lists_and_ranges_of_a_composite_postgres_key(airflow_ready, postgres, request):
    """Params reach the PostgreSQL dump as JSON gave them; the key range is the database's (ICU) order."""
    database, make = request.getfixturevalue("pg_database"), request.getfixturevalue("make_pg_capture")
    postgres.execute(
        'CREATE TABLE lines (region text COLLATE "en-x-icu", n int, v int, PRIMARY KEY (region, n))',
        "INSERT INTO lines SELECT r, n, n FROM unnest(ARRAY['eu', 'EU', 'us']) r, generate_series(1, 5) n",
        database=database,
    )
    capture = make().start()
    capture.wait_running()
    set_variable("logtide_config_path", str(capture.config_path))
    table = "public.lines"
    ranged = load_dag("logtide_dump").test(
        run_conf={"source": "src", "tables": [table], "key_from": ["eu", 3], "key_to": ["EU", 2], "merge": False}
    )
    listed = load_dag("logtide_dump").test(
        run_conf={"source": "src", "tables": [table], "keys": [["us", 1], ["EU", 5], ["xx", 1]], "merge": False}
    )
    for run in (ranged, listed):
        assert run.state == "success", task_states("logtide_dump", run.run_id)
    # ICU: 'eu' < 'EU' < 'us' -> (eu,3) (eu,4) (eu,5) (EU,1) (EU,2)
    assert xcoms("logtide_dump", ranged.run_id)[("summary", -1, "return_value")]["rows"] == 5
    summary = xcoms("logtide_dump", listed.run_id)[("summary", -1, "return_value")]
    assert (summary["rows"], summary["missing_keys"]) == (2, 1)
    wait_until_landed(postgres, database, capture)
    dumped = {(r["region"], r["n"]) for p in chunk_files(capture.zone, "public", "lines") for r in _rows(p)}
    assert dumped == {("eu", 3), ("eu", 4), ("eu", 5), ("EU", 1), ("EU", 2), ("us", 1), ("EU", 5)}


def _rows(path) -> list[dict]:
    return pq.read_table(path).column("after").to_pylist()
