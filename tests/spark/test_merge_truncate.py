"""TRUNCATE through the Spark merge, against the real capture on MariaDB (table and read-only
watermarks) and PostgreSQL: a table filled and merged, then dumped while a TRUNCATE and a refill
with overlapping keys land between a chunk's SELECT and its HIGH (its window straddles the
truncate), then changed again: the Iceberg target equals the source table, the plain-Python
reconciliation and its changelog's replay."""

from __future__ import annotations

import pytest

from capture.dump.control import DumpSettings
from capture.dump.engine import DumpEngine, DumpRequest
from capture.merge.app import run_merge
from capture.sources import open_chunk_source
from tests.integration.dumping import AlterAt
from tests.integration.postgres.conftest import make_pg_capture, pg_database  # noqa: F401 - fixtures for `source`
from tests.servers import wait_for
from tests.spark.merging import changelog_replay, differences, iceberg_state, reference_state, typed
from tests.spark.sources import Source, Table, open_source

pytestmark = pytest.mark.spark

TYPES = {"id": "int", "v": "int", "note": "string"}
DDL = {
    "mariadb": "CREATE TABLE tr (id INT PRIMARY KEY, v INT, note VARCHAR(20))",
    "postgres": "CREATE TABLE tr (id int PRIMARY KEY, v int, note text)",
}


def _insert(ids: range, v: int, note: str) -> str:
    return "INSERT INTO tr VALUES " + ", ".join(f"({i}, {i + v}, '{note}')" for i in ids)


@pytest.fixture
def source(request: pytest.FixtureRequest) -> Source:
    return open_source(request, request.param)


@pytest.mark.parametrize("source", ["mariadb", "mariadb_readonly", "postgres"], indirect=True)
def test_a_truncate_inside_a_chunk_window_converges(source, catalogs, spark):
    server, db = source.server, source.database
    server.execute(DDL["postgres" if source.kind == "postgres" else "mariadb"], database=db)
    capture = source.capture(flush_interval_s=0.3).start()
    capture.wait_running()
    config = source.merge_config(capture.config, catalogs["hadoop"], f"trunc_{source.kind}")
    name = f"{source.schema}.tr"
    server.execute(_insert(range(1, 101), 0, "first"), "UPDATE tr SET v = -v WHERE id <= 10", database=db)
    source.wait_until_landed(capture)
    first = run_merge(spark, config, "src", [name])["tables"][0]
    assert first["log_events"] == 110

    # chunks of 20 rows: chunk 2 reads ids 21..40, then TRUNCATE and a refill of ids 30..60 land
    # before its HIGH: chunk 1 is wholly before the truncate, chunk 2 straddles it, the rest follow it
    chunk_source = open_chunk_source("src", capture.config.source("src"))
    refill = ("TRUNCATE TABLE tr", _insert(range(30, 61), 1000, "refill"))
    alter = AlterAt(chunk_source, lambda sql: server.execute(*refill, database=db)).at(2, "HIGH", "truncate")
    try:
        request = DumpRequest(dump_id="tr", tables=[name], settings=DumpSettings(chunk_size=20))
        dumped = DumpEngine(alter, capture.zone).run(request)
    finally:
        chunk_source.close()
    assert dumped["tables"][0]["chunks"] >= 3
    server.execute(
        "UPDATE tr SET note = 'after' WHERE id BETWEEN 35 AND 45",
        "DELETE FROM tr WHERE id = 50",
        _insert(range(90, 96), 7, "late"),  # keys the target held before the truncate
        database=db,
    )
    source.wait_until_landed(capture)
    second = run_merge(spark, config, "src", [name])["tables"][0]

    table = Table("tr", ("id",), TYPES)
    target = f"`{config.merge.catalog_name}`.`{config.merge.namespace}`.`{source.schema}__tr`"
    state, want = typed(iceberg_state(spark, target)), typed(source.state(table))
    assert set(k[0] for k in want) == set(range(30, 61)) - {50} | set(range(90, 96))
    assert state == want, differences(state, want)
    reference = typed(reference_state(capture.zone, source.schema, "tr"))
    assert reference == want, differences(reference, want)
    assert typed(changelog_replay(spark, target[:-1] + "__changelog`")) == want
    assert second["truncates"] == 1 and second["chunks_truncated"] == 1  # chunk 2

    # a truncate alone since the last merge (no new event file): the target empties, once
    server.execute("TRUNCATE TABLE tr", database=db)
    source.wait_until_landed(capture)
    third = run_merge(spark, config, "src", [name])["tables"][0]
    assert third["truncates"] == 1 and iceberg_state(spark, target) == {} == source.state(table)
    assert changelog_replay(spark, target[:-1] + "__changelog`") == {}
    again = run_merge(spark, config, "src", [name])["tables"][0]
    assert again.get("skipped") in ("up to date", "nothing new"), again


@pytest.mark.parametrize("source", ["postgres"], indirect=True)
def test_a_merge_failing_between_its_truncate_delete_and_its_merge_converges_on_rerun(
    source, catalogs, spark, monkeypatch
):
    """A merge run whose truncate DELETE committed (the target emptied) and whose MERGE then failed,
    the source changed again (keys from before the truncate reinserted, updated, deleted; a second
    truncate inside a transaction with writes before and after it), and the merge run again: the
    target equals the source, and the changelog holds every event once."""
    from capture.merge import table as merge_table

    server, db = source.server, source.database
    server.execute(DDL["postgres"], database=db)
    capture = source.capture(flush_interval_s=0.3).start()
    capture.wait_running()
    config = source.merge_config(capture.config, catalogs["hadoop"], "trunc_crash")
    name = f"{source.schema}.tr"
    server.execute(_insert(range(1, 41), 0, "first"), database=db)
    source.wait_until_landed(capture)
    run_merge(spark, config, "src", [name])

    server.execute(
        "UPDATE tr SET v = -v WHERE id <= 5",
        "TRUNCATE TABLE tr",
        _insert(range(10, 21), 100, "refill"),
        "UPDATE tr SET note = 'changed' WHERE id = 12",
        database=db,
    )
    source.wait_until_landed(capture)
    real = merge_table.TableMerge._merge
    failed: list[int] = []

    def fail_once(self, stream, props):
        if not failed:
            failed.append(1)
            raise RuntimeError("killed between the truncate's DELETE and the MERGE")
        return real(self, stream, props)

    monkeypatch.setattr(merge_table.TableMerge, "_merge", fail_once)
    report = run_merge(spark, config, "src", [name])
    assert failed and "killed between" in report["failed"][0]["failed"], report
    target = f"`{config.merge.catalog_name}`.`{config.merge.namespace}`.`{source.schema}__tr`"
    assert iceberg_state(spark, target) == {}  # the DELETE committed

    server.execute(
        "BEGIN; INSERT INTO tr VALUES (30, 1, 'before'); UPDATE tr SET v = 7 WHERE id = 11; TRUNCATE tr;"
        " INSERT INTO tr VALUES (11, 2, 'after'), (2, 3, 'after'); UPDATE tr SET v = 9 WHERE id = 2; COMMIT",
        "INSERT INTO tr VALUES (3, 4, 'later')",
        "DELETE FROM tr WHERE id = 11",
        database=db,
    )
    source.wait_until_landed(capture)
    run_merge(spark, config, "src", [name])
    table = Table("tr", ("id",), TYPES)
    state, want = typed(iceberg_state(spark, target)), typed(source.state(table))
    assert set(k[0] for k in want) == {2, 3}
    assert state == want, differences(state, want)
    changelog = target[:-1] + "__changelog`"
    assert typed(changelog_replay(spark, changelog)) == want
    twice = spark.sql(f"SELECT _lsn, _order FROM {changelog} GROUP BY ALL HAVING count(*) > 1").count()
    assert twice == 0


@pytest.mark.parametrize("source", ["mariadb"], indirect=True)
def test_a_table_dropped_or_renamed_away_and_created_again_merges_to_its_new_rows(source, catalogs, spark):
    """On main (DROP TABLE and RENAME TABLE landed as DDL history only) the target kept ids 1..20 of
    the old table after `RENAME TABLE tr TO tr_old`, and the second table's after `DROP TABLE`."""
    server, db = source.server, source.database
    server.execute(DDL["mariadb"], database=db)
    # only tr: tr_old is left out (a rename into a captured name would stop capture, see test_table_moves.py)
    capture = source.make_capture([f"{db}.tr"], landing={"flush_interval_s": 0.3}).start()
    capture.wait_running()
    config = source.merge_config(capture.config, catalogs["hadoop"], "moved_mariadb")
    name = f"{source.schema}.tr"
    server.execute(_insert(range(1, 21), 0, "first"), database=db)
    source.wait_until_landed(capture)
    assert run_merge(spark, config, "src", [name])["tables"][0]["log_events"] == 20
    server.execute(
        "RENAME TABLE tr TO tr_old",
        "CREATE TABLE tr LIKE tr_old",
        _insert(range(15, 31), 100, "second"),
        database=db,
    )
    source.wait_until_landed(capture)
    run_merge(spark, config, "src", [name])
    server.execute("DROP TABLE tr", DDL["mariadb"], _insert(range(25, 36), 200, "third"), database=db)
    source.wait_until_landed(capture)
    run_merge(spark, config, "src", [name])

    table = Table("tr", ("id",), TYPES)
    target = f"`{config.merge.catalog_name}`.`{config.merge.namespace}`.`{source.schema}__tr`"
    state, want = typed(iceberg_state(spark, target)), typed(source.state(table))
    assert set(k[0] for k in want) == set(range(25, 36))
    assert state == want, differences(state, want)


@pytest.mark.parametrize("source", ["postgres"], indirect=True)
def test_a_postgres_table_dropped_and_created_again_merges_to_its_new_rows(source, catalogs, spark):
    """On main (pgoutput carries no DROP TABLE) the target kept ids 1..14 of the dropped table beside
    the new table's rows. Now the new relation's first change lands a truncate of the name first."""
    server, db = source.server, source.database
    server.execute(DDL["postgres"], database=db)
    capture = source.capture(flush_interval_s=0.3).start()
    capture.wait_running()
    config = source.merge_config(capture.config, catalogs["hadoop"], "replaced_pg")
    name = f"{source.schema}.tr"
    server.execute(_insert(range(1, 21), 0, "first"), database=db)
    source.wait_until_landed(capture)
    assert run_merge(spark, config, "src", [name])["tables"][0]["log_events"] == 20
    server.execute("DROP TABLE tr", DDL["postgres"], database=db)
    published = "SELECT 1 FROM pg_publication_tables WHERE pubname = 'logtide_src' AND tablename = 'tr'"
    wait_for(lambda: server.query(published, database=db), 30, what="the new tr published")
    server.execute(_insert(range(15, 31), 100, "second"), database=db)
    source.wait_until_landed(capture)
    second = run_merge(spark, config, "src", [name])["tables"][0]
    assert second["truncates"] == 1

    table = Table("tr", ("id",), TYPES)
    target = f"`{config.merge.catalog_name}`.`{config.merge.namespace}`.`{source.schema}__tr`"
    state, want = typed(iceberg_state(spark, target)), typed(source.state(table))
    assert set(k[0] for k in want) == set(range(15, 31))
    assert state == want, differences(state, want)
    assert capture.stop() == 0
