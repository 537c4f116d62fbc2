"""Foreign-key cascades on a real MariaDB: InnoDB runs ON DELETE / ON UPDATE CASCADE and SET NULL
inside the storage engine and writes no row events for the child rows it changes (a replica runs
the cascade again itself), so capture never sees them. What this shows, and what capture does:
it refuses to start on a captured child of a cascading foreign key, names each one and the ways
out, accepts them knowingly with `foreign_key_cascades: accept`, and stops when DDL adds one."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from capture.config import SourceConfig
from capture.errors import PreflightError
from capture.events import ChangeBatch, TransactionEnd
from capture.sources.mysql.reader import BinlogReader
from tests.integration.binlog_check import binlog_end, binlog_position
from tests.integration.dumping import landed_rows, table_rows

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("drop_database_afterwards")]

PARENT = "CREATE TABLE parent (id INT PRIMARY KEY, v INT)"
CHILD = (
    "CREATE TABLE child (id INT PRIMARY KEY, parent_id INT, CONSTRAINT child_parent FOREIGN KEY (parent_id)"
    " REFERENCES parent (id) ON DELETE {delete} ON UPDATE {update})"
)


def test_binlog_has_no_row_events_for_cascaded_child_changes(mariadb, database):
    """The divergence itself, read with capture's own binlog reader: a parent delete (ON DELETE
    CASCADE) and a parent key change (ON UPDATE SET NULL) change child rows, and the binlog holds
    row events of the parent only."""
    mariadb.execute(PARENT, CHILD.format(delete="CASCADE", update="SET NULL"), database=database)
    mariadb.execute(
        "INSERT INTO parent VALUES (1, 1), (2, 2)",
        "INSERT INTO child VALUES (10, 1), (11, 1), (20, 2)",
        database=database,
    )
    start = binlog_position(mariadb)
    mariadb.execute("DELETE FROM parent WHERE id = 1", "UPDATE parent SET id = 3 WHERE id = 2", database=database)
    end = binlog_end(mariadb)
    assert table_rows(mariadb, database, "child") == [(20, None)]  # the cascades ran

    config = SourceConfig(kind="mariadb", port=mariadb.port, user="root", server_id=4251, include=[f"{database}.*"])
    changes = []
    for item in BinlogReader("src", config, start, threading.Event()):
        if isinstance(item, ChangeBatch):
            changes.extend((item.table.table, c.op.value) for c in item.changes)
        elif isinstance(item, TransactionEnd) and item.frontier >= end:
            break
    assert changes == [("parent", "d"), ("parent", "d"), ("parent", "c")]  # nothing of `child`


def test_capture_refuses_a_captured_child_of_a_cascading_key(mariadb, database, make_capture):
    mariadb.execute(
        PARENT,
        CHILD.format(delete="CASCADE", update="RESTRICT"),
        "CREATE TABLE grandchild (id INT PRIMARY KEY, child_id INT, CONSTRAINT gc_child FOREIGN KEY (child_id)"
        " REFERENCES child (id) ON UPDATE SET NULL)",
        database=database,
    )
    capture = make_capture([f"{database}.*"])
    assert capture.run_to_exit() == 2
    log = capture.log()
    assert "PreflightError" in log
    assert f"{database}.child (constraint child_parent: ON DELETE CASCADE, parent {database}.parent)" in log
    assert f"{database}.grandchild (constraint gc_child: ON UPDATE SET NULL, parent {database}.child)" in log
    for way_out in ("exclude:", "RESTRICT", "foreign_key_cascades: accept"):
        assert way_out in log
    assert capture.zone.checkpoint() is None  # nothing landed, not even a checkpoint

    # the parent alone is captured: its rows are all in the binlog
    parent_only = make_capture([f"{database}.parent"], source="parent_only").start()
    parent_only.wait_running()
    assert parent_only.stop() == 0
    # the child alone is captured, whatever the parent: refused
    child_only = make_capture([f"{database}.grandchild"], source="child_only")
    assert child_only.run_to_exit() == 2
    assert "grandchild" in child_only.log() and f"{database}.child " not in child_only.log()


def test_accepted_cascades_warn_and_capture_runs(mariadb, database, make_capture):
    mariadb.execute(PARENT, CHILD.format(delete="CASCADE", update="CASCADE"), database=database)
    capture = make_capture([f"{database}.*"], foreign_key_cascades="accept").start()
    capture.wait_running()
    log = capture.log()
    assert "capture.foreign_key_cascades_accepted" in log and f"{database}.child" in log
    assert "dump" in log  # says what repairs the child
    mariadb.execute(
        "INSERT INTO parent VALUES (1, 1)",
        "INSERT INTO child VALUES (10, 1)",
        "DELETE FROM parent WHERE id = 1",
        database=database,
    )
    capture.wait_events(database, "parent", 2)
    capture.wait_events(database, "child", 1)
    assert capture.stop() == 0
    # the divergence accepted: the child's landed state keeps the row the cascade deleted
    assert table_rows(mariadb, database, "child") == []
    assert landed_rows(capture, database, "child") == [(10, 1)]
    # `logtide status` shows the option
    status = [sys.executable, "-m", "capture.cli", "--config", str(capture.config_path), "status"]
    report = json.loads(subprocess.run([*status, "--json"], cwd=ROOT, capture_output=True, text=True).stdout)
    assert report[0]["foreign_key_cascades"] == "accept"
    text = subprocess.run(status, cwd=ROOT, capture_output=True, text=True).stdout
    assert "source src (mariadb, table watermarks, foreign-key cascades accepted)" in text


def test_ddl_adding_a_cascade_stops_capture_and_restrict_keys_are_fine(mariadb, database, make_capture):
    mariadb.execute(
        PARENT,
        CHILD.format(delete="RESTRICT", update="NO ACTION"),
        "CREATE TABLE other (id INT PRIMARY KEY, parent_id INT, FOREIGN KEY (parent_id) REFERENCES parent (id))",
        database=database,
    )
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()  # RESTRICT, NO ACTION and the default (RESTRICT): nothing cascades
    mariadb.execute("INSERT INTO parent VALUES (1, 1)", "INSERT INTO child VALUES (10, 1)", database=database)
    capture.wait_events(database, "child", 1)
    mariadb.execute(
        "ALTER TABLE other ADD CONSTRAINT other_cascade FOREIGN KEY (parent_id) REFERENCES parent (id)"
        " ON DELETE CASCADE",
        database=database,
    )
    assert capture.wait_exit() == 2
    log = capture.log()
    assert f"{database}.other (constraint other_cascade: ON DELETE CASCADE, parent {database}.parent)" in log
    assert "foreign_key_cascades: accept" in log
    assert landed_rows(capture, database, "child") == [(10, 1)]  # what came before the DDL landed
    # started again, it refuses at startup with the same message
    assert capture.run_to_exit() == 2
    assert capture.log().count("other_cascade: ON DELETE CASCADE") >= 2


def test_ddl_adding_a_cascade_warns_when_accepted(mariadb, database, make_capture):
    mariadb.execute(PARENT, "CREATE TABLE child (id INT PRIMARY KEY, parent_id INT)", database=database)
    capture = make_capture([f"{database}.*"], foreign_key_cascades="accept").start()
    capture.wait_running()
    mariadb.execute(
        "ALTER TABLE child ADD CONSTRAINT late FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE SET NULL",
        "INSERT INTO parent VALUES (1, 1)",
        database=database,
    )
    capture.wait_events(database, "parent", 1)
    assert "constraint late: ON DELETE SET NULL" in capture.log()
    assert capture.process is not None and capture.process.poll() is None
    assert capture.stop() == 0


def test_a_cascade_added_and_dropped_while_capture_was_stopped_stops_it_at_the_ddl(mariadb, database, make_capture):
    """Capture behind: the catalog, read at the DDL, no longer shows the key the DDL added; the
    statement's text still stops capture, since the cascades in between left no rows in the log."""
    mariadb.execute(PARENT, "CREATE TABLE child (id INT PRIMARY KEY, parent_id INT)", database=database)
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    mariadb.execute("INSERT INTO parent VALUES (1, 1)", "INSERT INTO child VALUES (10, 1)", database=database)
    capture.wait_events(database, "child", 1)
    assert capture.stop() == 0
    mariadb.execute(
        "ALTER TABLE child ADD CONSTRAINT brief FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE CASCADE",
        "DELETE FROM parent WHERE id = 1",  # deletes child 10: no row event
        "ALTER TABLE child DROP FOREIGN KEY brief",
        database=database,
    )
    assert capture.run_to_exit() == 2
    log = capture.log()
    assert f"{database}.child (constraint (not in the catalog now: dropped since): ON DELETE CASCADE" in log
    assert len(capture.events(database, "parent")) == 1  # the insert; stopped before the delete


@pytest.mark.parametrize(
    "ddl",
    [
        "ALTER TABLE child ADD CONSTRAINT brief FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE CASCADE",
        "-- a comment first\nALTER TABLE child ADD CONSTRAINT brief FOREIGN KEY (parent_id) REFERENCES parent (id)"
        " ON DELETE CASCADE",
        "# a comment first\nALTER TABLE child ADD CONSTRAINT brief FOREIGN KEY (parent_id) REFERENCES parent (id)"
        " ON DELETE CASCADE",
        "ALTER TABLE child ADD CONSTRAINT brief FOREIGN KEY (parent_id) REFERENCES parent (id)"
        " ON DELETE /* why */ CASCADE",
    ],
)
def test_a_cascade_added_and_dropped_while_the_reader_was_behind_stops_it_whatever_the_comments(mariadb, database, ddl):
    """The text check (the catalog no longer shows the key when the reader reaches the DDL) reads
    the DDL as the server does: comments before it or inside its rule hide nothing."""
    mariadb.execute(PARENT, "CREATE TABLE child (id INT PRIMARY KEY, parent_id INT)", database=database)
    mariadb.execute("INSERT INTO parent VALUES (1, 1)", "INSERT INTO child VALUES (10, 1)", database=database)
    start = binlog_position(mariadb)
    mariadb.execute(
        ddl,
        "DELETE FROM parent WHERE id = 1",  # deletes child 10: no row event
        "ALTER TABLE child DROP FOREIGN KEY brief",
        database=database,
    )
    end = binlog_end(mariadb)
    config = SourceConfig(kind="mariadb", port=mariadb.port, user="root", server_id=4252, include=[f"{database}.*"])
    with pytest.raises(PreflightError, match="cascad"):
        for item in BinlogReader("src", config, start, threading.Event()):
            if isinstance(item, TransactionEnd) and item.frontier >= end:
                break
