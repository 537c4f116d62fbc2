"""Partition statements on a real MariaDB: `ALTER TABLE ... DROP, TRUNCATE, EXCHANGE or CONVERT
PARTITION` remove or move rows and the binlog holds the statement only, no row events. Capture
stops at such a statement on a captured table (nothing of it lands, a restart stops there again),
goes on with a warning under `partition_changes: accept`, lands TRUNCATE PARTITION ALL as a
truncate, and passes statements that keep every row (REORGANIZE, REMOVE PARTITIONING)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from capture.sources.mysql.partitions import partition_change
from tests.integration.dumping import landed_rows, table_rows

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("drop_database_afterwards")]

RANGED = (
    "CREATE TABLE t (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id)"
    " (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20), PARTITION p2 VALUES LESS THAN (30))"
)
ROWS = "INSERT INTO t VALUES (1, 1), (11, 11), (21, 21)"


def test_partition_statements_parsed():
    assert partition_change("ALTER TABLE t DROP PARTITION p0", "d").what == "DROP PARTITION"
    assert partition_change("alter table `d2`.`t` drop partition if exists p0, p1", "d").table == ("d2", "t")
    whole = partition_change("ALTER TABLE t TRUNCATE PARTITION ALL", "d")
    assert whole.whole and whole.table == ("d", "t")
    assert not partition_change("ALTER TABLE t TRUNCATE PARTITION p0, p1", "d").whole
    swap = partition_change("ALTER TABLE t EXCHANGE PARTITION p0 WITH TABLE o.t2 WITHOUT VALIDATION", "d")
    assert swap.tables == (("d", "t"), ("o", "t2"))
    assert partition_change("ALTER TABLE t CONVERT PARTITION p0 TO TABLE t2", "d").other == ("d", "t2")
    assert partition_change("ALTER TABLE t CONVERT TABLE t2 TO PARTITION p9 VALUES LESS THAN (90)", "d").other == (
        "d",
        "t2",
    )
    for keeps in (
        "ALTER TABLE t REORGANIZE PARTITION p0, p1 INTO (PARTITION p01 VALUES LESS THAN (20))",
        "ALTER TABLE t REMOVE PARTITIONING",
        "ALTER TABLE t ADD PARTITION (PARTITION p3 VALUES LESS THAN (40))",
        "ALTER TABLE t COMMENT 'drop partition p0'",  # a string, not the statement
        "ALTER TABLE t /* drop partition p0 */ ADD COLUMN w INT",
        "ALTER TABLE t ADD COLUMN `drop` INT, ADD COLUMN `partition` INT",
        "CREATE TABLE x (id INT) PARTITION BY HASH (id) PARTITIONS 4",
    ):
        assert partition_change(keeps, "d") is None, keeps


def test_drop_partition_stops_capture_before_it_lands(mariadb, database, make_capture):
    """On main, DROP PARTITION landed as DDL history only: the target kept rows 11 (and 1 after
    TRUNCATE PARTITION) the source no longer had."""
    mariadb.execute(RANGED, ROWS, database=database)
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    mariadb.execute("INSERT INTO t VALUES (2, 2), (12, 12)", database=database)
    capture.wait_events(database, "t", 2)
    mariadb.execute("ALTER TABLE t DROP PARTITION p1", "INSERT INTO t VALUES (3, 3)", database=database)
    assert table_rows(mariadb, database, "t") == [(1, 1), (2, 2), (3, 3), (21, 21)]
    assert capture.wait_exit() == 2
    log = capture.log()
    assert "PartitionChangeError" in log and "DROP PARTITION" in log and f"{database}.t" in log
    for way_out in ("partition_changes: accept", "dump"):
        assert way_out in log
    assert [e["_op"] for e in capture.events(database, "t")] == ["c", "c"]  # the inserts before it; nothing after
    # refuse again at the same place
    assert capture.run_to_exit() == 2
    assert capture.log().count("PartitionChangeError") >= 2
    assert len(capture.events(database, "t")) == 2

    # accepted: a warning, the statement lands as DDL history, capture goes on; a dump repairs the target
    capture.set_source(partition_changes="accept")
    capture.start()
    capture.wait_events(database, "t", 3)  # the insert after the DROP PARTITION
    log = capture.log()
    assert "capture.partition_change_accepted" in log
    assert capture.process is not None and capture.process.poll() is None
    status = [sys.executable, "-m", "capture.cli", "--config", str(capture.config_path), "status"]
    report = json.loads(subprocess.run([*status, "--json"], cwd=ROOT, capture_output=True, text=True).stdout)
    assert report[0]["partition_changes"] == "accept"
    assert "partition changes accepted" in subprocess.run(status, cwd=ROOT, capture_output=True, text=True).stdout
    assert capture.stop() == 0
    # the divergence accepted: the target keeps (12, 12), which the DROP PARTITION removed (a dump repairs it)
    assert landed_rows(capture, database, "t") == [(2, 2), (3, 3), (12, 12)]


def test_exchange_and_truncate_partition_stop_capture(mariadb, database, make_capture):
    mariadb.execute(RANGED, ROWS, "CREATE TABLE other (id INT PRIMARY KEY, v INT)", database=database)
    mariadb.execute("INSERT INTO other VALUES (5, 5)", database=database)
    # only `other` captured: the exchange moves its row into t (no row events) -> stops as well
    only_other = make_capture([f"{database}.other"], source="only_other").start()
    only_other.wait_running()
    capture = make_capture([f"{database}.t"]).start()
    capture.wait_running()
    mariadb.execute("ALTER TABLE t EXCHANGE PARTITION p0 WITH TABLE other", database=database)
    assert table_rows(mariadb, database, "other") == [(1, 1)] and (5, 5) in table_rows(mariadb, database, "t")
    assert capture.wait_exit() == 2 and only_other.wait_exit() == 2
    assert "EXCHANGE PARTITION" in capture.log() and f"{database}.other" in only_other.log()

    mariadb.execute("ALTER TABLE t TRUNCATE PARTITION p2", database=database)
    assert capture.run_to_exit() == 2  # still the exchange first
    assert "EXCHANGE PARTITION" in capture.log()


@pytest.mark.parametrize(
    ("create", "statements", "table", "landed"),
    [
        pytest.param(
            [RANGED, ROWS],
            [
                "ALTER TABLE t REORGANIZE PARTITION p0, p1 INTO (PARTITION p01 VALUES LESS THAN (20))",
                "INSERT INTO t VALUES (2, 2)",
                "ALTER TABLE t REMOVE PARTITIONING",
                "ALTER TABLE t PARTITION BY HASH (id) PARTITIONS 3",
                "INSERT INTO t VALUES (3, 3)",
                "ALTER TABLE t TRUNCATE PARTITION ALL",
                "INSERT INTO t VALUES (4, 4)",
            ],
            "t",
            # the dump seeded nothing here: the landed state is the log's: (1), (11), (21) predate capture
            [(4, 4)],
            id="truncate_partition_all_lands_as_a_truncate_and_reorganize_passes",
        ),
        pytest.param(
            [
                "CREATE TABLE h (id INT PRIMARY KEY, v INT) WITH SYSTEM VERSIONING PARTITION BY SYSTEM_TIME LIMIT 1"
                " (PARTITION hist1 HISTORY, PARTITION hist2 HISTORY, PARTITION cur CURRENT)"
            ],
            [
                "INSERT INTO h VALUES (1, 1)",
                "UPDATE h SET v = 2",
                "ALTER TABLE h DROP PARTITION hist1",
                "ALTER TABLE h TRUNCATE PARTITION hist2",
                "INSERT INTO h VALUES (2, 2)",
            ],
            "h",
            [(1, 2), (2, 2)],
            id="system_time_history_partitions_pass",
        ),
    ],
)
def test_statements_that_keep_every_row_pass(mariadb, database, make_capture, create, statements, table, landed):
    mariadb.execute(*create, database=database)
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    mariadb.execute(*statements, database=database)
    capture.wait_events(database, table, 3)
    assert capture.process is not None and capture.process.poll() is None
    assert capture.stop() == 0
    assert landed_rows(capture, database, table) == landed == table_rows(mariadb, database, table)


def test_convert_partition_to_table_and_back_stop_capture(mariadb, database, make_capture):
    """MariaDB 10.7+: CONVERT PARTITION p TO TABLE t2 moves p's rows into a new table;
    CONVERT TABLE t2 TO PARTITION moves them back. Either stops capture of the tables it names."""
    mariadb.execute(RANGED, ROWS, database=database)
    capture = make_capture([f"{database}.t"]).start()
    capture.wait_running()
    mariadb.execute("ALTER TABLE t CONVERT PARTITION p2 TO TABLE t2", database=database)
    assert table_rows(mariadb, database, "t2") == [(21, 21)]
    assert capture.wait_exit() == 2
    assert "CONVERT PARTITION" in capture.log() and f"{database}.t " in capture.log()
    # only the converted table captured: it gains rows without row events as well
    t2_only = make_capture([f"{database}.t2"], source="t2only").start()
    t2_only.wait_running()
    mariadb.execute("ALTER TABLE t CONVERT TABLE t2 TO PARTITION p2 VALUES LESS THAN (30)", database=database)
    assert t2_only.wait_exit() == 2
    assert "CONVERT TABLE ... TO PARTITION" in t2_only.log()
