"""Declarative partitioning on a real PostgreSQL 15. The publication does not publish via the
partition root, so a partition's changes and its TRUNCATE come under the partition's own name:
capture lands (and dumps) each partition as a table of its own, and a TRUNCATE of one partition
empties that partition's target only, never the others'. Before, dumps read the partitioned table
(landing its rows under the parent's name, which the log never changes) while its changes landed
under the partitions' names, which no dump filled, and including the parent alone captured none
of its changes."""

from __future__ import annotations

import signal

import pytest

from capture.dump.control import DumpSettings
from capture.dump.engine import DumpRequest
from capture.landing.reader import landed_truncates
from tests.integration.dumping import open_engine
from tests.integration.postgres.dumping import reconciled_state, table_state, wait_until_landed
from tests.servers import wait_for

pytestmark = pytest.mark.integration


def test_partitions_land_and_dump_as_themselves_and_truncate_one_partition(postgres, pg_database, make_pg_capture):
    postgres.execute(
        "CREATE TABLE m (id int PRIMARY KEY, v int) PARTITION BY RANGE (id)",
        "CREATE TABLE m1 PARTITION OF m FOR VALUES FROM (0) TO (100)",
        "CREATE TABLE m2 PARTITION OF m FOR VALUES FROM (100) TO (200)",
        "CREATE TABLE m3 PARTITION OF m FOR VALUES FROM (200) TO (300)",
        "INSERT INTO m SELECT i, i FROM generate_series(1, 250) i",  # before capture: only a dump has them
        database=pg_database,
    )
    # the partitioned table named alone: its partitions are captured, but for m3, which exclude names
    capture = make_pg_capture(["public.m", "public.lt_marker"], exclude=["public.m3"]).start()
    capture.wait_running()
    engine, source = open_engine(capture)
    try:
        assert source.tables() == [("public", "m1"), ("public", "m2")]
        summary = engine.run(DumpRequest(tables=[], settings=DumpSettings(chunk_size=40)))
    finally:
        source.close()
    assert [t["table"] for t in summary["tables"]] == ["public.m1", "public.m2"]
    postgres.execute(
        "INSERT INTO m VALUES (0, 0), (299, 299)",
        "UPDATE m SET v = -v WHERE id % 10 = 0",
        "DELETE FROM m WHERE id BETWEEN 140 AND 160",
        "TRUNCATE m1",  # one partition: m2 keeps its rows, in the source and in the target
        "INSERT INTO m VALUES (5, 5)",
        database=pg_database,
    )
    wait_until_landed(postgres, pg_database, capture)
    for table in ("m1", "m2"):
        state, _ = reconciled_state(capture, "public", table)
        assert state == table_state(postgres, pg_database, table), table
    assert len(table_state(postgres, pg_database, "m2")) == 79
    truncates = landed_truncates(capture.zone, capture.zone.checkpoint().frontier.encode())
    assert [(t.schema, t.table) for t in truncates] == [("public", "m1")]
    assert capture.zone.read_table("public", "m") is None and capture.zone.read_table("public", "m3") is None
    assert capture.stop(signal.SIGINT) == 0


def test_a_publication_publishing_via_the_partition_root_is_refused(postgres, pg_database, make_pg_capture):
    """With publish_via_partition_root, pgoutput sends no TRUNCATE of one partition at all, and the
    partitions' changes come under the partitioned table's name: refused, with the fix."""
    postgres.execute(
        "CREATE TABLE m (id int PRIMARY KEY, v int) PARTITION BY RANGE (id)",
        "CREATE TABLE m1 PARTITION OF m FOR VALUES FROM (0) TO (100)",
        "CREATE PUBLICATION logtide_src FOR TABLE m WITH (publish_via_partition_root = true)",
        database=pg_database,
    )
    capture = make_pg_capture(["public.*"])
    assert capture.run_to_exit() == 2
    assert "publish_via_partition_root = false" in capture.log()
    postgres.execute("ALTER PUBLICATION logtide_src SET (publish_via_partition_root = false)", database=pg_database)
    capture.start()
    capture.wait_running()
    assert capture.stop(signal.SIGINT) == 0


def test_attach_and_detach_move_no_rows_between_targets(postgres, pg_database, make_pg_capture):
    """A table keeps its name through ATTACH and DETACH PARTITION, and capture lands it under that
    name before and after: its target keeps equalling it."""
    postgres.execute(
        "CREATE TABLE m (id int PRIMARY KEY, v int) PARTITION BY RANGE (id)",
        "CREATE TABLE m1 PARTITION OF m FOR VALUES FROM (0) TO (100)",
        "CREATE TABLE x (id int PRIMARY KEY, v int)",
        "INSERT INTO m SELECT i, i FROM generate_series(1, 50) i",
        "INSERT INTO x SELECT i, i FROM generate_series(200, 220) i",
        database=pg_database,
    )
    capture = make_pg_capture(["public.*"]).start()
    capture.wait_running()
    engine, source = open_engine(capture)
    try:
        assert source.tables() == [("public", "m1"), ("public", "x")]
        engine.run(DumpRequest(tables=[], settings=DumpSettings(chunk_size=20)))
    finally:
        source.close()
    postgres.execute(
        "ALTER TABLE m ATTACH PARTITION x FOR VALUES FROM (200) TO (300)",  # x's rows join m: no row events
        "INSERT INTO m VALUES (250, 250), (60, 60)",
        "UPDATE m SET v = 0 WHERE id IN (201, 2)",
        "ALTER TABLE m DETACH PARTITION m1",
        database=pg_database,
    )

    def m1_published() -> bool:  # a standalone table again: the next publication sync lists it
        return bool(
            postgres.query(
                "SELECT 1 FROM pg_publication_rel r JOIN pg_class c ON c.oid = r.prrelid WHERE c.relname = 'm1'",
                database=pg_database,
            )
        )

    wait_for(m1_published, 30, what="m1 in the publication")
    postgres.execute("DELETE FROM m1 WHERE id = 3", "INSERT INTO m VALUES (230, 230)", database=pg_database)
    wait_until_landed(postgres, pg_database, capture)
    for table in ("m1", "x"):
        state, _ = reconciled_state(capture, "public", table)
        assert state == table_state(postgres, pg_database, table), table
    assert len(table_state(postgres, pg_database, "x")) == 23
    assert capture.zone.read_table("public", "m") is None
    assert capture.stop(signal.SIGINT) == 0
