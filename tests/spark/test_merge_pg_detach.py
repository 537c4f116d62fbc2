"""DETACH PARTITION during a dump with `watermarks: readonly`, through the Spark merge into Iceberg.

The publication is the administrator's and lists the partitioned table only; Logtide changes nothing.
The partition detached during its dump leaves the publication, so the writes that follow are in no log:
the table is named not converged (with the ALTER PUBLICATION that adds it). Once it is added and dumped
again, the merge's repair deletes the row deleted meanwhile, and the target equals the table."""

from __future__ import annotations

import time

import pytest

from capture.config import load_config
from capture.merge.app import run_merge
from capture.status import source_status
from tests.integration.dumping import AlterAt, run_dump
from tests.integration.postgres.conftest import make_pg_capture, pg_database  # noqa: F401 - fixtures by name
from tests.integration.postgres.dumping import change_and_land, dump_table, published_tables, table_state
from tests.integration.postgres.test_pg_detach import DETACH_AND_WRITE, PARTITIONED
from tests.servers import wait_for
from tests.spark.merging import differences, iceberg_state, plain

pytestmark = pytest.mark.spark


def test_a_partition_detached_during_its_readonly_dump_is_named_then_converges_once_published_and_dumped(
    postgres, request, spark, catalogs
):
    db, make = request.getfixturevalue("pg_database"), request.getfixturevalue("make_pg_capture")
    postgres.execute(*PARTITIONED, "CREATE PUBLICATION logtide_src FOR TABLE m", database=db)
    capture = make(watermarks="readonly").start()
    capture.wait_running()
    config = capture.config.model_copy(update={"merge": catalogs["hadoop"].model_copy(update={"namespace": db})})

    def not_converged() -> list[str]:
        return [t["table"] for t in source_status(load_config(capture.config_path), "src")["not_converged"]]

    dump_table(capture, "m2", chunk_size=20)
    run_dump(
        capture,
        "public.m1",
        chunk_size=20,
        wrap=lambda source: AlterAt(source, lambda _: postgres.execute(*DETACH_AND_WRITE, database=db)).at(
            3, "LOW", "detach"
        ),
    )
    wait_for(lambda: "public.m1" in not_converged(), 30, what="m1 named not converged")
    postgres.execute("ALTER PUBLICATION logtide_src ADD TABLE m1", database=db)
    wait_for(lambda: "public.m1" in published_tables(postgres, db), 30, what="m1 published")

    def seen_published() -> bool:  # capture's publication sync recorded m1 anew (a dump from now on converges it)
        entries = source_status(load_config(capture.config_path), "src")["not_converged"]
        return not any(t["table"] == "public.m1" and t.get("unpublished") for t in entries)

    wait_for(seen_published, 60, what="capture to find m1 published")
    time.sleep(1.1)  # a dump started in the second capture recorded m1 in does not count (unconverged.pending)
    dump_table(capture, "m1", chunk_size=20)
    change_and_land(postgres, db, capture, "UPDATE m1 SET v = -3 WHERE id = 7", "UPDATE m2 SET v = 0 WHERE id = 120")
    run_merge(spark, config, "src")
    for table in ("m1", "m2"):
        want = {k: {c: plain(v) for c, v in row.items()} for k, row in table_state(postgres, db, table).items()}
        assert differences(iceberg_state(spark, f"logtide.{db}.public__{table}"), want) == "", table
    assert "public.m1" not in not_converged()
    assert capture.stop() == 0
