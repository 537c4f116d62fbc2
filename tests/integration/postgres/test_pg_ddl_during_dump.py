"""DDL during a chunked dump of PostgreSQL, with capture running (README: Dumps, DDL during a dump).

PostgreSQL logs no row for DDL that gives every existing row a new value (ADD COLUMN ... DEFAULT, a
volatile DEFAULT, ALTER COLUMN ... TYPE ... USING, RENAME COLUMN). Chunks a dump read before such a DDL
hold the old values; on main the dump went on after them (it read only the chunk the DDL came in again),
so those rows kept NULL or their old values in the targets, and capture, which judges a table whose rows
came only from dumps against its newest chunk (already read with the new columns), said nothing: silent
divergence. A `USING` that keeps the type name changed no column at all, so not even that chunk was read
again. Now the dump reads the table again from its start (`dump.table_restarted`) when the table changes
that way under it (columns added with a value, retyped, renamed; a new key or key order; its storage
rewritten: pg_attribute's xmin), also when a dump killed before the DDL is resumed after it, while a column added
without a DEFAULT, a dropped column or a longer varchar reads on without it. Both watermark modes; the
DDL between two chunks (right after LOW, before the SELECT) or inside a chunk's window (right before
HIGH, after the SELECT).
"""

from __future__ import annotations

import json
import logging

import pyarrow.parquet as pq
import pytest

from capture.dump.control import DumpSettings
from capture.dump.engine import DumpEngine, DumpRequest
from capture.errors import DumpInputError
from capture.landing.chunks import read_chunk_meta
from capture.landing.reader import chunk_files
from capture.sources import open_chunk_source
from tests.integration.dumping import (
    AlterAt,
    Died,
    DiesBeforeHigh,
    edit_progress,
    open_engine,
    reconciled_state,
    run_dump,
)
from tests.integration.postgres.dumping import (
    Workload,
    assert_target_holds_source,
    change_and_land,
    wait_until_landed,
)

pytestmark = pytest.mark.integration

ROWS, CHUNK = 200, 20  # ten chunks: the DDL comes at chunk 4


def _capture(postgres, pg_database: str, make_pg_capture, watermarks: str, **options):
    """`ledger` (ids 1..ROWS, written before capture started: only a dump has them) and a running capture."""
    postgres.execute(
        "CREATE TABLE ledger (id int PRIMARY KEY, v int, note varchar(20))",
        f"INSERT INTO ledger SELECT i, i % 100, 'row' || i FROM generate_series(1, {ROWS}) i",
        database=pg_database,
    )
    if watermarks == "readonly":  # writes nothing: an administrator publishes the table
        postgres.execute("CREATE PUBLICATION logtide_src FOR TABLE ledger", database=pg_database)
    capture = make_pg_capture(watermarks=watermarks, **options).start()
    capture.wait_running()
    return capture


def _dump(capture, postgres, pg_database: str, where: tuple[int, str] | None, *ddl: str, dump_id: str = "d", wrap=None):
    """Dump `ledger` in CHUNK-row chunks, running `ddl` at `where` (chunk, "LOW" or "HIGH")."""
    source = open_chunk_source("src", capture.config.source("src"))
    alter = AlterAt(source, lambda _: postgres.execute(*ddl, database=pg_database))
    if where is not None:
        alter.at(*where, "ddl")
    try:
        request = DumpRequest(dump_id=dump_id, tables=["public.ledger"], settings=DumpSettings(chunk_size=CHUNK))
        return DumpEngine(wrap(alter) if wrap else alter, capture.zone).run(request)
    finally:
        source.close()


REWRITES = {
    "add_default": "ALTER TABLE ledger ADD COLUMN extra int NOT NULL DEFAULT 5",
    "add_volatile_default": "ALTER TABLE ledger ADD COLUMN extra float8 DEFAULT random()",
    "rename_column": "ALTER TABLE ledger RENAME COLUMN note TO label",
    "retype_using": "ALTER TABLE ledger ALTER COLUMN v TYPE int USING v * 2",  # the same type: no column changes
    "text_using": "ALTER TABLE ledger ALTER COLUMN note TYPE varchar(20) USING upper(note)",
    "int_to_bigint": "ALTER TABLE ledger ALTER COLUMN v TYPE bigint USING v + 1",
    # a longer varchar reads alike, but its pg_attribute row is written as by a USING (audit): read again
    "longer_using": "ALTER TABLE ledger ALTER COLUMN note TYPE varchar(40) USING upper(note)",
    "add_and_using": "ALTER TABLE ledger ADD COLUMN x int, ALTER COLUMN v TYPE int USING v * 2",
    "longer_varchar": "ALTER TABLE ledger ALTER COLUMN note TYPE varchar(40)",  # needless, not told from a USING
}


@pytest.mark.parametrize(
    ("ddl", "watermarks", "where"),
    [
        ("add_default", "table", "LOW"),
        ("add_default", "readonly", "HIGH"),
        ("add_volatile_default", "table", "HIGH"),
        ("rename_column", "readonly", "LOW"),
        ("retype_using", "table", "HIGH"),
        ("retype_using", "readonly", "LOW"),
        ("text_using", "table", "LOW"),
        ("int_to_bigint", "readonly", "HIGH"),
        ("longer_using", "table", "LOW"),
        ("add_and_using", "readonly", "HIGH"),
        ("longer_varchar", "table", "LOW"),
    ],
)
def test_a_ddl_that_rewrites_rows_during_the_dump_of_a_quiet_table_converges(
    postgres, pg_database, make_pg_capture, caplog, ddl, watermarks, where
):
    """No change of the table is in the log before the DDL (its rows came from the dump only): on main the
    rows of chunks 1-3 (and of chunk 4 where the DDL came inside its window) kept their old values or NULL,
    and capture passed the table's next change, its newest chunk already showing the new columns."""
    capture = _capture(postgres, pg_database, make_pg_capture, watermarks)
    with caplog.at_level(logging.INFO):
        summary = _dump(capture, postgres, pg_database, (4, where), REWRITES[ddl])
    change_and_land(postgres, pg_database, capture, "UPDATE ledger SET v = v + 1 WHERE id = 7")
    assert capture.process.poll() is None, capture.log()
    assert_target_holds_source(capture, postgres, pg_database, "ledger")
    assert "dump.table_restarted" in caplog.text
    assert summary["tables"][0]["chunks"] > ROWS // CHUNK  # chunks 1.. read again, numbers going on
    assert capture.stop() == 0


@pytest.mark.parametrize(("watermarks", "where"), [("table", "LOW"), ("readonly", "HIGH")])
def test_a_key_retyped_to_another_order_during_the_dump_is_read_whole_again(
    postgres, pg_database, make_pg_capture, watermarks, where
):
    """`id` int -> text at chunk 4: text orders '100' before '20', so on main the chunks after it
    (`id > '60'` in text order) skipped the 101 keys from 100 to 200, which no event brings to a quiet
    table. Now the table is read again from its start in the new order: the chunks read since hold
    every key. (The targets then hold the keys of chunks 1-3 as integers too: a key column that
    changes its type needs a new target, README: Dumps, DDL during a dump.)"""
    capture = _capture(postgres, pg_database, make_pg_capture, watermarks)
    summary = _dump(capture, postgres, pg_database, (4, where), "ALTER TABLE ledger ALTER COLUMN id TYPE text")
    files = sorted(chunk_files(capture.zone, "public", "ledger"), key=lambda p: read_chunk_meta(p).chunk)
    since = [read_chunk_meta(p) for p in files]
    texts = [p for p, meta in zip(files, since, strict=True) if meta.chunk >= 4]
    keys = [k for p in texts for k in pq.read_table(p).column("after").combine_chunks().field("id").to_pylist()]
    assert sorted(keys) == sorted(str(i) for i in range(1, ROWS + 1))
    assert summary["tables"][0]["chunks"] == 3 + ROWS // CHUNK + 1
    capture.stop()


def test_a_key_retyped_during_a_key_range_dump_stops_it(postgres, pg_database, make_pg_capture):
    """The range names keys of the old type (audit: on the merged change it was read again from its start
    with bounds of the old key, which text orders another way); now the dump stops, saying why."""
    capture = _capture(postgres, pg_database, make_pg_capture, "table")
    source = open_chunk_source("src", capture.config.source("src"))
    alter = AlterAt(
        source, lambda _: postgres.execute("ALTER TABLE ledger ALTER COLUMN id TYPE text", database=pg_database)
    )
    alter.at(4, "LOW", "ddl")
    request = DumpRequest(
        dump_id="r", tables=["public.ledger"], key_from=[1], key_to=[150], settings=DumpSettings(chunk_size=CHUNK)
    )
    try:
        with pytest.raises(DumpInputError, match=r"the key of public\.ledger changed during the dump"):
            DumpEngine(alter, capture.zone).run(request)
    finally:
        source.close()
    assert capture.stop() == 0


@pytest.mark.parametrize(
    ("ddl", "watermarks", "where"),
    [
        ("ALTER TABLE ledger ADD COLUMN extra int", "table", "HIGH"),  # NULL in every row, as chunks 1-3 read it
        ("ALTER TABLE ledger DROP COLUMN note", "readonly", "LOW"),  # the target keeps it, as every dropped column
        ("ALTER TABLE ledger REPLICA IDENTITY FULL", "readonly", "HIGH"),
    ],
)
def test_a_ddl_that_keeps_every_rows_values_reads_on(postgres, pg_database, make_pg_capture, ddl, watermarks, where):
    """Nothing read before is stale: the dump goes on (one chunk read again where the columns changed)."""
    capture = _capture(postgres, pg_database, make_pg_capture, watermarks)
    summary = _dump(capture, postgres, pg_database, (4, where), ddl)
    assert summary["tables"][0]["chunks"] == ROWS // CHUNK + 1  # the last, short of rows, ends it
    change_and_land(postgres, pg_database, capture, "UPDATE ledger SET v = v + 1 WHERE id = 7")
    assert capture.process.poll() is None, capture.log()
    assert_target_holds_source(capture, postgres, pg_database, "ledger")
    assert capture.stop() == 0


@pytest.mark.parametrize("watermarks", ["table", "readonly"])
def test_under_writes_with_rewrites_accepted_the_dump_converges_the_table(
    postgres, pg_database, make_pg_capture, watermarks
):
    """The table changes all along (its schema is in the log before the DDL): capture sees the DDL at the
    table's next change and, with `column_rewrites: accept`, warns and goes on; the running dump, read
    again from the start, is the dump that warning asks for."""
    capture = _capture(postgres, pg_database, make_pg_capture, watermarks, column_rewrites="accept")
    workload = Workload(postgres, pg_database, "ledger", 100_000, seed=3, key_changes=False)
    workload.start()
    try:
        _dump(
            capture,
            postgres,
            pg_database,
            (4, "HIGH"),
            "ALTER TABLE ledger ADD COLUMN extra int NOT NULL DEFAULT 5",
            "ALTER TABLE ledger ALTER COLUMN v TYPE int USING v * 2",
        )
    finally:
        workload.stop()
    wait_until_landed(postgres, pg_database, capture)
    assert "capture.column_rewrite_accepted" in capture.log()
    assert workload.transactions > 20
    assert_target_holds_source(capture, postgres, pg_database, "ledger")
    assert capture.stop() == 0


def test_under_writes_capture_refuses_a_rewrite_by_default(postgres, pg_database, make_pg_capture):
    """`column_rewrites: refuse` (the default): capture stops at the table's next change, naming the table
    and the way out, and nothing of that change lands; the dump itself finishes."""
    capture = _capture(postgres, pg_database, make_pg_capture, "table")
    change_and_land(postgres, pg_database, capture, "UPDATE ledger SET v = -1 WHERE id = 1")  # schema in the log
    landed = len(capture.events("public", "ledger"))
    _dump(capture, postgres, pg_database, (4, "LOW"), "ALTER TABLE ledger ADD COLUMN extra int NOT NULL DEFAULT 5")
    postgres.execute("UPDATE ledger SET v = -2 WHERE id = 2", database=pg_database)
    assert capture.wait_exit() == 2
    log = capture.log()
    assert "ColumnRewriteError" in log and "public.ledger" in log and "column_rewrites: accept" in log
    assert len(capture.events("public", "ledger")) == landed


@pytest.mark.parametrize("watermarks", ["table", "readonly"])
def test_a_dump_resumed_after_a_rewrite_reads_the_table_again(postgres, pg_database, make_pg_capture, watermarks):
    """The dump dies before HIGH of chunk 4; the DDL comes while it is stopped; the rerun with the same dump
    id reads the table from its start instead of going on after chunk 3."""
    capture = _capture(postgres, pg_database, make_pg_capture, watermarks)
    with pytest.raises(Died):
        _dump(capture, postgres, pg_database, None, dump_id="r", wrap=lambda s: DiesBeforeHigh(s, 4))
    postgres.execute("ALTER TABLE ledger ALTER COLUMN v TYPE int USING v * 3", database=pg_database)
    summary = _dump(capture, postgres, pg_database, None, dump_id="r")
    change_and_land(postgres, pg_database, capture, "UPDATE ledger SET v = v + 1 WHERE id = 7")
    assert_target_holds_source(capture, postgres, pg_database, "ledger")
    assert summary["tables"][0]["chunks"] == 3 + ROWS // CHUNK + 1
    assert capture.stop() == 0


def _older_generation(data: dict) -> None:
    """The generation as 96e2726 wrote it: `name:xmin,...` (string_agg), not a JSON object."""
    data["generation"] = ",".join(f"{n}:{x}" for n, x in json.loads(data["generation"]).items())


OLDER_PROGRESS = {
    "no_generation": lambda data: data.pop("generation"),
    "no_shape_no_generation": lambda data: (data.pop("shape"), data.pop("generation")),
    "generation_as_text": _older_generation,
    "relfilenodes": lambda data: (data.pop("shape"), data.update(generation="16384:16390")),  # def5766's
}


@pytest.mark.parametrize("older", sorted(OLDER_PROGRESS))
def test_a_dump_resumed_from_an_older_progress_file_reads_the_table_again(
    postgres, pg_database, make_pg_capture, caplog, older
):
    """A progress file written by an older version (no shape, no generation, a generation in an earlier
    format) cannot tell whether a column was rewritten while the dump was stopped: the rerun reads the
    table again from its start, saying why. On main a generation in an earlier format failed the rerun
    (`json.loads`), and a missing one read a chunk first and then started over, logged as a rewrite."""
    capture = _capture(postgres, pg_database, make_pg_capture, "table")
    with pytest.raises(Died):
        _dump(capture, postgres, pg_database, None, dump_id="r", wrap=lambda s: DiesBeforeHigh(s, 4))
    edit_progress(capture.zone, "r", OLDER_PROGRESS[older])
    postgres.execute("ALTER TABLE ledger ALTER COLUMN v TYPE int USING v * 3", database=pg_database)
    with caplog.at_level(logging.INFO):
        summary = _dump(capture, postgres, pg_database, None, dump_id="r")
    change_and_land(postgres, pg_database, capture, "UPDATE ledger SET v = v + 1 WHERE id = 7")
    assert_target_holds_source(capture, postgres, pg_database, "ledger")
    assert summary["tables"][0]["chunks"] == 3 + ROWS // CHUNK + 1
    assert "cannot tell whether the table changed while the dump was stopped" in caplog.text
    assert capture.stop() == 0


def test_a_primary_key_swapped_during_the_dump_stops_capture(postgres, pg_database, make_pg_capture):
    """DROP the primary key and ADD another (on `v2`, as unique as `id`): from then on the log names rows by
    `v2`, the targets and the events before by `id`. On main capture went on, and rows deleted around the
    swap stayed in the targets (one of 320 through the Spark merge, 3 to 13 in the reconciled stream).
    Now it stops at the table's next change with the change and the way out."""
    capture = _capture(postgres, pg_database, make_pg_capture, "table")
    postgres.execute("ALTER TABLE ledger ADD COLUMN v2 int", "UPDATE ledger SET v2 = id", database=pg_database)
    postgres.execute("ALTER TABLE ledger ALTER COLUMN v2 SET NOT NULL", database=pg_database)
    wait_until_landed(postgres, pg_database, capture)  # the table's schema is in the log
    landed = len(capture.events("public", "ledger"))
    _dump(
        capture,
        postgres,
        pg_database,
        (4, "HIGH"),
        "ALTER TABLE ledger DROP CONSTRAINT ledger_pkey",
        "ALTER TABLE ledger ADD PRIMARY KEY (v2)",
    )
    postgres.execute("DELETE FROM ledger WHERE id = 2", database=pg_database)
    assert capture.wait_exit() == 2
    log = capture.log()
    assert "ColumnRewriteError" in log and "key (id) is now (v2)" in log and "full dump" in log
    assert len(capture.events("public", "ledger")) == landed


def test_a_table_renamed_during_its_dump_onto_a_captured_name_stops_capture(postgres, pg_database, make_pg_capture):
    """`ledger` (rows only dumped) renamed to `ledger_old`, which capture captures too (`public.*`), right
    after LOW of chunk 4: the dump fails with the table's name; on main capture then took `ledger_old` for
    a new table and the 60 rows chunks 1-3 read stayed in the targets of `ledger`, a table the source no
    longer has. Now it stops (TableRenameError), as for a table whose changes landed; with
    `table_renames: accept` both names are emptied, and a dump of `ledger_old` converges it."""
    capture = _capture(postgres, pg_database, make_pg_capture, "table")
    with pytest.raises(DumpInputError, match=r"public\.ledger"):
        _dump(capture, postgres, pg_database, (4, "LOW"), "ALTER TABLE ledger RENAME TO ledger_old")
    postgres.execute("UPDATE ledger_old SET v = -1 WHERE id = 1", database=pg_database)
    assert capture.wait_exit() == 2
    log = capture.log()
    assert "TableRenameError" in log and "public.ledger was renamed to public.ledger_old" in log
    capture.set_source(table_renames="accept")
    capture.start()
    capture.wait_running()
    wait_until_landed(postgres, pg_database, capture)
    assert reconciled_state(capture, "public", "ledger")[0] == {}
    run_dump(capture, "public.ledger_old", chunk_size=CHUNK)
    change_and_land(postgres, pg_database, capture, "UPDATE ledger_old SET v = 7 WHERE id = 9")
    assert_target_holds_source(capture, postgres, pg_database, "ledger_old")
    assert capture.stop() == 0


def test_readonly_partitions_published_without_their_parent_are_dumped(postgres, pg_database, make_pg_capture):
    """Read-only watermarks, partitions published by name (`m1`) or through their schema (`s2.m3`, `TABLES IN
    SCHEMA`) while their partitioned table `m` is not: their changes land. On main a dump of every captured
    table skipped both ('is not in publication'), so their targets held only the rows changed since."""
    postgres.execute(
        "CREATE SCHEMA s2",
        "CREATE TABLE m (id int PRIMARY KEY, v int) PARTITION BY RANGE (id)",
        "CREATE TABLE m1 PARTITION OF m FOR VALUES FROM (0) TO (100)",
        "CREATE TABLE s2.m3 PARTITION OF m FOR VALUES FROM (100) TO (200)",
        "INSERT INTO m SELECT i, i FROM generate_series(1, 199) i",
        "CREATE PUBLICATION logtide_src FOR TABLE m1, TABLES IN SCHEMA s2",
        database=pg_database,
    )
    capture = make_pg_capture(["public.*", "s2.*"], watermarks="readonly").start()
    capture.wait_running()
    try:
        engine, source = open_engine(capture)
        try:
            summary = engine.run(DumpRequest(tables=[], settings=DumpSettings(chunk_size=CHUNK)))
        finally:
            source.close()
        assert summary["skipped"] == []
        change_and_land(postgres, pg_database, capture, "UPDATE m SET v = -v WHERE id % 7 = 0")
        assert_target_holds_source(capture, postgres, pg_database, "m1")
        state, _ = reconciled_state(capture, "s2", "m3")
        assert len(state) == 100 and all(r["v"] == (-k[0] if k[0] % 7 == 0 else k[0]) for k, r in state.items())
    finally:
        capture.stop()


COLLATIONS = (  # a case-insensitive ICU collation; ICU's numeric order ('k2' < 'k10'), another non-byte order
    "CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)",
    "CREATE COLLATION numeric (provider = icu, locale = 'und-u-kn-true')",
)


@pytest.mark.parametrize(
    ("before", "after", "where"),
    [('"C"', "ci", "LOW"), ("ci", '"C"', "HIGH"), ('"en-x-icu"', "numeric", "LOW"), ("numeric", "ci", "HIGH")],
    ids=["c_to_ci", "ci_to_c", "icu_to_numeric", "numeric_to_ci"],
)
def test_a_key_column_given_another_collation_during_the_dump_converges(
    postgres, pg_database, make_pg_capture, caplog, before, after, where
):
    """`ALTER COLUMN id TYPE text COLLATE ...` at chunk 4: the key orders another way, so the chunks after
    it (`id > last key` in the new order) would skip keys and read others twice. Between "C" and an ICU
    collation the key's exact order changes; between two ICU collations only the column's pg_attribute
    row is written again (its xmin): either way the table is read again from its start, and its target
    equals it, also with writes made at the DDL. Checked to fail with the xmin check switched off
    (icu_to_numeric: the target lacked keys)."""
    keys = "(CASE WHEN i % 3 = 0 THEN 'K' ELSE 'k' END) || i"  # distinct under the case-insensitive one
    postgres.execute(
        *COLLATIONS,
        f"CREATE TABLE ledger (id text COLLATE {before} PRIMARY KEY, v int)",
        f"INSERT INTO ledger SELECT {keys}, i FROM generate_series(1, {ROWS}) i",
        database=pg_database,
    )
    capture = make_pg_capture().start()
    capture.wait_running()
    ddl = (
        f"ALTER TABLE ledger ALTER COLUMN id TYPE text COLLATE {after}",
        "UPDATE ledger SET v = -v WHERE v % 9 = 0",
        "DELETE FROM ledger WHERE v % 11 = 0",
        "INSERT INTO ledger VALUES ('k1000', 1000), ('K999', 999)",
    )
    with caplog.at_level(logging.INFO):
        _dump(capture, postgres, pg_database, (4, where), *ddl)
    change_and_land(postgres, pg_database, capture, "UPDATE ledger SET v = 7 WHERE id = 'k7'")
    assert capture.process.poll() is None, capture.log()
    assert_target_holds_source(capture, postgres, pg_database, "ledger")
    assert "dump.table_restarted" in caplog.text
    assert capture.stop() == 0
