"""Tables whose changes PostgreSQL does not (fully) put in the logical log: their targets must not
diverge from the source in silence. Each case either reconciles to the source or is refused,
naming the table and what to do.

- REPLICA IDENTITY USING INDEX on a unique index that does not hold the table's key (the primary
  key): a DELETE carries the index's columns only, and an UPDATE of the key that leaves the index's
  columns alone carries no old key at all, so the log cannot say which key a row left.
- UNLOGGED tables: PostgreSQL writes no WAL for their changes, so no log carries them; a dump
  would land their rows once and the target would then never change.
"""

from __future__ import annotations

import pytest

from capture.dump.control import DumpSettings
from capture.dump.engine import DumpEngine, DumpRequest
from capture.errors import UnusableTableError
from capture.sources import open_chunk_source
from tests.integration.dumping import AlterAt
from tests.integration.postgres.dumping import (
    assert_target_holds_source,
    assert_target_is_source,
    change_and_land,
    dump_table,
    published_tables,
    reconciled_state,
    table_state,
    wait_until_landed,
)
from tests.servers import wait_for

pytestmark = pytest.mark.integration


def test_an_identity_index_without_the_key_is_refused_not_diverged(postgres, pg_database, start_pg_capture):
    capture = start_pg_capture(
        "CREATE TABLE accounts (id int PRIMARY KEY, email text NOT NULL UNIQUE, v int)",
        "INSERT INTO accounts SELECT i, 'u' || i, i FROM generate_series(1, 6) i",
        "ALTER TABLE accounts REPLICA IDENTITY USING INDEX accounts_email_key",
        # the identity index holds the key: its DELETEs and key changes carry the key
        "CREATE TABLE orders (id int NOT NULL, line int NOT NULL, v int, PRIMARY KEY (id))",
        "CREATE UNIQUE INDEX orders_id_line ON orders (id, line)",
        "ALTER TABLE orders REPLICA IDENTITY USING INDEX orders_id_line",
        "INSERT INTO orders SELECT i, i, i FROM generate_series(1, 6) i",
    )
    try:
        dump_table(capture, "accounts")
    except UnusableTableError as exc:  # refused: named, with what to do
        assert exc.table == "public.accounts"
        assert "REPLICA IDENTITY USING INDEX" in exc.reason and "(email)" in exc.reason and "(id)" in exc.reason
        assert 'ALTER TABLE "public"."accounts" REPLICA IDENTITY DEFAULT' in exc.fix
        assert "public.accounts" not in published_tables(postgres, pg_database)
        line = next(x for x in capture.log().splitlines() if "publication.table_left_out" in x and "accounts" in x)
        assert "REPLICA IDENTITY DEFAULT" in line
    else:  # or it reconciles to the source
        change_and_land(
            postgres,
            pg_database,
            capture,
            "UPDATE accounts SET id = 10 WHERE id = 1",  # key change, identity columns untouched: no old key
            "DELETE FROM accounts WHERE id = 2",  # old image: email only
        )
        assert_target_is_source(capture, postgres, pg_database, "accounts")
    dump_table(capture, "orders")
    change_and_land(
        postgres, pg_database, capture, "UPDATE orders SET id = 10 WHERE id = 1", "DELETE FROM orders WHERE id = 2"
    )
    assert_target_is_source(capture, postgres, pg_database, "orders")

    # set while capture streams: taken out by the next sync and refused by dumps from then on
    postgres.execute(
        "CREATE UNIQUE INDEX orders_line ON orders (line)",
        "ALTER TABLE orders REPLICA IDENTITY USING INDEX orders_line",
        database=pg_database,
    )
    wait_for(lambda: "public.orders" not in published_tables(postgres, pg_database), 30, what="orders taken out")
    with pytest.raises(UnusableTableError, match="REPLICA IDENTITY USING INDEX"):
        dump_table(capture, "orders")
    assert capture.stop() == 0


def test_an_unlogged_table_is_refused_and_breaks_nothing_else(postgres, pg_database, start_pg_capture):
    capture = start_pg_capture(
        "CREATE UNLOGGED TABLE cache (id int PRIMARY KEY, v int)",
        "INSERT INTO cache SELECT i, i FROM generate_series(1, 5) i",
        "CREATE TABLE keyed (id int PRIMARY KEY, v int)",
    )
    published = published_tables(postgres, pg_database)
    assert "public.keyed" in published and "public.cache" not in published
    line = next(x for x in capture.log().splitlines() if "publication.table_left_out" in x and "cache" in x)
    assert "UNLOGGED" in line and "SET LOGGED" in line
    with pytest.raises(UnusableTableError, match="UNLOGGED") as refused:
        dump_table(capture, "cache")
    assert refused.value.table == "public.cache" and "SET LOGGED" in refused.value.fix
    # the publication still follows the other tables: one created later is published and dumped
    postgres.execute(
        "CREATE TABLE later (id int PRIMARY KEY, v int)",
        "INSERT INTO later SELECT i, i FROM generate_series(1, 5) i",
        database=pg_database,
    )
    wait_for(lambda: "public.later" in published_tables(postgres, pg_database), 30, what="later published")
    dump_table(capture, "later")
    change_and_land(
        postgres, pg_database, capture, "UPDATE later SET v = -v WHERE id < 3", "DELETE FROM later WHERE id = 5"
    )
    assert_target_is_source(capture, postgres, pg_database, "later")

    # SET LOGGED: from then on the log carries it; published by the next sync, then dumped
    postgres.execute("ALTER TABLE cache SET LOGGED", database=pg_database)
    wait_for(lambda: "public.cache" in published_tables(postgres, pg_database), 30, what="cache published")
    added = "event=publication.table_added source=src publication=logtide_src table=public.cache"
    wait_for(lambda: added in capture.log(), 10, what="the publication.table_added line")
    assert "logtide dump --source src --table public.cache" in next(x for x in capture.log().splitlines() if added in x)
    dump_table(capture, "cache")
    change_and_land(
        postgres, pg_database, capture, "UPDATE cache SET v = 0 WHERE id = 1", "DELETE FROM cache WHERE id = 2"
    )
    assert_target_is_source(capture, postgres, pg_database, "cache")
    assert capture.stop() == 0


def test_an_unlogged_table_under_a_publication_of_all_tables_is_refused(postgres, pg_database, start_pg_capture):
    """PostgreSQL leaves unlogged tables out of a FOR ALL TABLES publication without a word; a dump
    must not land rows whose changes will never come."""
    capture = start_pg_capture(
        "CREATE UNLOGGED TABLE cache (id int PRIMARY KEY, v int)",
        "INSERT INTO cache SELECT i, i FROM generate_series(1, 5) i",
        "CREATE PUBLICATION logtide_src FOR ALL TABLES",
    )
    try:
        dump_table(capture, "cache")
    except UnusableTableError as exc:
        assert exc.table == "public.cache" and "UNLOGGED" in exc.reason and "SET LOGGED" in exc.fix
    else:
        change_and_land(
            postgres, pg_database, capture, "UPDATE cache SET v = 0 WHERE id = 1", "DELETE FROM cache WHERE id = 2"
        )
        assert_target_is_source(capture, postgres, pg_database, "cache")
    assert capture.stop() == 0


def test_a_deferrable_key_swapped_in_one_statement(postgres, pg_database, start_pg_capture):
    """A DEFERRABLE unique constraint lets one statement swap keys (`SET id = 3 - id`); pgoutput sends
    it as two key changes, 1 -> 2 then 2 -> 1, whose second's old key 2 is the row that was there
    before, not the one the first made: replayed in order the second deletes the first's row."""
    capture = start_pg_capture(
        "CREATE TABLE ranks (id int PRIMARY KEY DEFERRABLE, v text)",
        "ALTER TABLE ranks REPLICA IDENTITY FULL",  # a deferrable key is no replica identity
        "INSERT INTO ranks VALUES (1, 'a'), (2, 'b'), (3, 'c')",
        "CREATE TABLE slots (id int NOT NULL, pos int NOT NULL, v text, UNIQUE (pos) DEFERRABLE INITIALLY DEFERRED)",
        "ALTER TABLE slots REPLICA IDENTITY FULL",
        "INSERT INTO slots VALUES (1, 1, 'a'), (2, 2, 'b'), (3, 3, 'c')",
    )
    refused = set()
    for table in ("ranks", "slots"):
        try:
            dump_table(capture, table)
        except UnusableTableError as exc:
            assert exc.table == f"public.{table}" and "DEFERRABLE" in exc.reason, exc
            refused.add(table)
    change_and_land(
        postgres,
        pg_database,
        capture,
        "UPDATE ranks SET id = 3 - id WHERE id < 3",
        "UPDATE slots SET pos = 3 - pos WHERE pos < 3",
    )
    for table, key in (("ranks", ("id",)), ("slots", ("pos",))):
        if table not in refused:
            assert_target_is_source(capture, postgres, pg_database, table, key)
    assert capture.stop() == 0


def test_a_deferrable_primary_key_is_no_replica_identity(postgres, pg_database, start_pg_capture):
    """PostgreSQL does not take a DEFERRABLE primary key as replica identity: published, the table's
    UPDATEs and DELETEs fail in the application, so capture must leave it out."""
    capture = start_pg_capture(
        "CREATE TABLE ranks (id int PRIMARY KEY DEFERRABLE, v int)",
        "INSERT INTO ranks VALUES (1, 1), (2, 2)",
    )
    postgres.execute("UPDATE ranks SET v = 3", "DELETE FROM ranks WHERE id = 2", database=pg_database)
    assert "public.ranks" not in published_tables(postgres, pg_database)
    line = next(x for x in capture.log().splitlines() if "publication.table_left_out" in x and "ranks" in x)
    assert 'ALTER TABLE \\"public\\".\\"ranks\\" REPLICA IDENTITY FULL' in line
    assert capture.stop() == 0


def test_ddl_that_changes_rows_without_row_events_is_named_with_the_dump_that_repairs_it(
    postgres, pg_database, start_pg_capture
):
    """ADD COLUMN ... DEFAULT, RENAME COLUMN, ALTER COLUMN TYPE ... USING and RENAME TABLE change what
    every row reads without one row event: the targets keep NULL, or the old value, or the old
    name, for rows not changed since. Capture cannot know the rows: by default it stops
    (test_pg_table_ddl.py); accepted, it names the table and the dump that repairs it, and that
    dump does."""
    capture = start_pg_capture(
        "CREATE TABLE items (id int PRIMARY KEY, v int, note text)",
        "INSERT INTO items SELECT i, i, 'n' || i FROM generate_series(1, 6) i",
        "CREATE TABLE plain (id int PRIMARY KEY, v int)",
        "INSERT INTO plain SELECT i, i FROM generate_series(1, 3) i",
        "CREATE TABLE old_name (id int PRIMARY KEY, v int)",
        "INSERT INTO old_name SELECT i, i FROM generate_series(1, 3) i",
        column_rewrites="accept",
        table_renames="accept",
    )
    for table in ("items", "plain", "old_name"):
        dump_table(capture, table)
    # a change first, so that capture knows each table before the DDL
    change_and_land(
        postgres,
        pg_database,
        capture,
        "UPDATE items SET v = 0 WHERE id = 6",
        "UPDATE plain SET v = 0 WHERE id = 3",
        "UPDATE old_name SET v = 0 WHERE id = 3",
    )
    change_and_land(
        postgres,
        pg_database,
        capture,
        "ALTER TABLE items ADD COLUMN flag int NOT NULL DEFAULT 7",
        "ALTER TABLE items RENAME COLUMN note TO label",
        "ALTER TABLE items ALTER COLUMN v TYPE bigint USING v * 10",
        "UPDATE items SET v = -1 WHERE id = 1",
        "ALTER TABLE plain ADD COLUMN extra int",  # NULL in every row: the targets agree, nothing to say
        "UPDATE plain SET v = -1 WHERE id = 1",
        "ALTER TABLE old_name RENAME TO new_name",
        "UPDATE new_name SET v = -1 WHERE id = 1",
    )
    lines = [x for x in capture.log().splitlines() if "capture.column_rewrite_accepted" in x]
    assert len(lines) == 1, lines
    items = lines[0]
    assert "table=public.items" in items
    assert "flag" in items and "label" in items and "v integer -> bigint" in items
    assert "logtide dump --source src --table public.items" in items
    renamed = next(x for x in capture.log().splitlines() if "capture.table_rename_accepted" in x)
    assert "public.old_name" in renamed and "logtide dump --source src --table public.new_name" in renamed
    assert not any("table=public.plain" in x for x in lines)
    # the dump it names brings the targets back to the source; the old name's target is emptied
    for table in ("items", "new_name"):
        dump_table(capture, table)
    wait_until_landed(postgres, pg_database, capture)
    for table in ("items", "new_name", "plain"):
        # a target holds every column, NULL where no event or chunk carried one; dropped ones stay
        assert_target_holds_source(capture, postgres, pg_database, table)
    assert reconciled_state(capture, "public", "old_name")[0] == {}
    assert capture.stop() == 0


def test_prepared_subtransaction_heavy_and_savepoint_transactions_across_a_dump(
    postgres, pg_database, start_pg_capture
):
    """Transactions open across chunks' snapshots in the shapes that could fool the visibility rule
    (capture/sources/postgres/read_view.py) or the log's order: two-phase commits prepared before the
    dump and committed between a chunk's LOW and its SELECT or between its SELECT and HIGH; a
    transaction of 80 subtransactions (past the 64 a snapshot holds: suboverflow) with key changes,
    committed mid-dump; savepoints rolled back over key changes; DELETE then INSERT of one key."""
    capture = start_pg_capture(
        "CREATE TABLE ledger (id int PRIMARY KEY, v int)",
        "INSERT INTO ledger SELECT i, i FROM generate_series(1, 200) i",
    )
    postgres.execute(
        "BEGIN; UPDATE ledger SET v = -1 WHERE id IN (5, 50, 185); DELETE FROM ledger WHERE id = 60;"
        " UPDATE ledger SET id = 1060 WHERE id = 70; PREPARE TRANSACTION 'p1'",
        "BEGIN; UPDATE ledger SET v = -2 WHERE id IN (21, 95, 190); UPDATE ledger SET id = 1010 WHERE id = 10;"
        " PREPARE TRANSACTION 'p2'",
        database=pg_database,
    )
    heavy = postgres.connect(pg_database, autocommit=False)
    with heavy.cursor() as cur:  # open across several chunks: 80 subtransactions, each with a change
        for i in range(80):
            cur.execute(f"SAVEPOINT s{i}")
            cur.execute("UPDATE ledger SET v = v + 1000 WHERE id = %s", (100 + i,))
        cur.execute("UPDATE ledger SET id = 2000 WHERE id = 199")
        cur.execute("SAVEPOINT undone")
        cur.execute("UPDATE ledger SET id = 3000 WHERE id = 198")
        cur.execute("DELETE FROM ledger WHERE id = 197")
        cur.execute("ROLLBACK TO SAVEPOINT undone")
        cur.execute("DELETE FROM ledger WHERE id = 196")
        cur.execute("INSERT INTO ledger VALUES (196, -196)")

    def execute(sql: str) -> None:
        if sql == "heavy":
            heavy.commit()
        else:
            postgres.execute(sql, database=pg_database)

    source = open_chunk_source("src", capture.config.source("src"))
    alter = AlterAt(source, execute)
    alter.at(2, "HIGH", "COMMIT PREPARED 'p2'")  # after chunk 2's SELECT: its rows are stale
    alter.at(4, "LOW", "COMMIT PREPARED 'p1'")  # between LOW and the SELECT
    alter.at(6, "HIGH", "heavy")
    try:
        DumpEngine(alter, capture.zone).run(DumpRequest(tables=["public.ledger"], settings=DumpSettings(chunk_size=20)))
    finally:
        source.close()
        heavy.close()
    wait_until_landed(postgres, pg_database, capture)
    state, _ = reconciled_state(capture, "public", "ledger")
    source_rows = table_state(postgres, pg_database, "ledger")
    assert source_rows[(2000,)]["v"] == 199 and (198,) in source_rows and (197,) in source_rows
    assert state == source_rows
    assert capture.stop() == 0


def test_an_array_of_a_type_with_another_delimiter_lands_its_elements(postgres, pg_database, start_pg_capture):
    """box separates array elements with ';' (pg_type.typdelim): '{(1,1),(0,0);(2,2),(1,1)}' holds two
    boxes, whose own commas are no delimiters. Split at ',' it landed as three strings on both paths
    (so log and dump agreed with each other, not with the source)."""
    capture = start_pg_capture(
        "CREATE TABLE shapes (id int PRIMARY KEY, boxes box[], points point[])",
        "INSERT INTO shapes VALUES (1, '{(1,1),(0,0);(2,2),(1,1)}', '{\"(1,2)\",\"(3,4)\"}')",
    )
    dump_table(capture, "shapes")
    postgres.execute(
        "INSERT INTO shapes VALUES (2, ARRAY[box '(5,5),(4,4)', NULL, box '(1,2),(0,1)'], '{}')", database=pg_database
    )
    wait_until_landed(postgres, pg_database, capture)
    expected = {
        (id_,): (boxes, points)
        for id_, boxes, points in postgres.query(
            "SELECT id, ARRAY(SELECT b::text FROM unnest(boxes) b), ARRAY(SELECT p::text FROM unnest(points) p)"
            " FROM shapes",
            database=pg_database,
        )
    }
    assert expected[(1,)][0] == ["(1,1),(0,0)", "(2,2),(1,1)"]
    logged = capture.wait_events("public", "shapes", 1)[0]["after"]
    assert logged["boxes"] == expected[(2,)][0]
    state, _ = reconciled_state(capture, "public", "shapes")
    assert {k: (r["boxes"], r["points"]) for k, r in state.items()} == expected
    assert capture.stop() == 0


def test_a_table_renamed_between_chunks_stops_its_dump_with_its_name(postgres, pg_database, start_pg_capture):
    """RENAME TABLE while a dump is between chunks: the next chunk would read nothing under the old
    name; the dump must stop and say so, not finish with the rows read so far as if complete."""
    capture = start_pg_capture(
        "CREATE TABLE ledger (id int PRIMARY KEY, v int)",
        "INSERT INTO ledger SELECT i, i FROM generate_series(1, 100) i",
    )
    source = open_chunk_source("src", capture.config.source("src"))
    alter = AlterAt(source, lambda sql: postgres.execute(sql, database=pg_database))
    alter.at(2, "HIGH", "ALTER TABLE ledger RENAME TO ledger_v2")
    try:
        with pytest.raises(Exception, match=r'relation "public\.ledger" does not exist'):
            DumpEngine(alter, capture.zone).run(
                DumpRequest(tables=["public.ledger"], settings=DumpSettings(chunk_size=20))
            )
    finally:
        source.close()
    assert capture.stop() == 0


def test_an_unlogged_partition_of_a_published_partitioned_table_is_refused(postgres, pg_database, start_pg_capture):
    capture = start_pg_capture(
        "CREATE TABLE m (id int PRIMARY KEY, v int) PARTITION BY RANGE (id)",
        "CREATE TABLE m1 PARTITION OF m FOR VALUES FROM (0) TO (100)",
        "CREATE UNLOGGED TABLE m2 PARTITION OF m FOR VALUES FROM (100) TO (200)",
        "INSERT INTO m SELECT i, i FROM generate_series(90, 110) i",
    )
    dump_table(capture, "m1")
    try:
        dump_table(capture, "m2")
    except UnusableTableError as exc:
        assert exc.table == "public.m2" and "UNLOGGED" in exc.reason and "SET LOGGED" in exc.fix
    else:
        change_and_land(postgres, pg_database, capture, "UPDATE m SET v = 0 WHERE id IN (95, 105)")
        for table in ("m1", "m2"):
            assert_target_is_source(capture, postgres, pg_database, table)
    assert capture.stop() == 0
