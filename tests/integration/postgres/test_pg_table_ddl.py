"""PostgreSQL DDL that changes what a captured table's rows read without row events, made fail-closed
like MariaDB's (README, PostgreSQL: Schema).

- ADD COLUMN ... DEFAULT, RENAME COLUMN, ALTER COLUMN TYPE: on main capture warned once, while
  running, against the previous Relation message in memory; restarted, or with the DDL made while it
  was stopped, it said nothing and the targets kept NULL / old values. Now capture stops
  (ColumnRewriteError) before landing the change that reveals it, compared with the schema landed,
  unless `column_rewrites: accept`.
- DROP TABLE and CREATE TABLE under the same name: on main the old table's rows stayed in the target
  forever. Now a Truncate lands before the new relation's first change.
- A captured table renamed onto another captured name: stops (TableRenameError) unless
  `table_renames: accept`; accepted, both names are emptied and a dump brings the rows back.
"""

from __future__ import annotations

import pytest

from capture.config import load_config
from capture.status import render, source_status
from tests.integration.postgres.dumping import (
    assert_target_holds_source,
    change_and_land,
    dump_table,
    published_tables,
    reconciled_state,
    wait_until_landed,
)
from tests.servers import wait_for

pytestmark = pytest.mark.integration


def test_ddl_made_while_capture_was_stopped_stops_it_again_and_again(postgres, pg_database, start_pg_capture):
    capture = start_pg_capture(
        "CREATE TABLE items (id int PRIMARY KEY, v int)",
        "INSERT INTO items SELECT i, i FROM generate_series(1, 4) i",
    )
    dump_table(capture, "items")
    change_and_land(postgres, pg_database, capture, "UPDATE items SET v = 0 WHERE id = 4")
    assert capture.stop() == 0
    landed = len(capture.events("public", "items"))
    postgres.execute(  # while capture is stopped
        "ALTER TABLE items ADD COLUMN flag int NOT NULL DEFAULT 7",
        "UPDATE items SET v = -1 WHERE id = 1",
        database=pg_database,
    )
    assert capture.run_to_exit() == 2
    log = capture.log()
    assert "ColumnRewriteError" in log and "public.items" in log and "flag" in log
    for way_out in ("column_rewrites: accept", "logtide dump", "exclude"):
        assert way_out in log
    assert len(capture.events("public", "items")) == landed  # the change that revealed it did not land
    assert capture.run_to_exit() == 2  # and it stops there again

    capture.set_source(column_rewrites="accept")
    capture.start()
    capture.wait_running()
    wait_until_landed(postgres, pg_database, capture)
    assert "capture.column_rewrite_accepted" in capture.log()
    report = source_status(load_config(capture.config_path), "src")
    assert report["column_rewrites"] == "accept" and "column rewrites accepted" in render([report])
    dump_table(capture, "items")  # the dump it names repairs the target
    wait_until_landed(postgres, pg_database, capture)
    assert_target_holds_source(capture, postgres, pg_database, "items")
    assert capture.stop() == 0


def test_a_column_renamed_while_capture_runs_stops_it(postgres, pg_database, start_pg_capture):
    capture = start_pg_capture(
        "CREATE TABLE items (id int PRIMARY KEY, note text)",
        "INSERT INTO items SELECT i, 'n' || i FROM generate_series(1, 3) i",
        "CREATE TABLE plain (id int PRIMARY KEY, v int)",
    )
    change_and_land(
        postgres, pg_database, capture, "UPDATE items SET note = 'x' WHERE id = 3", "INSERT INTO plain VALUES (1, 1)"
    )
    change_and_land(
        postgres,
        pg_database,
        capture,
        "ALTER TABLE plain ADD COLUMN extra int",  # NULL in every row, as in the target: passes
        "INSERT INTO plain VALUES (2, 2, 2)",
    )
    postgres.execute(
        "ALTER TABLE items RENAME COLUMN note TO label",
        "UPDATE items SET label = 'y' WHERE id = 1",
        database=pg_database,
    )
    assert capture.wait_exit() == 2
    log = capture.log()
    assert "ColumnRewriteError" in log and "public.items" in log and "label" in log and "note" in log
    assert not any(e["after"] and e["after"].get("label") == "y" for e in capture.events("public", "items"))
    assert_target_holds_source(capture, postgres, pg_database, "plain")


def test_a_table_dropped_and_created_again_is_emptied_in_the_target(postgres, pg_database, start_pg_capture):
    """On main the target kept rows 1 to 3 of the dropped table next to the new table's rows."""
    capture = start_pg_capture(
        "CREATE TABLE t (id int PRIMARY KEY, v int)",
        "INSERT INTO t SELECT i, i FROM generate_series(1, 3) i",
    )
    dump_table(capture, "t")
    change_and_land(postgres, pg_database, capture, "UPDATE t SET v = 0 WHERE id = 3")
    postgres.execute("DROP TABLE t", "CREATE TABLE t (id int PRIMARY KEY, v int)", database=pg_database)
    wait_for(lambda: "public.t" in published_tables(postgres, pg_database), 30, what="the new t published")
    change_and_land(postgres, pg_database, capture, "INSERT INTO t VALUES (10, 10), (11, 11)")
    assert_target_holds_source(capture, postgres, pg_database, "t")
    history = [r for r in capture.zone.read_schema_history().to_pylist() if r["kind"] == "truncate"]
    assert [(r["schema"], r["table"]) for r in history] == [("public", "t")]
    # started again: the new relation is known, nothing is emptied twice
    assert capture.stop() == 0
    capture.start()
    capture.wait_running()
    change_and_land(postgres, pg_database, capture, "INSERT INTO t VALUES (12, 12)")
    assert_target_holds_source(capture, postgres, pg_database, "t")
    assert "capture.table_replaced" in capture.log()
    assert capture.stop() == 0


def test_a_captured_table_renamed_onto_another_captured_name_stops_capture(postgres, pg_database, start_pg_capture):
    capture = start_pg_capture(
        "CREATE TABLE a (id int PRIMARY KEY, v int)",
        "INSERT INTO a SELECT i, i FROM generate_series(1, 3) i",
        "CREATE TABLE b (id int PRIMARY KEY, v int)",
        "INSERT INTO b SELECT i, i FROM generate_series(101, 102) i",
    )
    for table in ("a", "b"):
        dump_table(capture, table)
    change_and_land(
        postgres, pg_database, capture, "UPDATE a SET v = 0 WHERE id = 3", "UPDATE b SET v = 0 WHERE id = 102"
    )
    postgres.execute(
        "DROP TABLE b", "ALTER TABLE a RENAME TO b", "UPDATE b SET v = -1 WHERE id = 1", database=pg_database
    )
    assert capture.wait_exit() == 2
    log = capture.log()
    assert "TableRenameError" in log and "public.a" in log and "public.b" in log and "table_renames: accept" in log
    assert capture.run_to_exit() == 2  # started again: the same

    capture.set_source(table_renames="accept")
    capture.start()
    capture.wait_running()
    wait_until_landed(postgres, pg_database, capture)
    assert "capture.table_rename_accepted" in capture.log()
    dump_table(capture, "b")
    wait_until_landed(postgres, pg_database, capture)
    assert_target_holds_source(capture, postgres, pg_database, "b")
    state, _ = reconciled_state(capture, "public", "a")  # the name is gone: its target is emptied
    assert state == {}
    assert capture.stop() == 0
