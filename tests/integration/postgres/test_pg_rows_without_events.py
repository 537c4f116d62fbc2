"""PostgreSQL changes that change what a captured table's rows read without a row event in the log,
each of which left a target diverging silently on main (README, PostgreSQL: Schema).

- DROP TABLE with no table created again under the name: nothing landed, the target kept its rows
  for good. Now a truncate lands, placed after every change of the dropped table.
- A table whose rows came only from a dump: no landed schema to compare its first Relation message
  with, so an ADD COLUMN ... DEFAULT or RENAME COLUMN passed (NULL / the old name in the target).
  Now the schema the dump's chunk recorded is the baseline.
- ALTER TYPE ... RENAME VALUE of an enum a captured column uses: every row reads the new label.
- A publication switched to publish_via_partition_root while capture runs: the partitions' changes
  came under the partitioned table's name, which no dump fills.
- A captured table dropped from the publication by hand: its changes are no longer sent.
- ALTER TABLE t RENAME TO a name not captured: the relation keeps its OID, so it was not found
  dropped and the target of t kept its rows. Now emptied as a dropped table is.
- A table only dumped, dropped, created and dumped again, then dropped again: its second drop was
  not found (the name counted as dropped for good). Now emptied again.
- A table only dumped whose chunk landed seconds after its dump's table folder: never watched, so
  its DROP landed no truncate. Now looked at again each round until its chunk is there.
- ALTER TABLE t RENAME TO t_tmp, changes, and back before a watcher round (or while capture is
  stopped): the changes made under t_tmp were dropped. Now they land as t's.
"""

from __future__ import annotations

import time

import pytest

from capture.landing.reader import DumpedTables
from capture.sources.postgres.watcher import CHECK_S
from tests.integration.postgres.dumping import (
    assert_target_holds_source,
    assert_target_is_source,
    change_and_land,
    dump_table,
    published_tables,
    reconciled_state,
    wait_until_landed,
)
from tests.servers import wait_for

pytestmark = pytest.mark.integration

T_AND_OTHER = (  # t with three rows, and a table to write to after t is gone
    "CREATE TABLE t (id int PRIMARY KEY, v int)",
    "INSERT INTO t SELECT i, i FROM generate_series(1, 3) i",
    "CREATE TABLE other (id int PRIMARY KEY)",
)


def _truncates(capture, table: str) -> list[dict]:
    history = capture.zone.read_schema_history()
    rows = [] if history is None else history.to_pylist()
    return [r for r in rows if r["kind"] == "truncate" and (r["schema"], r["table"]) == ("public", table)]


def _truncates_after_a_restart(postgres, pg_database: str, capture, other_id: int) -> int:
    """Stop and start capture, land two changes (of `other`), and count the truncates of t landed.
    The second commits after the restarted reader's first catalog round (it streams only after it,
    and the first change landed), so a truncate that round finds due lands with it at the latest."""
    assert capture.stop() == 0
    capture.start()
    capture.wait_running()
    change_and_land(postgres, pg_database, capture, f"INSERT INTO other VALUES ({other_id})")
    change_and_land(postgres, pg_database, capture, f"INSERT INTO other VALUES ({other_id + 100})")
    return len(_truncates(capture, "t"))


def _stops(capture) -> str:
    wait_for(lambda: capture.process.poll() is not None, 30, what="capture to stop")
    assert capture.process.returncode == 2
    return capture.log()


def test_a_dropped_table_is_emptied_in_the_target_once(postgres, pg_database, start_pg_capture):
    """The drop is noticed from the catalog while the reader is still behind it (capture was stopped
    over a change and the DROP): the truncate lands after that change, so the target ends empty; a
    restart lands it neither again nor lost."""
    capture = start_pg_capture(*T_AND_OTHER)
    dump_table(capture, "t")
    change_and_land(postgres, pg_database, capture, "UPDATE t SET v = 0 WHERE id = 3")
    assert capture.stop() == 0
    postgres.execute("INSERT INTO t VALUES (4, 4)", "UPDATE t SET v = 9 WHERE id = 1", database=pg_database)
    postgres.execute("DROP TABLE t", database=pg_database)
    capture.start()
    capture.wait_running()
    change_and_land(postgres, pg_database, capture, "INSERT INTO other VALUES (1)")
    wait_for(lambda: _truncates(capture, "t"), 30, what="the truncate of t")
    assert any(e["after"] and e["after"]["id"] == 4 for e in capture.events("public", "t"))  # read before it
    state, _ = reconciled_state(capture, "public", "t")
    assert state == {}
    assert "capture.table_dropped" in capture.log()
    assert _truncates_after_a_restart(postgres, pg_database, capture, 2) == 1
    # created again later: emptied before the new table's first change, as before, and its rows land
    postgres.execute("CREATE TABLE t (id int PRIMARY KEY, v int)", database=pg_database)
    wait_for(lambda: "public.t" in published_tables(postgres, pg_database), 30, what="the new t published")
    change_and_land(postgres, pg_database, capture, "INSERT INTO t VALUES (10, 10)")
    assert_target_holds_source(capture, postgres, pg_database, "t")
    assert capture.stop() == 0


def test_a_dropped_table_is_emptied_while_capture_runs_on_an_idle_server(postgres, pg_database, start_pg_capture):
    """Nothing is written after the DROP: the truncate lands at the WAL end the idle stream reports."""
    capture = start_pg_capture(*T_AND_OTHER)
    dump_table(capture, "t")
    change_and_land(postgres, pg_database, capture, "UPDATE t SET v = 0 WHERE id = 3")
    postgres.execute("DROP TABLE t", database=pg_database)
    wait_for(lambda: _truncates(capture, "t"), 30, what="the truncate of t")
    state, _ = reconciled_state(capture, "public", "t")
    assert state == {}
    change_and_land(postgres, pg_database, capture, "INSERT INTO other VALUES (1)")  # lands after it
    assert_target_holds_source(capture, postgres, pg_database, "other")
    assert _truncates_after_a_restart(postgres, pg_database, capture, 2) == 1
    assert capture.stop() == 0


def test_a_dropped_table_whose_rows_came_only_from_a_dump_is_emptied(postgres, pg_database, start_pg_capture):
    capture = start_pg_capture(*T_AND_OTHER)
    dump_table(capture, "t")  # no change of t in the log
    postgres.execute("DROP TABLE t", database=pg_database)
    wait_for(lambda: _truncates(capture, "t"), 30, what="the truncate of t")
    state, _ = reconciled_state(capture, "public", "t")
    assert state == {}
    assert _truncates_after_a_restart(postgres, pg_database, capture, 1) == 1
    assert capture.stop() == 0


@pytest.mark.parametrize(
    ("away", "moved"),
    [("ALTER TABLE t RENAME TO t_old", ("public", "t_old")), ("ALTER TABLE t SET SCHEMA archive", ("archive", "t"))],
    ids=["rename", "set_schema"],
)
def test_a_table_renamed_to_a_name_not_captured_is_emptied_and_its_name_captured_again(
    postgres, pg_database, make_pg_capture, away, moved
):
    """Renamed while capture was stopped over a change of it: the truncate lands after that change.
    Rows written to the renamed table afterwards are not captured (its name is not); a table created
    under the old name later is captured as a new one."""
    postgres.execute(*T_AND_OTHER, "CREATE SCHEMA archive", database=pg_database)
    capture = make_pg_capture(["public.t", "public.other", "public.lt_marker"]).start()
    capture.wait_running()
    dump_table(capture, "t")
    change_and_land(postgres, pg_database, capture, "UPDATE t SET v = 0 WHERE id = 3")
    assert capture.stop() == 0
    moved_name = ".".join(moved)
    statements = ("INSERT INTO t VALUES (4, 4)", away, f"INSERT INTO {moved_name} VALUES (7, 7)")
    postgres.execute(*statements, database=pg_database)
    capture.start()
    capture.wait_running()
    change_and_land(postgres, pg_database, capture, "INSERT INTO other VALUES (1)")
    wait_for(lambda: _truncates(capture, "t"), 30, what="the truncate of t")
    assert any(e["after"] and e["after"]["id"] == 4 for e in capture.events("public", "t"))  # read before it
    state, _ = reconciled_state(capture, "public", "t")
    assert state == {}
    assert "capture.table_renamed_away" in capture.log()
    postgres.execute("CREATE TABLE t (id int PRIMARY KEY, v int)", database=pg_database)
    wait_for(lambda: "public.t" in published_tables(postgres, pg_database), 30, what="the new t published")
    change_and_land(
        postgres, pg_database, capture, "INSERT INTO t VALUES (10, 10)", f"INSERT INTO {moved_name} VALUES (8, 8)"
    )
    assert_target_holds_source(capture, postgres, pg_database, "t")
    assert not capture.events(*moved)
    assert _truncates_after_a_restart(postgres, pg_database, capture, 2) == 1
    assert_target_holds_source(capture, postgres, pg_database, "t")
    assert capture.stop() == 0


def test_a_table_only_dumped_dropped_twice_is_emptied_twice(postgres, pg_database, start_pg_capture):
    capture = start_pg_capture(*T_AND_OTHER)
    dump_table(capture, "t")
    postgres.execute("DROP TABLE t", database=pg_database)
    wait_for(lambda: _truncates(capture, "t"), 30, what="the first truncate of t")
    postgres.execute(
        "CREATE TABLE t (id int PRIMARY KEY, v int)",
        "INSERT INTO t SELECT i, i FROM generate_series(5, 6) i",
        database=pg_database,
    )
    wait_for(lambda: "public.t" in published_tables(postgres, pg_database), 30, what="the new t published")
    dump_table(capture, "t")  # still no change of t in the log
    wait_until_landed(postgres, pg_database, capture)
    assert_target_holds_source(capture, postgres, pg_database, "t")
    postgres.execute("DROP TABLE t", database=pg_database)
    wait_for(lambda: len(_truncates(capture, "t")) == 2, 30, what="the second truncate of t")
    state, _ = reconciled_state(capture, "public", "t")
    assert state == {}
    assert _truncates_after_a_restart(postgres, pg_database, capture, 1) == 2
    assert capture.stop() == 0


@pytest.mark.parametrize(
    "ddl",
    ["ALTER TABLE items ADD COLUMN flag int NOT NULL DEFAULT 5", "ALTER TABLE items RENAME COLUMN note TO label"],
    ids=["add_default", "rename"],
)
def test_ddl_on_a_table_only_dumped_stops_capture(postgres, pg_database, start_pg_capture, ddl):
    capture = start_pg_capture(
        "CREATE TABLE items (id int PRIMARY KEY, note text)",
        "INSERT INTO items SELECT i, 'n' || i FROM generate_series(1, 3) i",
    )
    dump_table(capture, "items")  # no change of items in the log yet
    postgres.execute(ddl, "INSERT INTO items (id) VALUES (10)", database=pg_database)
    log = _stops(capture)
    assert "ColumnRewriteError" in log and "public.items" in log
    assert not capture.events("public", "items")  # the change that revealed it did not land
    assert capture.run_to_exit() == 2  # restarted: the same


def test_a_column_added_without_default_to_a_dumped_table_passes(postgres, pg_database, start_pg_capture):
    capture = start_pg_capture(
        "CREATE TABLE items (id int PRIMARY KEY, note text)",
        "INSERT INTO items SELECT i, 'n' || i FROM generate_series(1, 3) i",
    )
    dump_table(capture, "items")
    change_and_land(
        postgres,
        pg_database,
        capture,
        "ALTER TABLE items ADD COLUMN extra int",
        "INSERT INTO items VALUES (10, 'x', 1)",
    )
    assert_target_holds_source(capture, postgres, pg_database, "items")
    assert capture.stop() == 0


def test_an_enum_value_renamed_stops_capture(postgres, pg_database, start_pg_capture):
    capture = start_pg_capture(
        "CREATE TYPE mood AS ENUM ('sad', 'ok')",
        "CREATE TABLE m (id int PRIMARY KEY, mood mood)",
        "INSERT INTO m VALUES (1, 'sad'), (2, 'ok')",
    )
    dump_table(capture, "m")
    change_and_land(
        postgres, pg_database, capture, "ALTER TYPE mood ADD VALUE 'happy'", "UPDATE m SET id = 3 WHERE id = 2"
    )
    postgres.execute("ALTER TYPE mood RENAME VALUE 'sad' TO 'blue'", database=pg_database)
    log = _stops(capture)
    assert "ColumnRewriteError" in log and "public.m" in log and "sad" in log and "blue" in log
    assert capture.run_to_exit() == 2  # restarted: the same

    text = capture.config_path.read_text().replace("include:", "column_rewrites: accept\n    include:")
    capture.config_path.write_text(text)
    capture.start()
    capture.wait_running()
    change_and_land(postgres, pg_database, capture, "UPDATE m SET id = 4 WHERE id = 3")
    assert capture.log().count("capture.column_rewrite_accepted") == 1
    dump_table(capture, "m")  # the dump it names repairs the target
    wait_until_landed(postgres, pg_database, capture)
    assert_target_holds_source(capture, postgres, pg_database, "m")
    assert capture.stop() == 0
    capture.start()  # accepted once: not again
    capture.wait_running()
    change_and_land(postgres, pg_database, capture, "UPDATE m SET id = 5 WHERE id = 4")
    assert capture.log().count("capture.column_rewrite_accepted") == 1
    assert capture.stop() == 0


def test_publish_via_partition_root_set_while_capture_runs_stops_it(postgres, pg_database, start_pg_capture):
    capture = start_pg_capture(
        "CREATE TABLE p (id int PRIMARY KEY, v int) PARTITION BY RANGE (id)",
        "CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (100)",
    )
    change_and_land(postgres, pg_database, capture, "INSERT INTO p VALUES (1, 1)")
    postgres.execute(
        "ALTER PUBLICATION logtide_src SET (publish_via_partition_root = true)",
        "INSERT INTO p VALUES (2, 2)",
        database=pg_database,
    )
    log = _stops(capture)
    assert "publish_via_partition_root" in log, log
    assert not capture.events("public", "p")  # nothing landed under the partitioned table's name


@pytest.mark.parametrize(
    "statement",
    ["ALTER PUBLICATION logtide_src DROP TABLE t", "ALTER PUBLICATION logtide_src SET TABLE other"],
    ids=["drop_table", "set_table"],
)
def test_a_table_dropped_from_the_publication_is_added_back_with_a_warning(
    postgres, pg_database, start_pg_capture, statement
):
    """Checked on main too: the sync adds it back and names the dump (its changes meanwhile are in no log)."""
    capture = start_pg_capture("CREATE TABLE t (id int PRIMARY KEY, v int)", "CREATE TABLE other (id int PRIMARY KEY)")
    change_and_land(postgres, pg_database, capture, "INSERT INTO t VALUES (1, 1)")
    postgres.execute(statement, database=pg_database)
    wait_for(lambda: "public.t" in published_tables(postgres, pg_database), 30, what="t added back")
    assert "logtide dump --source src --table public.t" in capture.log()  # its changes meanwhile: not in the log
    assert capture.stop() == 0


def test_a_table_with_rows_attached_as_a_partition_is_named_with_its_dump(postgres, pg_database, make_pg_capture):
    """Only the partitioned table is captured: a table attached to it is published with it at once (no
    ALTER PUBLICATION), and its rows are in no log. On main nothing said so: its target lacked them.
    Detached again, it is no longer captured: said so too (on main its target stopped following it
    without a word)."""
    postgres.execute(
        "CREATE TABLE m (id int PRIMARY KEY, v int) PARTITION BY RANGE (id)",
        "CREATE TABLE m1 PARTITION OF m FOR VALUES FROM (0) TO (100)",
        "CREATE TABLE x (id int PRIMARY KEY, v int)",
        "INSERT INTO x SELECT i, i FROM generate_series(200, 210) i",
        database=pg_database,
    )
    capture = make_pg_capture(["public.m", "public.lt_marker"]).start()
    capture.wait_running()
    change_and_land(
        postgres,
        pg_database,
        capture,
        "ALTER TABLE m ATTACH PARTITION x FOR VALUES FROM (200) TO (300)",
        "INSERT INTO m VALUES (250, 250)",
    )
    wait_for(lambda: "publication.partition_added" in capture.log(), 30, what="the warning")
    assert "logtide dump --source src --table public.x" in capture.log()
    dump_table(capture, "x")  # the dump it names brings the rows
    wait_until_landed(postgres, pg_database, capture)
    assert_target_holds_source(capture, postgres, pg_database, "x")
    # detached: no longer captured (include names m only), said so
    postgres.execute("ALTER TABLE m DETACH PARTITION x", database=pg_database)
    wait_for(lambda: "publication.partition_detached" in capture.log(), 30, what="the detach named")
    assert "table=public.x" in capture.log().split("publication.partition_detached")[1].splitlines()[0]
    assert capture.stop() == 0


def test_a_dumped_table_whose_chunk_landed_late_is_still_watched(postgres, pg_database, start_pg_capture):
    """A dump's table folder was there, its chunk not yet (renamed in seconds later, while the dump
    folder did not change again): on main the name was looked at once, found without a chunk and never
    again, so a later DROP of the table (rows only dumped) landed no truncate."""
    capture = start_pg_capture(*T_AND_OTHER)
    dump_table(capture, "t")
    assert capture.stop() == 0
    folder = next((capture.zone.root / "chunks").glob("*/public.t"))
    aside = capture.zone.root.parent / "aside"
    aside.mkdir()
    for path in folder.iterdir():
        path.rename(aside / path.name)
    capture.start()
    capture.wait_running()
    time.sleep(2 * CHECK_S + DumpedTables.RACY_S)  # the empty folder looked through, and its listing settled
    for path in aside.iterdir():  # the chunks land in the folder: the dump folder's mtime stays
        path.rename(folder / path.name)
    time.sleep(2 * CHECK_S)
    postgres.execute("DROP TABLE t", database=pg_database)
    wait_for(lambda: _truncates(capture, "t"), 30, what="the truncate of t")
    state, _ = reconciled_state(capture, "public", "t")
    assert state == {}
    assert capture.stop() == 0


RENAME_DANCE = (  # renamed away and back, with changes made under the name not captured
    "ALTER TABLE t RENAME TO t_tmp",
    "UPDATE t_tmp SET v = 100 WHERE id = 1",
    "INSERT INTO t_tmp VALUES (5, 5)",
    "DELETE FROM t_tmp WHERE id = 2",
    "ALTER TABLE t_tmp RENAME TO t",
)


@pytest.mark.parametrize("running", [True, False], ids=["running", "stopped"])
def test_changes_made_while_renamed_away_and_back_land(postgres, pg_database, make_pg_capture, running):
    """Renamed away and back within one watcher round (in one transaction while capture runs, so no round
    falls between; separately while capture is stopped): the changes made under the other name are the
    table's. On main they were dropped (its Relation message named a table not captured), and the target
    kept the old rows."""
    postgres.execute(*T_AND_OTHER, database=pg_database)
    capture = make_pg_capture(["public.t", "public.other", "public.lt_marker"]).start()
    capture.wait_running()
    dump_table(capture, "t")
    change_and_land(postgres, pg_database, capture, "UPDATE t SET v = 0 WHERE id = 3")
    if running:
        postgres.execute("; ".join(RENAME_DANCE), database=pg_database)  # one implicit transaction
    else:
        assert capture.stop() == 0
        postgres.execute(*RENAME_DANCE, database=pg_database)
        capture.start()
        capture.wait_running()
    change_and_land(postgres, pg_database, capture, "UPDATE t SET v = 7 WHERE id = 3", "INSERT INTO other VALUES (1)")
    assert_target_is_source(capture, postgres, pg_database, "t")
    assert not _truncates(capture, "t")
    assert capture.stop() == 0


@pytest.mark.parametrize("publication", [(), ("CREATE PUBLICATION logtide_src FOR ALL TABLES",)], ids=["list", "all"])
def test_a_table_renamed_away_is_not_captured_under_its_name_after_its_truncate(
    postgres, pg_database, make_pg_capture, publication
):
    """A change made under the other name before the watcher saw the rename lands as the name's (its
    Relation message comes once, unless a round fell between the two statements); after the truncate
    the relation's changes, which come without a new Relation message, are not the name's. With a
    publication of all tables they keep coming (capture's own publication sync takes the renamed table
    out)."""
    postgres.execute(*T_AND_OTHER, *publication, database=pg_database)
    capture = make_pg_capture(["public.t", "public.other", "public.lt_marker"]).start()
    capture.wait_running()
    dump_table(capture, "t")
    change_and_land(postgres, pg_database, capture, "UPDATE t SET v = 0 WHERE id = 3")
    # two transactions: a DDL transaction's invalidations make pgoutput send the Relation message again
    postgres.execute("ALTER TABLE t RENAME TO t_tmp", "UPDATE t_tmp SET v = 100 WHERE id = 1", database=pg_database)
    wait_for(lambda: _truncates(capture, "t"), 30, what="the truncate of t")
    change_and_land(
        postgres,
        pg_database,
        capture,
        "INSERT INTO t_tmp VALUES (20, 20)",
        "UPDATE t_tmp SET v = 5 WHERE id = 2",
        "INSERT INTO other VALUES (1)",
    )
    state, _ = reconciled_state(capture, "public", "t")
    assert state == {}
    assert not capture.events("public", "t_tmp")
    assert capture.stop() == 0


def test_a_table_renamed_away_whose_name_another_table_took_is_not_captured_under_it(
    postgres, pg_database, make_pg_capture
):
    """Before a round sees the rename, another table is renamed onto the name (a publication of all
    tables: its changes come at once): the first relation's later changes, without a new Relation
    message, are not the name's any more."""
    postgres.execute(
        *T_AND_OTHER,
        "CREATE TABLE u (id int PRIMARY KEY, v int)",
        "CREATE PUBLICATION logtide_src FOR ALL TABLES",
        database=pg_database,
    )
    capture = make_pg_capture(["public.t", "public.other", "public.lt_marker"]).start()
    capture.wait_running()
    dump_table(capture, "t")
    change_and_land(postgres, pg_database, capture, "UPDATE t SET v = 0 WHERE id = 3")
    postgres.execute(
        "ALTER TABLE t RENAME TO t_tmp",
        "UPDATE t_tmp SET v = 100 WHERE id = 1",
        "ALTER TABLE u RENAME TO t",
        "INSERT INTO t VALUES (10, 10)",
        "INSERT INTO t_tmp VALUES (20, 20)",
        database=pg_database,
    )
    change_and_land(postgres, pg_database, capture, "INSERT INTO other VALUES (1)")
    assert not [e for e in capture.events("public", "t") if (e["after"] or {}).get("id") == 20]
    dump_table(capture, "t")  # the dump capture.table_replaced names
    wait_until_landed(postgres, pg_database, capture)
    assert_target_is_source(capture, postgres, pg_database, "t")
    assert capture.stop() == 0


def test_a_partition_attached_while_capture_is_stopped_is_listed_not_converged(postgres, pg_database, make_pg_capture):
    """A table with rows attached to a captured partitioned table while capture is stopped is published
    with it at once, and its rows are in no log, as when attached while capture runs. On main that case
    was listed by `logtide status` (not converged) and this one not: the first sync of a run compared the
    partitions with nothing. Now it compares with what the last run covered (`covered.json`)."""
    from capture.config import load_config
    from capture.status import source_status

    postgres.execute(
        "CREATE TABLE m (id int PRIMARY KEY, v int) PARTITION BY RANGE (id)",
        "CREATE TABLE m1 PARTITION OF m FOR VALUES FROM (0) TO (100)",
        "CREATE TABLE x (id int PRIMARY KEY, v int)",
        "INSERT INTO x SELECT i, i FROM generate_series(200, 210) i",
        database=pg_database,
    )
    capture = make_pg_capture(["public.m", "public.lt_marker"]).start()
    capture.wait_running()
    assert capture.stop() == 0
    postgres.execute("ALTER TABLE m ATTACH PARTITION x FOR VALUES FROM (200) TO (300)", database=pg_database)
    capture.start()
    capture.wait_running()
    time.sleep(5)  # a few watcher rounds
    report = source_status(load_config(capture.config_path), "src")
    assert capture.stop() == 0
    assert "public.x" in [t["table"] for t in report["not_converged"]]
