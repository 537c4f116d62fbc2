"""Repair deletes and key order (issue 10, part 1): a dump deletes from the target only keys the
database proves gone. Under a collation whose order is not Spark's (MariaDB utf8mb4_general_ci,
PostgreSQL ICU collations, deterministic or not) a key-range dump must not delete the target's
rows outside the database's range that Spark's order puts inside it; under a byte-order NO PAD
collation it still deletes what the source does not hold. Key-list dumps compare by equality,
which the database decides: asking 'C' where the source holds 'c' removes a stray target 'C',
and asking 'b' where it holds 'B' keeps the target's 'B'. A completed full dump deletes the keys
none of its chunks returned, under any collation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from capture.dump.control import DumpSettings
from capture.dump.engine import DumpRequest
from capture.landing.chunks import read_chunk_meta
from capture.landing.reader import Watermarks, chunk_files
from capture.landing.zone import table_folder
from capture.merge import table as merge_table
from capture.merge.app import run_merge
from tests.integration.dumping import run_dump, wait_until_landed
from tests.integration.postgres import dumping as pg
from tests.integration.postgres.conftest import make_pg_capture, pg_database  # noqa: F401 - fixtures
from tests.integration.test_hostile_tables import _set_text
from tests.spark.merging import iceberg_state
from tests.spark.test_merge import _dump

pytestmark = pytest.mark.spark

ROWS = {"a": 1, "B": 2, "c": 3}


def _keys_and_values(spark, target: str) -> dict[str, int]:
    return {k[0]: row["v"] for k, row in iceberg_state(spark, target, ("k",)).items()}


def _repair_scenario(
    spark, config, capture, schema: str, exact: dict[str, bool], wait: Callable[[], None], case_insensitive: str
) -> None:
    """Tables keyed by `k` (one per collation, `exact`: whether its order is Spark's) hold a, B, c.
    A full dump, a merge; then a row 'bb' the source never had is put into every target (a delete
    the capture missed) and each table gets a key-range dump from "B" to "c": where the order is
    exact the merge deletes 'bb' and nothing else, elsewhere it deletes nothing. The
    case-insensitive table also gets a stray 'C' and a key-list dump of 'b' and 'C'. Then a full
    dump, merged over two runs, deletes 'bb' everywhere."""
    names = [f"{schema}.{t}" for t in exact]
    _dump(capture, DumpRequest(tables=names, settings=DumpSettings(chunk_size=2)))
    wait()
    run_merge(spark, config, "src")
    targets = {t: f"`{config.merge.catalog_name}`.`{config.merge.namespace}`.`{schema}__{t}`" for t in exact}
    for t, target in targets.items():
        assert _keys_and_values(spark, target) == ROWS, t
        spark.sql(f"INSERT INTO {target} VALUES ('bb', 0, 0, current_timestamp())")
    spark.sql(f"INSERT INTO {targets[case_insensitive]} VALUES ('C', 0, 0, current_timestamp())")

    for name in names:
        _dump(capture, DumpRequest(tables=[name], key_from="B", key_to="c", settings=DumpSettings(chunk_size=2)))
    _dump(capture, DumpRequest(tables=[f"{schema}.{case_insensitive}"], keys=["b", "C"]))
    wait()
    reports = {r["table"]: r for r in run_merge(spark, config, "src")["tables"]}

    for t, target in targets.items():
        metas = [read_chunk_meta(p) for p in chunk_files(capture.zone, schema, t)]
        assert {m.exact_order for m in metas if m.keys is None} == {exact[t]}, t
        got = _keys_and_values(spark, target)
        if exact[t]:
            assert got == ROWS, t
            assert reports[f"{schema}.{t}"]["repair_deletes"] == 1, t
        else:  # the row the source never had stays: Spark's order cannot place it (README, Merge)
            assert got == {**ROWS, "bb": 0}, t
            assert reports[f"{schema}.{t}"]["repair_deletes"] == (t == case_insensitive), t

    # A full dump covers every key in the database's own order: once all its chunks are merged, the
    # rows it did not return go, under any collation. The case-insensitive table's first chunk is
    # merged by a run of its own (as of that chunk's HIGH), the rest by the next run.
    _dump(capture, DumpRequest(dump_id="again", tables=names, settings=DumpSettings(chunk_size=2)))
    wait()
    folder = capture.zone.root / "chunks" / "again" / table_folder(schema, case_insensitive)
    first = read_chunk_meta(folder / "00000001.parquet")
    high = Watermarks(capture.zone, capture.zone.checkpoint().frontier.encode()).find(first.high_id)
    assert high is not None
    (partial,) = run_merge(spark, config, "src", [f"{schema}.{case_insensitive}"], frontier=high.lsn + 1)["tables"]
    assert (partial["chunks"], partial["repair_deletes"]) == (1, 0)
    assert "bb" in _keys_and_values(spark, targets[case_insensitive])
    reports = {r["table"]: r for r in run_merge(spark, config, "src")["tables"]}
    for t, target in targets.items():
        assert _keys_and_values(spark, target) == ROWS, t
        assert reports[f"{schema}.{t}"]["repair_deletes"] == (not exact[t]), t


def test_key_range_repairs_delete_only_under_an_exact_order_on_mariadb(
    mariadb, database, make_capture, merge_config, spark
):
    for table, collation in (("ci", "utf8mb4_general_ci"), ("bytes", "utf8mb4_nopad_bin")):
        mariadb.execute(
            f"CREATE TABLE {table} (k VARCHAR(10) COLLATE {collation} PRIMARY KEY, v INT)",
            f"INSERT INTO {table} VALUES ('a', 1), ('B', 2), ('c', 3)",
            database=database,
        )
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    config = merge_config(capture.config)
    _repair_scenario(
        spark,
        config,
        capture,
        database,
        {"ci": False, "bytes": True},
        lambda: wait_until_landed(mariadb, capture),
        "ci",
    )


def test_key_range_repairs_delete_only_under_an_exact_order_on_postgres(postgres, catalogs, spark, request):
    database = request.getfixturevalue("pg_database")  # fixtures imported from the PostgreSQL tests
    statements: list[Any] = ["CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)"]
    for table, collation in (("ci", "ci"), ("en", '"en-x-icu"'), ("bytes", '"C"')):
        statements += [
            f"CREATE TABLE {table} (k text COLLATE {collation} PRIMARY KEY, v int)",
            f"INSERT INTO {table} VALUES ('a', 1), ('B', 2), ('c', 3)",
        ]
    postgres.execute(*statements, database=database)
    capture = request.getfixturevalue("make_pg_capture")().start()
    capture.wait_running()
    merge = catalogs["hadoop"].model_copy(update={"namespace": database})
    config = capture.config.model_copy(update={"merge": merge})
    _repair_scenario(
        spark,
        config,
        capture,
        "public",
        {"ci": False, "en": False, "bytes": True},
        lambda: pg.wait_until_landed(postgres, database, capture),
        "ci",
    )


def test_mariadb_keys_equal_only_by_collation_or_spelling_land_distinct_on_the_fresh_one_chunk_path(
    mariadb, database, make_capture, merge_config, spark, monkeypatch
):
    """The merge's short path (`_load_fresh_chunk`) appends one chunk's rows as they are, so it needs
    every landed key once. MariaDB keys that read back alike, the ENUM error value and a real ''
    member, a SET's {b} and {'',b}, and keys under a PAD SPACE case-insensitive collation, land as
    distinct values: each table, dumped in one chunk into a fresh target, takes that path and the
    target equals the source row for row."""
    members = ("a", "", "b")
    mariadb.execute(
        "SET SESSION sql_mode = ''",
        "CREATE TABLE ez (e ENUM('z','') NOT NULL, i INT NOT NULL, v INT, PRIMARY KEY (e, i))",
        "INSERT INTO ez VALUES ('bogus', 1, 1), ('', 1, 2), ('z', 1, 3), ('bogus', 2, 4), ('', 2, 5)",
        "CREATE TABLE sz (s SET('a','','b') NOT NULL, v INT, PRIMARY KEY (s))",
        "INSERT INTO sz VALUES " + ", ".join(f"({n}, {n})" for n in range(8)),
        "CREATE TABLE ci (k VARCHAR(10) COLLATE utf8mb4_general_ci PRIMARY KEY, v INT)",
        "INSERT INTO ci VALUES ('a', 1), ('B ', 2), ('c', 3), ('\t', 4), ('', 5)",
        database=database,
    )
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    for name in ("ez", "sz", "ci"):
        assert run_dump(capture, f"{database}.{name}", 100)["tables"][0]["chunks"] == 1
    wait_until_landed(mariadb, capture)
    capture.stop()
    short: list[str] = []
    load = merge_table.TableMerge._load_fresh_chunk
    monkeypatch.setattr(
        merge_table.TableMerge, "_load_fresh_chunk", lambda self, *a: short.append(self.name) or load(self, *a)
    )
    run_merge(spark, merge_config(capture.config), "src")
    assert {f"{database}.{n}" for n in ("ez", "sz", "ci")} <= set(short)
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.execute("SELECT IF(e = 0, ' ', e), i, v FROM ez")
        ez = sorted(cur.fetchall())
        cur.execute("SELECT s + 0, v FROM sz")
        sz = sorted((_set_text(n, members), v) for n, v in cur.fetchall())
        cur.execute("SELECT k, v FROM ci")
        ci = sorted(cur.fetchall())
    assert len(ez) == 5 and len(sz) == 8 and len(ci) == 5

    def target(name: str, *columns: str) -> list[tuple]:
        return sorted(
            tuple(r) for r in spark.table(f"logtide.{database}.{database}__{name}").select(*columns).collect()
        )

    assert target("ez", "e", "i", "v") == ez
    assert target("sz", "s", "v") == sz
    assert target("ci", "k", "v") == ci


SOURCE_KEYS = {"Kiwi": 1, "Fig": 2, "Mango": 3}


def _key_list_scenario(spark, config, capture, schema: str, strays: dict[str, list[str]], wait) -> None:
    """Tables keyed by `k` under a case-insensitive comparison hold Kiwi, Fig and Mango; a full dump
    lands them. Each target then gets stray rows the source does not hold under its own spelling
    (`strays`: 'Apple', which the source lost; 'KIWI' and 'fig', other spellings of keys the source
    holds). A key-list dump asking for 'apple', 'kiwi' and 'FIG' must delete every stray that equals an
    asked key under the source column's comparison and keep the source's own rows: target == source.
    On main the repair compared the asked spelling with the target's byte for byte: nothing went."""
    names = [f"{schema}.{t}" for t in strays]
    _dump(capture, DumpRequest(tables=names, settings=DumpSettings(chunk_size=2)))
    wait()
    run_merge(spark, config, "src")
    targets = {t: f"`{config.merge.catalog_name}`.`{config.merge.namespace}`.`{schema}__{t}`" for t in strays}
    for t, target in targets.items():
        assert _keys_and_values(spark, target) == SOURCE_KEYS, t
        for stray in strays[t]:
            spark.sql(f"INSERT INTO {target} VALUES ('{stray}', 0, 0, current_timestamp())")
    for name in names:
        _dump(capture, DumpRequest(tables=[name], keys=["apple", "kiwi", "FIG"]))
    wait()
    reports = {r["table"]: r for r in run_merge(spark, config, "src")["tables"]}
    for t, target in targets.items():
        assert _keys_and_values(spark, target) == SOURCE_KEYS, t
        assert reports[f"{schema}.{t}"]["repair_deletes"] == len(strays[t]), t


def test_key_list_repairs_delete_keys_equal_under_the_collation_on_mariadb(
    mariadb, database, make_capture, merge_config, spark
):
    strays = {"ci": ["Apple", "KIWI", "fig", "Kiwi  "], "uni": ["APPLE", "kIwI"], "bytes": ["apple"]}
    for table, collation in (("ci", "utf8mb4_general_ci"), ("uni", "utf8mb4_unicode_ci"), ("bytes", "utf8mb4_bin")):
        mariadb.execute(
            f"CREATE TABLE {table} (k VARCHAR(10) COLLATE {collation} PRIMARY KEY, v INT)",
            "INSERT INTO " + table + " VALUES ('Kiwi', 1), ('Fig', 2), ('Mango', 3)",
            database=database,
        )
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    config = merge_config(capture.config)
    _key_list_scenario(spark, config, capture, database, strays, lambda: wait_until_landed(mariadb, capture))


def test_key_list_repairs_delete_keys_equal_under_citext_on_postgres(postgres, catalogs, spark, request):
    database = request.getfixturevalue("pg_database")  # fixtures imported from the PostgreSQL tests
    postgres.execute(
        "CREATE EXTENSION IF NOT EXISTS citext",
        "CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)",
        "CREATE TABLE cit (k citext PRIMARY KEY, v int)",
        "CREATE TABLE ci (k text COLLATE ci PRIMARY KEY, v int)",
        'CREATE TABLE bytes (k text COLLATE "C" PRIMARY KEY, v int)',
        *(f"INSERT INTO {t} VALUES ('Kiwi', 1), ('Fig', 2), ('Mango', 3)" for t in ("cit", "ci", "bytes")),
        database=database,
    )
    capture = request.getfixturevalue("make_pg_capture")().start()
    capture.wait_running()
    merge = catalogs["hadoop"].model_copy(update={"namespace": database})
    config = capture.config.model_copy(update={"merge": merge})
    strays = {"cit": ["Apple", "KIWI", "fig"], "ci": ["APPLE", "kIwI"], "bytes": ["apple"]}
    _key_list_scenario(
        spark, config, capture, "public", strays, lambda: pg.wait_until_landed(postgres, database, capture)
    )
