"""The Spark merge against a real MariaDB (the end-to-end test: and PostgreSQL, through the adapters
in tests/spark/sources.py) with the capture service running: the Iceberg target equals the source
table and the plain-Python reconciliation, value for value."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import yaml

from capture.dump.control import DumpSettings, FileControl
from capture.dump.engine import DumpEngine, DumpRequest
from capture.merge.app import run_merge
from capture.sources import open_chunk_source
from tests.conftest import ROOT
from tests.integration.dumping import wait_until_landed
from tests.integration.postgres.conftest import make_pg_capture, pg_database  # noqa: F401 - fixtures for `source`
from tests.servers import wait_for
from tests.spark.merging import (
    LEDGER,
    LEDGER_ROWS,
    PausedDump,
    changelog_replay,
    differences,
    iceberg_state,
    reference_state,
    snapshot_count,
    source_state,
    target_types,
    typed,
)
from tests.spark.sources import Source, open_source

pytestmark = pytest.mark.spark


def _dump(capture, request: DumpRequest, control: FileControl | None = None) -> dict:
    source = open_chunk_source("src", capture.config.source("src"))
    try:
        return DumpEngine(source, capture.zone, control).run(request)
    finally:
        source.close()


def _target(config, database: str, table: str, suffix: str = "") -> str:
    return f"`{config.merge.catalog_name}`.`{database}`.`{database}__{table}{suffix}`"


def _assert_equal(spark, capture, mariadb, config, database: str, table: str = "ledger") -> dict:
    target = iceberg_state(spark, _target(config, database, table))
    source = source_state(mariadb, database, table)
    assert typed(target) == typed(source)
    assert typed(target) == typed(reference_state(capture.zone, database, table))
    return target


@pytest.fixture
def source(request: pytest.FixtureRequest) -> Source:
    return open_source(request, request.param)


@pytest.mark.parametrize(
    ("source", "seed"),
    [("mariadb", 1), ("mariadb_readonly", 2), ("postgres", 1), ("postgres", 2), ("postgres_readonly", 1)],
    indirect=["source"],
)
def test_merges_during_a_dump_under_concurrent_writes_equal_the_source(source, catalogs, spark, seed):
    """The real capture, a random workload on every table during a full dump with small chunks and
    between merges (two in the middle of the dump, one after): each Iceberg table equals its source
    table, the plain-Python reconciliation and its changelog's replay, value for value and type for type."""
    source.create()  # history only the dump has
    capture = source.capture(flush_interval_s=0.5).start()
    capture.wait_running()
    config = source.merge_config(capture.config, catalogs["hadoop"], f"e2e_{source.kind}_{seed}")
    tables = [f"{source.schema}.{t.name}" for t in source.tables]
    workloads = [source.workload(t, 100_000, seed + 1000 * i) for i, t in enumerate(source.tables)]
    finished: list = []
    for w in workloads:
        w.start()
    reports = []
    try:
        with PausedDump(capture, "e2e", tables) as dump:  # resumed and joined before the workloads stop
            # merges in the middle of the first table's dump (paused after `done` chunks): of that table, then
            # of all (the others' log so far); the workload writes while the dump runs and rests while Spark
            # works (it only makes the dump chase a longer table)
            for done in source.pauses:
                dump.pause_after(done)
                for w in workloads:
                    w.stop()
                finished += workloads
                source.wait_until_landed(capture)
                merged = tables[:1] if done == source.pauses[0] else tables
                reports.append({r["table"]: r for r in run_merge(spark, config, "src", merged)["tables"]})
                workloads = [
                    source.workload(t, w.next_id, seed * 10 + done + 1000 * i)
                    for i, (t, w) in enumerate(zip(source.tables, workloads, strict=True))
                ]
                for w in workloads:
                    w.start()
                dump.resume()
    finally:
        for w in workloads:
            w.stop()
    result = dump.result
    finished += workloads
    source.wait_until_landed(capture)
    reports.append({r["table"]: r for r in run_merge(spark, config, "src", tables)["tables"]})

    dumped = {t["table"]: t["chunks"] for t in result["tables"]}
    first = [r[tables[0]] for r in reports]
    early, late = source.pauses
    assert early <= first[0]["chunks"] < late <= first[0]["chunks"] + first[1]["chunks"] < dumped[tables[0]]
    assert all(r["log_events"] > 0 for r in first)
    assert {t: sum(r[t].get("chunks", 0) for r in reports if t in r) for t in tables} == dumped
    assert all(w.transactions > 0 for w in finished) and sum(w.transactions for w in finished) > 50
    source.check_log(capture)
    for table in source.tables:
        target = _target_of(config, source.schema, table.name)
        state = iceberg_state(spark, target, table.key)
        want = typed(source.state(table))
        assert typed(state) == want, f"{table.name}:\n{differences(typed(state), want)}"
        reference = typed(reference_state(capture.zone, source.schema, table.name, table.key))
        assert typed(state) == reference, f"{table.name}:\n{differences(typed(state), reference)}"
        assert target_types(spark, target) == {**table.types, "_lsn": "decimal(38,0)", "_applied_at": "timestamp"}
        replay = changelog_replay(spark, _target_of(config, source.schema, table.name, "__changelog"), table.key)
        assert typed(replay) == typed(state), table.name


def _target_of(config, schema: str, table: str, suffix: str = "") -> str:
    return f"`{config.merge.catalog_name}`.`{config.merge.namespace}`.`{schema}__{table}{suffix}`"


PAIRS = (
    "CREATE TABLE pairs (a VARBINARY(4), b INT, v INT, PRIMARY KEY (a, b))",
    "INSERT INTO pairs SELECT UNHEX(LPAD(HEX(seq % 7), 2, '0')), seq, seq * 10 FROM seq_1_to_60",
    "INSERT INTO pairs VALUES (X'', 1, 1), (X'FF00', 2, 2), (X'0000', 3, 3)",
)


def _clone(spark, table: str, key: int, new_key: int, lsn: str = "_lsn") -> None:
    """Copy a target row under another key, behind the pipeline's back."""
    columns = spark.table(table).columns
    exprs = [f"{new_key} AS id" if c == "id" else f"CAST({lsn} AS DECIMAL(38,0)) AS _lsn" if c == "_lsn" else c
             for c in columns]  # fmt: skip
    spark.sql(f"INSERT INTO {table} SELECT {', '.join(exprs)} FROM {table} WHERE id = {key}")


@pytest.mark.parametrize("watermarks", ["table", "readonly"])
def test_a_dump_repairs_a_target_damaged_behind_the_pipelines_back(
    mariadb, database, make_capture, merge_config, spark, watermarks
):
    mariadb.execute(LEDGER, LEDGER_ROWS.format(rows=300), "DELETE FROM ledger WHERE id % 10 = 0", database=database)
    mariadb.execute(*PAIRS, database=database)
    capture = make_capture([f"{database}.*"], landing={"flush_interval_s": 0.5}, watermarks=watermarks).start()
    capture.wait_running()
    config = merge_config(capture.config)
    tables = [f"{database}.ledger", f"{database}.pairs"]
    settings = DumpSettings(chunk_size=25)
    _dump(capture, DumpRequest(tables=tables, settings=settings))
    wait_until_landed(mariadb, capture)
    run_merge(spark, config, "src")
    _assert_equal(spark, capture, mariadb, config, database)
    ledger, pairs = _target(config, database, "ledger"), _target(config, database, "pairs")
    key = ("a", "b")
    assert typed(iceberg_state(spark, pairs, key)) == typed(source_state(mariadb, database, "pairs", key))

    spark.sql(f"DELETE FROM {ledger} WHERE id % 7 = 0")
    spark.sql(f"UPDATE {ledger} SET v = -1, note = 'damaged', tz = NULL WHERE id % 11 = 0")
    _clone(spark, ledger, 1, 10, "0")  # a key the source does not have, inside a chunk's range
    _clone(spark, ledger, 2, 20, "NULL")
    _clone(spark, ledger, 3, 5000)  # past the last key: the last chunk's range is open
    spark.sql(f"DELETE FROM {pairs} WHERE b = 5")
    spark.sql(f"UPDATE {pairs} SET v = -1 WHERE b = 6")
    spark.sql(f"INSERT INTO {pairs} VALUES (X'00', 999, 0, 0, current_timestamp()), (X'FFFF', 1, 0, 0, NULL)")
    mariadb.execute(
        "UPDATE ledger SET v = v + 1000 WHERE id < 50", "DELETE FROM ledger WHERE id = 51", database=database
    )
    wait_until_landed(mariadb, capture)
    run_merge(spark, config, "src")  # the log alone does not repair
    assert iceberg_state(spark, ledger) != source_state(mariadb, database, "ledger")

    _dump(capture, DumpRequest(tables=tables, settings=settings))
    wait_until_landed(mariadb, capture)
    reports = run_merge(spark, config, "src")["tables"]
    assert [r["repair_deletes"] > 0 for r in reports] == [True, True]
    _assert_equal(spark, capture, mariadb, config, database)
    assert typed(iceberg_state(spark, pairs, key)) == typed(source_state(mariadb, database, "pairs", key))

    _clone(spark, ledger, 4, 30)  # key-list dump: exactly the keys asked
    spark.sql(f"DELETE FROM {ledger} WHERE id = 5")
    _dump(capture, DumpRequest(tables=[f"{database}.ledger"], keys=[30, 5, 7777], settings=settings))
    _clone(spark, ledger, 6, 40)  # key-range dump [35, 45]
    spark.sql(f"UPDATE {ledger} SET note = 'x' WHERE id = 41")
    _clone(spark, ledger, 7, 70)  # outside the range: stays until a dump covers it
    _dump(capture, DumpRequest(tables=[f"{database}.ledger"], key_from=35, key_to=45, settings=settings))
    wait_until_landed(mariadb, capture)
    run_merge(spark, config, "src", [f"{database}.ledger"])
    target = iceberg_state(spark, ledger)
    assert 70 in {k[0] for k in target}
    spark.sql(f"DELETE FROM {ledger} WHERE id = 70")
    _assert_equal(spark, capture, mariadb, config, database)
    assert typed(changelog_replay(spark, _target(config, database, "ledger", "__changelog"))) == typed(
        source_state(mariadb, database, "ledger")
    )

    snapshots = snapshot_count(spark, ledger), snapshot_count(spark, pairs)
    again = run_merge(spark, config, "src")["tables"]
    assert {r.get("skipped") for r in again} <= {"up to date", "nothing new"}
    assert (snapshot_count(spark, ledger), snapshot_count(spark, pairs)) == snapshots


def test_merging_twice_applies_nothing_the_second_time_on_a_jdbc_catalog(
    mariadb, database, make_capture, merge_config, spark
):
    mariadb.execute("CREATE TABLE kv (k VARCHAR(20) COLLATE utf8mb4_bin PRIMARY KEY, v BIGINT)", database=database)
    mariadb.execute("INSERT INTO kv SELECT CONCAT('k', seq), seq FROM seq_1_to_50", database=database)
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    config = merge_config(capture.config, "jdbc")
    _dump(capture, DumpRequest(tables=[f"{database}.kv"], settings=DumpSettings(chunk_size=8)))
    mariadb.execute("UPDATE kv SET v = -v WHERE v < 10", "DELETE FROM kv WHERE v = 20", database=database)
    wait_until_landed(mariadb, capture)
    first = run_merge(spark, config, "src")["tables"][0]
    target = _target(config, database, "kv")
    key = ("k",)
    assert typed(iceberg_state(spark, target, key)) == typed(source_state(mariadb, database, "kv", key))
    snapshots = snapshot_count(spark, target)
    second = run_merge(spark, config, "src")["tables"][0]
    assert second["skipped"] in ("up to date", "nothing new") and snapshot_count(spark, target) == snapshots

    mariadb.execute("INSERT INTO kv VALUES ('new', 1)", "UPDATE kv SET v = 0 WHERE k = 'k30'", database=database)
    wait_until_landed(mariadb, capture)
    third = run_merge(spark, config, "src")["tables"][0]
    assert third["log_events"] == 2 and third["applied_before"] == first["frontier"]
    assert snapshot_count(spark, target) == snapshots + 1
    assert typed(iceberg_state(spark, target, key)) == typed(source_state(mariadb, database, "kv", key))
    assert typed(changelog_replay(spark, _target(config, database, "kv", "__changelog"), key)) == typed(
        source_state(mariadb, database, "kv", key)
    )


def test_new_source_columns_are_added_and_dropped_ones_stay(mariadb, database, make_capture, merge_config, spark):
    mariadb.execute(
        "CREATE TABLE evolving (id INT PRIMARY KEY, v INT, gone VARCHAR(10))",
        "INSERT INTO evolving SELECT seq, seq, CONCAT('g', seq) FROM seq_1_to_20",
        database=database,
    )
    capture = make_capture([f"{database}.*"], column_rewrites="accept").start()  # ADD COLUMN ... DEFAULT 2.5
    capture.wait_running()
    config = merge_config(capture.config)
    _dump(capture, DumpRequest(tables=[f"{database}.evolving"], settings=DumpSettings(chunk_size=6)))
    wait_until_landed(mariadb, capture)
    run_merge(spark, config, "src")
    target = _target(config, database, "evolving")

    mariadb.execute(
        "ALTER TABLE evolving ADD COLUMN extra DECIMAL(8,2) DEFAULT 2.5",
        "UPDATE evolving SET v = v + 100 WHERE id <= 5",
        "INSERT INTO evolving (id, v, gone) VALUES (100, 1, 'new')",
        database=database,
    )
    wait_until_landed(mariadb, capture)
    run_merge(spark, config, "src")
    assert target_types(spark, target)["extra"] == "decimal(8,2)"
    state = iceberg_state(spark, target)
    assert {k[0] for k, r in state.items() if r["extra"] is not None} == {1, 2, 3, 4, 5, 100}
    assert state[(1,)]["v"] == 101 and state[(6,)]["extra"] is None  # untouched rows: a dump fills them

    mariadb.execute(
        "ALTER TABLE evolving DROP COLUMN gone", "UPDATE evolving SET v = 0 WHERE id = 2", database=database
    )
    wait_until_landed(mariadb, capture)
    run_merge(spark, config, "src")
    state = iceberg_state(spark, target)
    assert state[(2,)]["gone"] is None and state[(3,)]["gone"] == "g3"  # the column stays, null from then on

    _dump(capture, DumpRequest(tables=[f"{database}.evolving"], settings=DumpSettings(chunk_size=6)))
    wait_until_landed(mariadb, capture)
    run_merge(spark, config, "src")
    state = iceberg_state(spark, target)
    assert {k: {c: v for c, v in r.items() if c != "gone"} for k, r in state.items()} == source_state(
        mariadb, database, "evolving"
    )
    assert {r["gone"] for r in state.values()} == {None}


def _merge_cli(config_path, log_path) -> subprocess.Popen:
    """`logtide merge` (spark-submit) as an operator runs it, in its own process group."""
    cmd = [sys.executable, "-m", "capture.cli", "--config", str(config_path), "merge", "--source", "src"]
    with open(log_path, "ab") as log:  # spark-submit sends the driver's stdout and stderr to its stdout
        return subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def test_a_merge_killed_mid_run_and_rerun_gives_the_same_tables(
    mariadb, database, make_capture, merge_config, spark, tmp_path
):
    # audit has no key: every merge run skips it, names it once, and exits 0 for the rest
    mariadb.execute(
        LEDGER, LEDGER_ROWS.format(rows=400), *PAIRS, "CREATE TABLE audit (a INT, b INT)", database=database
    )
    capture = make_capture([f"{database}.*"], landing={"flush_interval_s": 0.5}).start()
    capture.wait_running()
    config = merge_config(capture.config)
    data = yaml.safe_load(capture.config_path.read_text())
    data["merge"] = {**config.merge.model_dump(mode="json", exclude={"jdbc_password"}), "spark_master": "local[1]"}
    config_path = tmp_path / "merge.yaml"
    config_path.write_text(yaml.safe_dump(data))
    tables = [f"{database}.ledger", f"{database}.pairs"]
    _dump(capture, DumpRequest(tables=tables, settings=DumpSettings(chunk_size=30)))
    mariadb.execute(
        "UPDATE ledger SET v = v + 1 WHERE id % 3 = 0",
        "DELETE FROM pairs WHERE b < 5",
        "INSERT INTO audit VALUES (1, 1)",
        database=database,
    )
    wait_until_landed(mariadb, capture)

    log_path = tmp_path / "merge.log"
    first = _merge_cli(config_path, log_path)
    try:
        # the first table's changelog is committed, its target MERGE (or the next table) is under way
        wait_for(lambda: "merge.changelog_committed" in log_path.read_text(), 120, what="a changelog commit")
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert "merge.finished" not in log_path.read_text()

    log_path.write_text("")
    second = _merge_cli(config_path, log_path)
    second.wait(timeout=300)
    output = log_path.read_text()
    assert second.returncode == 0, output[-3000:]
    summary = json.loads([line for line in output.splitlines() if line.startswith('{"source"')][-1])
    reports = {r["table"]: r for r in summary["tables"]}
    assert set(reports) == {*tables, f"{database}.audit"}
    assert [t["table"] for t in summary["skipped"]] == [f"{database}.audit"] and summary["failed"] == []
    assert output.count("merge.table_skipped") == 1
    _assert_equal(spark, capture, mariadb, config, database)
    pairs = _target(config, database, "pairs")
    assert typed(iceberg_state(spark, pairs, ("a", "b"))) == typed(source_state(mariadb, database, "pairs", ("a", "b")))
    for table, key in (("ledger", ("id",)), ("pairs", ("a", "b"))):
        changelog = _target(config, database, table, "__changelog")
        twice = spark.sql(
            f"SELECT _lsn, _order, {', '.join(key)} FROM {changelog} GROUP BY ALL HAVING count(*) > 1"
        ).count()
        assert twice == 0, f"{table}: events appended twice"
        # the report counts what the changelog holds, also for a table whose changelog the killed run committed
        report = reports[f"{database}.{table}"]
        counted = report["log_events"] + report["chunk_rows"] - report["dropped_by_window"] + report["repair_deletes"]
        assert counted == spark.table(changelog).count() > 0, report
        assert typed(changelog_replay(spark, changelog, key)) == typed(source_state(mariadb, database, table, key))
