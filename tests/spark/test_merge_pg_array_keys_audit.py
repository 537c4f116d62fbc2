"""The composite and odd array keys of tests/integration/postgres/test_pg_array_keys_audit.py through
the Spark merge: after a full dump in chunks of 2, captured updates and key-list dumps, and
captured deletes, each Iceberg target equals its source table row for row."""

from __future__ import annotations

import pytest

from capture.dump.control import DumpSettings
from capture.dump.engine import DumpRequest
from capture.merge.app import run_merge
from tests.integration.dumping import run_dump
from tests.integration.postgres.conftest import make_pg_capture, pg_database  # noqa: F401 - fixtures by name
from tests.integration.postgres.dumping import wait_until_landed
from tests.integration.postgres.test_pg_array_keys_audit import ASKED, TABLES, _canon, _lit

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1800)]


def _differences(spark, postgres, db: str, namespace: str) -> list[str]:
    failed = []
    for name, (_, _, select) in TABLES.items():
        key = ["k", "j"] if "j" in select else ["k"]
        query = postgres.query(f"SELECT v, {select} FROM {name}", database=db)
        want = sorted((tuple(_canon(x) for x in r) for r in query), key=repr)
        rows = spark.table(f"logtide.{namespace}.public__{name}").select("v", *key).collect()
        target = sorted((tuple(_canon(x) for x in r) for r in rows), key=repr)
        if target != want:
            failed.append(f"{name} target: {target} != source {want}")
    return failed


def test_composite_and_odd_array_keys_merge_equal_to_the_source(postgres, request, spark, catalogs):
    db, make = request.getfixturevalue("pg_database"), request.getfixturevalue("make_pg_capture")
    statements = ["CREATE EXTENSION IF NOT EXISTS citext"]
    for name, (ddl, keys, _) in TABLES.items():
        statements.append(f"CREATE TABLE {name} ({ddl})")
        rows = ", ".join("(" + ", ".join([*(_lit(p) for p in k), str(v)]) + ")" for v, k in enumerate(keys, 1))
        statements.append(f"INSERT INTO {name} VALUES {rows}")
    postgres.execute(*statements, database=db)
    capture = make().start()
    capture.wait_running()
    namespace = f"akeys_{db}"
    config = capture.config.model_copy(update={"merge": catalogs["hadoop"].model_copy(update={"namespace": namespace})})
    for name in TABLES:
        run_dump(capture, f"public.{name}", chunk_size=2)
    wait_until_landed(postgres, db, capture)
    run_merge(spark, config, "src")
    assert not (failed := _differences(spark, postgres, db, namespace)), "\n".join(failed)

    postgres.execute(*(f"UPDATE {name} SET v = v + 100" for name in TABLES), database=db)
    for name in TABLES:
        run_dump(capture, DumpRequest(tables=[f"public.{name}"], keys=ASKED[name], settings=DumpSettings(chunk_size=2)))
    wait_until_landed(postgres, db, capture)
    run_merge(spark, config, "src")
    assert not (failed := _differences(spark, postgres, db, namespace)), "\n".join(failed)

    postgres.execute(*(f"DELETE FROM {name} WHERE v % 3 = 0" for name in TABLES), database=db)
    wait_until_landed(postgres, db, capture)
    run_merge(spark, config, "src")
    capture.stop()
    assert not (failed := _differences(spark, postgres, db, namespace)), "\n".join(failed)
