"""`logtide_dump` run with `dag.test()` against the private MariaDB while capture runs."""

from __future__ import annotations

import json
import threading
import time

import pyarrow.parquet as pq
import pytest
import yaml

from capture.dump.progress import dump_dir
from capture.dump.record import RECORD, read_record
from capture.landing.chunks import read_chunk_meta
from capture.landing.reader import chunk_files
from tests.airflow.airflow_helpers import (
    TABLES,
    delete_variable,
    dump_source,
    load_dag,
    populate,
    recorded_events,
    set_variable,
    task_states,
    xcoms,
)
from tests.integration.dumping import reconciled_state, table_state, wait_until_landed
from tests.integration.postgres import dumping as pg
from tests.integration.postgres.conftest import make_pg_capture, pg_database  # noqa: F401 - fixtures
from tests.servers import wait_for

# Airflow (and logtide_airflow, which imports it) is imported inside the tests: it reads its
# configuration on import, which the airflow_home fixture provides.

pytestmark = pytest.mark.airflow


@pytest.mark.parametrize("kind", ["mariadb", "postgresql"])
def test_dump_of_two_tables_during_writes_reconciles(airflow_ready, request, kind):
    source = dump_source(request, kind)
    source.populate(1500)
    capture = source.capture().start()
    capture.wait_running()
    set_variable("logtide_config_path", str(capture.config_path))
    workloads = [source.workload(t, seed) for seed, t in enumerate(TABLES)]
    for w in workloads:
        w.start()
    try:
        run = load_dag("logtide_dump").test(
            run_conf={
                "source": "src",
                "tables": [f"{source.schema}.{t}" for t in TABLES],
                "chunk_size": 40,
                "merge": False,  # the merge at the end: test_merge_dag.py
            }
        )
    finally:
        for w in workloads:
            w.stop()
    states = task_states("logtide_dump", run.run_id)
    assert run.state == "success", states
    assert states[("plan_nightly", -1)] == "skipped" and states[("dump_nightly", -1)] == "skipped"
    assert states[("dump_src", 0)] == states[("dump_src", 1)] == states[("summary", -1)] == "success"

    from logtide_airflow.operators import dump_id_for_run

    source.wait_until_landed(capture)
    summary = xcoms("logtide_dump", run.run_id)[("summary", -1, "return_value")]
    assert summary["dump_id"] == dump_id_for_run(run.run_id) and summary["source"] == "src"
    per_table = {t["table"].split(".")[1]: t for t in summary["per_table"]}
    assert sorted(per_table) == sorted(TABLES) and summary["tables"] == 2
    for table in TABLES:
        state, stats = reconciled_state(capture, source.schema, table)
        assert state == source.table_state(table), table
        metas = [read_chunk_meta(p) for p in chunk_files(capture.zone, source.schema, table)]
        assert all((m.read_view is not None) == (kind == "postgresql") for m in metas)  # PostgreSQL's snapshots
        assert per_table[table]["rows"] == sum(m.rows for m in metas if m.dump_id == summary["dump_id"]) >= 1500
        assert per_table[table]["chunks"] == stats.chunks > 1500 // 40
    assert summary["rows"] == sum(t["rows"] for t in per_table.values())
    assert summary["chunks"] == sum(t["chunks"] for t in per_table.values())
    assert all(w.transactions > 20 for w in workloads)


def test_invalid_params_are_refused_when_the_run_is_triggered(airflow_ready):
    from airflow.sdk.exceptions import ParamValidationError

    for conf, message in [
        ({"source": "src", "chunk_size": 0}, "0 is less than the minimum of 1"),
        ({"source": "src", "tables": ["no_database"]}, "'no_database' does not match"),
        ({"source": "src", "delay_s": -1}, "-1 is less than the minimum of 0"),
        ({"source": "src", "max_rows_per_s": 0}, "less than or equal to the minimum of 0"),
        ({"source": "src", "keys": [{"id": 1}]}, "{'id': 1} is not of type 'integer', 'number', 'string', 'array'"),
        ({"source": "src", "key_from": {"id": 1}}, "is not of type 'null', 'integer', 'number', 'string', 'array'"),
        # an integer past 64 bits passed the form, and then no task could start: Airflow's worker
        # could not encode the run's conf (msgpack OverflowError in the scheduler's log, none in the task's)
        ({"source": "src", "tables": ["shop.t"], "keys": [2**64]}, f"{2**64} is greater than the maximum of"),
        ({"source": "src", "tables": ["shop.t"], "keys": [[1, -(2**63) - 1]]}, "is less than the minimum of"),
        ({"source": "src", "tables": ["shop.t"], "key_to": 10**20}, f"{10**20} is greater than the maximum of"),
        ({"source": "elsewhere"}, "'elsewhere' is not one of ['nightly', 'src']"),
        ({"tables": []}, "param source: No value passed"),
    ]:
        with pytest.raises(ParamValidationError) as info:
            load_dag("logtide_dump").test(run_conf=conf)
        assert message in str(info.value), (conf, str(info.value))


def test_unknown_table_fails_the_plan_and_writes_nothing(airflow_ready, mariadb, database, make_capture):
    from logtide_airflow.operators import dump_id_for_run

    mariadb.execute("CREATE TABLE present (id INT PRIMARY KEY)", database=database)
    capture = make_capture([f"{database}.*"])
    set_variable("logtide_config_path", str(capture.config_path))
    cases = [
        ({"tables": [f"{database}.present", f"{database}.missing"]}, f"table {database}.missing does not exist"),
        ({"tables": [f"{database}.present"], "keys": [[1, 2]]}, "has 2 value(s)"),
        ({"tables": [f"{database}.present"], "keys": ["one"]}, "key value 'one' for column 'id' is not an integer"),
        ({"tables": [], "keys": [1]}, "primary keys or a key range need exactly one table"),
        ({"tables": [f"{database}.present"], "key_from": 300, "key_to": 100}, "key_from 300 comes after key_to 100"),
    ]
    dump_ids = []
    for conf, message in cases:
        with recorded_events() as events:
            run = load_dag("logtide_dump").test(run_conf={"source": "src", **conf})
        dump_ids.append(dump_id_for_run(run.run_id))
        states = task_states("logtide_dump", run.run_id)
        assert run.state == "failed"
        assert states[("plan_src", -1)] == "failed" and states[("summary", -1)] == "upstream_failed", states
        assert states[("dump_src", -1)] == "upstream_failed"
        refusals = events.named("dump.refused")
        assert len(refusals) == 1 and message in refusals[0]["error"], refusals
        assert not (capture.zone.root / "dumps").exists()
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'logtide'")
        if cur.fetchone()[0]:
            cur.execute("SELECT dump_id FROM logtide.watermarks")
            assert not {row[0] for row in cur.fetchall()} & set(dump_ids)


def test_an_unknown_conf_key_fails_the_run_at_once_naming_it(airflow_ready, mariadb, database, make_capture):
    mariadb.execute("CREATE TABLE present (id INT PRIMARY KEY)", database=database)
    capture = make_capture([f"{database}.*"])
    set_variable("logtide_config_path", str(capture.config_path))
    with recorded_events() as events:  # a typo of chunk_size: ignored until now, a full dump ran at the default
        run = load_dag("logtide_dump").test(
            run_conf={"source": "src", "tables": [f"{database}.present"], "chunksize": 5}
        )
    states = task_states("logtide_dump", run.run_id)
    assert run.state == "failed"
    assert states[("plan_src", -1)] == states[("plan_nightly", -1)] == "failed", states
    assert states[("dump_src", -1)] == states[("summary", -1)] == "upstream_failed"
    [refusal] = events.named("airflow.conf_refused")[:1]
    assert refusal["unknown"] == "chunksize" and "chunk_size" in refusal["known"].split(",")
    message = "unknown param(s) in the run's conf: chunksize; the params of logtide_dump are source, tables, keys"
    assert refusal["error"].startswith(message)
    assert not (capture.zone.root / "dumps").exists() and not (capture.zone.root / "chunks").exists()


def test_a_dump_of_every_table_skips_a_keyless_one_and_dumps_the_rest(airflow_ready, mariadb, database, make_capture):
    mariadb.execute(
        "CREATE TABLE present (id INT PRIMARY KEY)",
        "INSERT INTO present VALUES (1), (2)",
        "CREATE TABLE keyless (a INT, b INT)",
        database=database,
    )
    capture = make_capture([f"{database}.*"])
    set_variable("logtide_config_path", str(capture.config_path))
    with recorded_events() as events:
        run = load_dag("logtide_dump").test(run_conf={"source": "src", "tables": [], "merge": False})
    states = task_states("logtide_dump", run.run_id)
    assert run.state == "success", states
    skips = events.named("dump.table_skipped")  # once, by the plan
    assert [s["table"] for s in skips] == [f"{database}.keyless"] and "sources.src.keys" in skips[0]["fix"]
    summary = xcoms("logtide_dump", run.run_id)[("summary", -1, "return_value")]
    assert [t["table"] for t in summary["per_table"]] == [f"{database}.present"] and summary["rows"] == 2
    assert [s["table"] for s in summary["skipped"]] == [f"{database}.keyless"]


def test_pause_and_resume_through_the_control_variables(airflow_ready, mariadb, database, make_capture):
    mariadb.execute(
        "CREATE TABLE ledger (id INT PRIMARY KEY, v INT, note VARCHAR(20))",
        "INSERT INTO ledger SELECT seq, seq % 100, CONCAT('row', seq) FROM seq_1_to_300",
        database=database,
    )
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    set_variable("logtide_config_path", str(capture.config_path))
    set_variable("logtide_dump_control_src", json.dumps({"state": "paused"}))
    dag = load_dag("logtide_dump")
    seen: dict = {}

    def operate(events) -> None:
        """Runs beside dag.test(), which must have the main thread (tasks install signal handlers)."""
        try:
            wait_for(lambda: events.named("dump.paused"), 60, interval=0.1, what="the dump to pause")
            seen["dump_id"] = dump_id = events.named("dump.planned")[0]["dump_id"]
            time.sleep(1.5)
            seen["chunks_while_paused"] = (capture.zone.root / "chunks").exists()
            # a broken dump-level Variable is reported and ignored: still paused
            set_variable(f"logtide_dump_control_{dump_id}", "{not json")
            wait_for(lambda: events.named("dump.control_unreadable"), 30, interval=0.1, what="the report")
            seen["chunks_after_bad_variable"] = (capture.zone.root / "chunks").exists()
            # the dump's own Variable wins over the source's
            set_variable(f"logtide_dump_control_{dump_id}", json.dumps({"state": "running", "chunk_size": 50}))
        except BaseException as exc:
            seen["error"] = exc
            delete_variable("logtide_dump_control_src")  # let the dump finish rather than hang

    try:
        with recorded_events() as events:
            operator = threading.Thread(target=operate, args=(events,))
            operator.start()
            run = dag.test(
                run_conf={
                    "source": "src",
                    "tables": [f"{database}.ledger"],
                    "chunk_size": 25,
                    "delay_s": 0.01,
                    "merge": False,
                }
            )
            operator.join(30)
            assert events.named("dump.resumed")
    finally:
        for key in ("logtide_dump_control_src", f"logtide_dump_control_{seen.get('dump_id')}"):
            delete_variable(key)
    assert "error" not in seen, seen["error"]
    assert seen["chunks_while_paused"] is False and seen["chunks_after_bad_variable"] is False
    assert run.state == "success", task_states("logtide_dump", run.run_id)
    summary = xcoms("logtide_dump", run.run_id)[("summary", -1, "return_value")]
    assert summary["dump_id"] == seen["dump_id"] and summary["rows"] == 300
    assert summary["chunks"] == 7  # 300 rows at 50 a chunk, and the empty chunk that finds the end
    wait_until_landed(mariadb, capture)
    state, _ = reconciled_state(capture, database, "ledger")
    assert state == table_state(mariadb, database, "ledger")


def test_cancel_through_the_control_variable_stops_the_dump(airflow_ready, mariadb, database, make_capture):
    populate(mariadb, database, 3000)
    capture = make_capture([f"{database}.*"])
    set_variable("logtide_config_path", str(capture.config_path))
    seen: dict = {}

    def operate(events) -> None:
        """Beside dag.test(): cancels the dump once it has written a few chunks."""
        try:
            wait_for(lambda: len(events.named("dump.chunk")) >= 3, 60, interval=0.05, what="3 chunks")
            set_variable("logtide_dump_control_src", json.dumps({"state": "cancelled"}))
        except BaseException as exc:
            seen["error"] = exc

    try:
        with recorded_events() as events:
            operator = threading.Thread(target=operate, args=(events,))
            operator.start()
            run = load_dag("logtide_dump").test(
                run_conf={
                    "source": "src",
                    "tables": [f"{database}.ledger"],
                    "chunk_size": 10,
                    "delay_s": 0.02,
                    "merge": False,
                }
            )
            operator.join(30)
    finally:
        delete_variable("logtide_dump_control_src")
    assert "error" not in seen, seen["error"]
    states = task_states("logtide_dump", run.run_id)
    assert run.state == "failed" and states[("dump_src", 0)] == "failed", states
    from logtide_airflow.operators import dump_id_for_run

    record = read_record(dump_dir(capture.zone, dump_id_for_run(run.run_id)) / RECORD)
    assert record is not None and record["state"] == "cancelled" and "was cancelled" in record["error"]
    chunks = events.named("dump.chunk")  # 300 chunks of 10 rows had it run to the end
    assert 3 <= len(chunks) < 100 and not events.named("dump.table_finished")


def test_connection_overrides_the_config_and_its_password_is_never_logged(
    airflow_ready, mariadb, database, make_capture, tmp_path
):
    from airflow.models import Connection
    from airflow.utils.session import create_session

    secret = "Pw-for-airflow-7781"
    mariadb.execute(
        "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(10))",
        "INSERT INTO items SELECT seq, CONCAT('i', seq) FROM seq_1_to_42",
        database=database,
    )
    mariadb.execute(
        "CREATE USER IF NOT EXISTS 'lt_airflow'@'127.0.0.1' IDENTIFIED BY '" + secret + "'",
        f"GRANT SELECT ON `{database}`.* TO 'lt_airflow'@'127.0.0.1'",
        "GRANT ALL ON logtide.* TO 'lt_airflow'@'127.0.0.1'",
    )
    capture = make_capture([f"{database}.*"])
    # the file points nowhere useful and its password variable is unset: the connection supplies them
    broken = yaml.safe_load(capture.config_path.read_text())
    broken["sources"]["src"].update(host="192.0.2.1", port=1, user="nobody", password="${LOGTIDE_UNSET_PASSWORD}")
    config = tmp_path / "airflow-logtide.yaml"
    config.write_text(yaml.safe_dump(broken))
    set_variable("logtide_config_path", str(config))
    with create_session() as session:
        session.add(
            Connection(
                conn_id="logtide_src",
                conn_type="mysql",
                host="127.0.0.1",
                port=mariadb.port,
                login="lt_airflow",
                password=secret,
            )
        )
    try:
        with recorded_events("capture", "logtide_airflow", "") as events:  # "": every record of the process
            run = load_dag("logtide_dump").test(
                run_conf={"source": "src", "tables": [f"{database}.items"], "merge": False}
            )
    finally:
        with create_session() as session:
            session.query(Connection).filter_by(conn_id="logtide_src").delete()
    assert run.state == "success", task_states("logtide_dump", run.run_id)
    assert xcoms("logtide_dump", run.run_id)[("summary", -1, "return_value")]["rows"] == 42
    used = events.named("airflow.source_config")
    assert used and all(e["from_connection"] == "host,port,user,password" for e in used)
    assert used[0]["user"] == "lt_airflow" and used[0]["port"] == mariadb.port
    assert secret not in events.text()


def test_string_keys_that_look_like_numbers_stay_strings(airflow_ready, mariadb, database, make_capture):
    """Params reach the dump as JSON gave them: "100" is a string key, not the number 100."""
    mariadb.execute(
        "CREATE TABLE codes (code VARCHAR(10) PRIMARY KEY, v INT)",
        "INSERT INTO codes VALUES ('100', 1), ('150', 2), ('200', 3), ('2000', 4), ('abc', 5)",
        database=database,
    )
    capture = make_capture([f"{database}.*"])
    set_variable("logtide_config_path", str(capture.config_path))
    table = f"{database}.codes"
    # a fresh DAG object for each dag.test(): it keeps the previous run's conf in its params
    ranged = load_dag("logtide_dump").test(
        run_conf={"source": "src", "tables": [table], "key_from": "100", "key_to": "200", "merge": False}
    )
    listed = load_dag("logtide_dump").test(
        run_conf={"source": "src", "tables": [table], "keys": ["150", "2000", "999"], "chunk_size": 2, "merge": False}
    )
    for run in (ranged, listed):
        assert run.state == "success", task_states("logtide_dump", run.run_id)
    assert xcoms("logtide_dump", ranged.run_id)[("summary", -1, "return_value")]["rows"] == 3
    summary = xcoms("logtide_dump", listed.run_id)[("summary", -1, "return_value")]
    assert (summary["rows"], summary["missing_keys"], summary["chunks"]) == (2, 1, 2)


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
    pg.wait_until_landed(postgres, database, capture)
    dumped = {(r["region"], r["n"]) for p in chunk_files(capture.zone, "public", "lines") for r in _rows(p)}
    assert dumped == {("eu", 3), ("eu", 4), ("eu", 5), ("EU", 1), ("EU", 2), ("us", 1), ("EU", 5)}


def _rows(path) -> list[dict]:
    return pq.read_table(path).column("after").to_pylist()
