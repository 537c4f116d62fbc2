"""DETACH PARTITION of a table captured by its own name (`include: public.*`), and the table written to
at once, within capture's publication sync interval (about 2 s), with and without a dump of it running.

On main the publication listed the partitioned table only: the detached table was published by name at
the next sync, and an UPDATE made in between was decoded while it was in no publication, so it was not
in the log and its target kept the old row."""

from __future__ import annotations

import pytest

from capture.config import load_config
from capture.status import source_status
from tests.integration.dumping import AlterAt, run_dump
from tests.integration.postgres.dumping import (
    assert_target_is_source,
    change_and_land,
    dump_table,
    published_tables,
    wait_until_landed,
)
from tests.servers import wait_for

pytestmark = pytest.mark.integration

PARTITIONED = (
    "CREATE TABLE m (id int PRIMARY KEY, v int) PARTITION BY RANGE (id)",
    "CREATE TABLE m1 PARTITION OF m FOR VALUES FROM (0) TO (100)",
    "CREATE TABLE m2 PARTITION OF m FOR VALUES FROM (100) TO (200)",
    "INSERT INTO m SELECT i, i FROM generate_series(1, 150) i",
)
# the detach, then writes to the detached table a moment later (each its own transaction)
DETACH_AND_WRITE = (
    "ALTER TABLE m DETACH PARTITION m1",
    "UPDATE m1 SET v = -1 WHERE id = 5",
    "DELETE FROM m1 WHERE id = 6",
    "INSERT INTO m1 VALUES (0, 1000)",
    "UPDATE m1 SET v = -2 WHERE id = 95",
)


def _listed(postgres, pg_database: str) -> list[str]:
    """The tables capture's publication lists by name (pg_publication_tables names leaves only)."""
    rows = postgres.query(
        "SELECT c.relname FROM pg_publication_rel r JOIN pg_class c ON c.oid = r.prrelid"
        " JOIN pg_publication p ON p.oid = r.prpubid WHERE p.pubname = 'logtide_src' ORDER BY 1",
        database=pg_database,
    )
    return [r[0] for r in rows]


def _not_converged(capture) -> list[str]:
    return [t["table"] for t in source_status(load_config(capture.config_path), "src")["not_converged"]]


def _settle(postgres, pg_database: str, capture) -> None:
    """The detached table published by name, and everything written so far landed."""
    wait_for(lambda: "public.m1" in published_tables(postgres, pg_database), 30, what="m1 published")
    change_and_land(postgres, pg_database, capture, "UPDATE m2 SET v = 0 WHERE id = 120")


@pytest.mark.parametrize("concurrently", [False, True], ids=["detach", "detach_concurrently"])
def test_a_table_written_right_after_its_detach_converges(postgres, pg_database, start_pg_capture, concurrently):
    capture = start_pg_capture(*PARTITIONED)
    dump_table(capture, "m1", chunk_size=20)
    dump_table(capture, "m2", chunk_size=20)
    wait_until_landed(postgres, pg_database, capture)
    assert {"m", "m1", "m2"} <= set(_listed(postgres, pg_database))  # the partitions by name too
    detach = DETACH_AND_WRITE[0] + (" CONCURRENTLY" if concurrently else "")  # two transactions
    postgres.execute(detach, *DETACH_AND_WRITE[1:], database=pg_database)
    _settle(postgres, pg_database, capture)
    assert "public.m1" not in _not_converged(capture)  # nothing to dump: the log has every change
    assert_target_is_source(capture, postgres, pg_database, "m1")
    assert_target_is_source(capture, postgres, pg_database, "m2")
    assert capture.stop() == 0


def test_a_table_detached_and_written_during_its_dump_converges(postgres, pg_database, start_pg_capture):
    capture = start_pg_capture(*PARTITIONED)
    dump_table(capture, "m2", chunk_size=20)
    run_dump(
        capture,
        "public.m1",
        chunk_size=20,
        wrap=lambda source: AlterAt(source, lambda _: postgres.execute(*DETACH_AND_WRITE, database=pg_database)).at(
            3, "LOW", "detach"
        ),
    )
    _settle(postgres, pg_database, capture)
    assert "public.m1" not in _not_converged(capture)  # nothing to dump: the log has every change
    assert_target_is_source(capture, postgres, pg_database, "m1")
    assert_target_is_source(capture, postgres, pg_database, "m2")
    assert capture.stop() == 0


def test_partitions_are_listed_in_a_publication_of_their_partitioned_table_without_a_dump_named(
    postgres, pg_database, make_pg_capture
):
    """A publication made before (listing the partitioned table only, as on main) gets the partitions
    captured by their own name listed too; their changes were in the log all along, so nothing is
    listed not converged. One excluded is not listed, nor one of a partitioned table not captured."""
    postgres.execute(
        *PARTITIONED,
        "CREATE TABLE m3 PARTITION OF m FOR VALUES FROM (200) TO (300)",
        "CREATE TABLE other (id int PRIMARY KEY) PARTITION BY RANGE (id)",
        "CREATE TABLE other1 PARTITION OF other FOR VALUES FROM (0) TO (100)",
        "CREATE PUBLICATION logtide_src FOR TABLE m, m3, other1",
        database=pg_database,
    )
    capture = make_pg_capture(["public.m*", "public.lt_marker"], exclude=["public.m3"]).start()
    capture.wait_running()
    wait_for(lambda: _listed(postgres, pg_database) == ["m", "m1", "m2"], 30, what="m1, m2 listed, m3, other1 not")
    change_and_land(postgres, pg_database, capture, "INSERT INTO m VALUES (160, 160)")
    assert not {"public.m1", "public.m2"} & set(_not_converged(capture))
    assert capture.stop() == 0


def test_a_partition_detached_before_it_was_listed_is_named_not_converged_and_a_dump_converges_it(
    postgres, pg_database, start_pg_capture
):
    """The gap left: a partition created and detached in one transaction (no sync between, so never listed
    by name) and written to at once. Its rows and, unless a sync came first, the UPDATE are in no log: the
    sync that publishes it lists it not converged, and the dump it names converges it."""
    capture = start_pg_capture(*PARTITIONED)
    postgres.execute(
        "BEGIN; CREATE TABLE m3 PARTITION OF m FOR VALUES FROM (200) TO (300);"
        " INSERT INTO m SELECT i, i FROM generate_series(200, 220) i; ALTER TABLE m DETACH PARTITION m3; COMMIT",
        "UPDATE m3 SET v = -1 WHERE id = 205",
        database=pg_database,
    )
    wait_for(lambda: "public.m3" in published_tables(postgres, pg_database), 30, what="m3 published")
    wait_until_landed(postgres, pg_database, capture)
    assert "public.m3" in _not_converged(capture)
    dump_table(capture, "m3", chunk_size=5)
    change_and_land(postgres, pg_database, capture, "UPDATE m3 SET v = -2 WHERE id = 210")
    assert_target_is_source(capture, postgres, pg_database, "m3")
    assert "public.m3" not in _not_converged(capture)
    assert capture.stop() == 0
