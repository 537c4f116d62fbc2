"""Watermark dumps against a real PostgreSQL with the capture service running: the log and the
chunks reconcile to the table, for every kind of key."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from capture.dump.control import DumpSettings
from capture.dump.engine import DumpRequest
from capture.errors import DumpInputError
from capture.landing.chunks import read_chunk_meta
from capture.landing.reader import chunk_files
from capture.sources import open_chunk_source
from tests.integration.dumping import assert_refused, check_schema_change_rereads, open_engine
from tests.integration.postgres.dumping import Workload, reconciled_state, table_state, wait_until_landed

pytestmark = pytest.mark.integration


def _populate(postgres, database: str, rows: int) -> None:
    postgres.execute(
        "CREATE TABLE ledger (id int PRIMARY KEY, v int, note text)",
        f"INSERT INTO ledger SELECT i, i % 100, 'row' || i FROM generate_series(1, {rows}) i",
        database=database,
    )


def _capture(postgres, pg_database: str, make_pg_capture, watermarks: str):
    """A running capture; `watermarks: readonly` writes nothing, so an administrator publishes the table
    first (tests/integration/postgres/test_pg_readonly_dump.py has the users with only the grants)."""
    if watermarks == "readonly":
        postgres.execute("CREATE PUBLICATION logtide_src FOR TABLE ledger", database=pg_database)
    capture = make_pg_capture(watermarks=watermarks).start()
    capture.wait_running()
    return capture


@pytest.mark.parametrize(("seed", "watermarks"), [(1, "table"), (2, "table"), (1, "readonly")])
def test_dump_during_concurrent_writes_reconciles_to_the_table(
    postgres, pg_database, make_pg_capture, seed, watermarks
):
    _populate(postgres, pg_database, 3000)  # history before capture started: only the dump has it
    capture = _capture(postgres, pg_database, make_pg_capture, watermarks)
    workload = Workload(postgres, pg_database, "ledger", 100_000, seed)
    workload.start()
    engine, source = open_engine(capture)
    try:
        summary = engine.run(DumpRequest(tables=["public.ledger"], settings=DumpSettings(chunk_size=37)))
    finally:
        source.close()
        workload.stop()
    wait_until_landed(postgres, pg_database, capture)

    state, stats = reconciled_state(capture, "public", "ledger")
    assert len(state) == len(table_state(postgres, pg_database, "ledger")), (stats, summary)
    assert state == table_state(postgres, pg_database, "ledger")
    assert workload.transactions > 50 and summary["tables"][0]["chunks"] > 50
    assert stats.chunks == summary["tables"][0]["chunks"] and stats.chunks_pending == 0
    log_only = {k: v for k, v in state.items() if k[0] >= 100_000}
    assert len(log_only) < len(state)


@pytest.mark.parametrize("watermarks", ["table", "readonly"])
def test_a_schema_change_just_before_high_or_after_low_rereads_the_chunk(
    postgres, pg_database, make_pg_capture, watermarks
):
    _populate(postgres, pg_database, 200)
    capture = _capture(postgres, pg_database, make_pg_capture, watermarks)
    check_schema_change_rereads(
        capture,
        "public",
        execute=lambda sql: postgres.execute(sql, database=pg_database),
        landed=lambda: wait_until_landed(postgres, pg_database, capture),
        table=lambda: table_state(postgres, pg_database, "ledger"),
    )


def test_composite_collated_uuid_binary_and_unique_keys(postgres, pg_database, make_pg_capture):
    postgres.execute(
        'CREATE TABLE composite (region text COLLATE "en-x-icu", n int, v int, PRIMARY KEY (region, n))',
        "INSERT INTO composite VALUES ('a', 1, 1), ('A', 2, 2), ('b', 1, 3), ('B', 2, 4), ('c', 9, 5), ('é', 1, 6),"
        " ('e', 2, 7), ('Z', 1, 8)",
        "CREATE TABLE uuids (u uuid PRIMARY KEY, v int)",
        "INSERT INTO uuids SELECT md5(i::text)::uuid, i FROM generate_series(1, 9) i",
        "CREATE TABLE bin (k bytea PRIMARY KEY, v int)",
        "INSERT INTO bin VALUES ('\\x00', 1), ('\\x0001', 2), ('\\xff', 3), ('\\x7f', 4)",
        "CREATE TABLE uniq (code text NOT NULL UNIQUE, v int)",
        "INSERT INTO uniq VALUES ('x', 1), ('y', 2), ('z', 3)",
        "ALTER TABLE uniq REPLICA IDENTITY USING INDEX uniq_code_key",  # PostgreSQL's rule for published updates
        database=pg_database,
    )
    capture = make_pg_capture().start()
    capture.wait_running()
    engine, source = open_engine(capture)
    tables = ("composite", "uuids", "bin", "uniq")
    try:
        summary = engine.run(DumpRequest(tables=[f"public.{t}" for t in tables], settings=DumpSettings(chunk_size=2)))
    finally:
        source.close()
    postgres.execute(
        "UPDATE uniq SET code = 'q' WHERE code = 'y'",  # key change on a table keyed by a unique index
        "UPDATE composite SET n = 3 WHERE region = 'é'",
        "UPDATE uuids SET v = -1",
        database=pg_database,
    )
    wait_until_landed(postgres, pg_database, capture)
    assert [t["rows"] for t in summary["tables"]] == [8, 9, 4, 3]
    # chunk boundaries follow the column's collation: ICU en interleaves cases, C would not
    metas = sorted(
        (read_chunk_meta(p) for p in chunk_files(capture.zone, "public", "composite")), key=lambda m: m.chunk
    )
    assert [m.after for m in metas][:3] == [None, ("A", 2), ("B", 2)]
    for table, key in (("composite", ("region", "n")), ("uuids", ("u",)), ("bin", ("k",)), ("uniq", ("code",))):
        state, _ = reconciled_state(capture, "public", table)
        assert state == table_state(postgres, pg_database, table, key), table


@pytest.mark.parametrize("watermarks", ["table", "readonly"])
def test_key_list_and_key_range(postgres, pg_database, make_pg_capture, watermarks):
    _populate(postgres, pg_database, 100)
    capture = _capture(postgres, pg_database, make_pg_capture, watermarks)
    engine, source = open_engine(capture)
    try:
        by_keys = engine.run(
            DumpRequest(tables=["public.ledger"], keys=[5, "7", 500, 9], settings=DumpSettings(chunk_size=2))
        )
        by_range = engine.run(
            DumpRequest(tables=["public.ledger"], key_from=10, key_to=20, settings=DumpSettings(chunk_size=4))
        )
    finally:
        source.close()
    assert by_keys["tables"][0]["rows"] == 3 and by_keys["tables"][0]["missing_keys"] == 1
    assert by_range["tables"][0]["rows"] == 11 and by_range["tables"][0]["chunks"] == 3
    metas = [read_chunk_meta(p) for p in chunk_files(capture.zone, "public", "ledger")]
    ranged = sorted((m for m in metas if m.dump_id == by_range["dump_id"]), key=lambda m: m.chunk)
    assert [(m.start, m.after, m.stop, m.last) for m in ranged] == [
        ((10,), None, (20,), False),
        (None, (13,), (20,), False),
        (None, (17,), (20,), True),
    ]
    wait_until_landed(postgres, pg_database, capture)
    state, _ = reconciled_state(capture, "public", "ledger")
    table = table_state(postgres, pg_database, "ledger")
    assert all(state[k] == table[k] for k in state)  # what was dumped is what the table holds
    assert set(state) == {(5,), (7,), (9,), *((i,) for i in range(10, 21))}


def test_bad_requests_are_refused_before_anything_is_written(postgres, pg_database, make_pg_capture):
    _populate(postgres, pg_database, 10)
    postgres.execute(
        "CREATE TABLE keyless (a int, b int)",
        'CREATE TABLE names (name text COLLATE "en-x-icu" PRIMARY KEY, c text COLLATE "C" UNIQUE NOT NULL)',
        "CREATE TABLE pairs (a int, b text, PRIMARY KEY (a, b))",
        database=pg_database,
    )
    capture = make_pg_capture()
    engine, source = open_engine(capture)
    source.setup()  # the watermark table exists: "nothing written" is no row in it
    cases = [
        (DumpRequest(tables=["public.nope"]), "table public.nope does not exist"),
        (DumpRequest(tables=['"public"."ledger"']), "write table names without quotes: public.ledger"),
        (DumpRequest(tables=["public.keyless"]), "has no primary key and no UNIQUE index on NOT NULL"),
        (DumpRequest(tables=["public.ledger"], keys=[[1, 2]]), "has 2 value(s); public.ledger"),
        (DumpRequest(tables=["public.ledger"], keys=["abc"]), "key value 'abc' for column 'id' is not an integer"),
        # a range whose start comes after its end, in the database's order of the key
        (DumpRequest(tables=["public.ledger"], key_from=300, key_to=100), "key_from 300 comes after key_to 100"),
        (DumpRequest(tables=["public.pairs"], key_from=[2, "a"], key_to=[1, "z"]), 'key_from [2, "a"] comes after'),
        # ICU orders a < B (case is a lower level); byte order would say B < a
        (DumpRequest(tables=["public.names"], key_from="B", key_to="a"), 'key_from "B" comes after key_to "a"'),
    ]
    try:
        assert_refused(engine, capture.zone, cases)
        assert postgres.query("SELECT count(*) FROM logtide.watermarks", database=pg_database) == [(0,)]
        names = source.describe("public", "names")
        assert not source.key_after(names, ("a",), ("B",)) and source.key_after(names, ("b",), ("A",))
        # the same letters in a "C" column: byte order, so B comes before a
        by_bytes = dataclasses.replace(names, key=("c",))
        assert not source.key_after(by_bytes, ("B",), ("a",)) and source.key_after(by_bytes, ("a",), ("B",))
        assert not source.key_after(names, ("same",), ("same",))  # a range of one key is fine
    finally:
        source.close()


def test_a_user_without_watermark_grants_is_told_which_grant(postgres, pg_database, make_pg_capture):
    _populate(postgres, pg_database, 10)
    postgres.execute("DROP ROLE IF EXISTS reader", "CREATE ROLE reader LOGIN PASSWORD 'r'")
    postgres.execute(
        "GRANT SELECT ON ledger TO reader",
        f'REVOKE CREATE ON DATABASE "{pg_database}" FROM PUBLIC',
        "CREATE PUBLICATION logtide_src FOR TABLE ledger",  # as capture's first start would
        database=pg_database,
    )
    capture = make_pg_capture(user="reader", password="r")
    engine, source = open_engine(capture)
    try:
        with pytest.raises(DumpInputError, match=r"may not create the watermark table .* GRANT CREATE ON DATABASE"):
            engine.run(DumpRequest(tables=["public.ledger"]))
        admin = open_chunk_source("src", make_pg_capture(source="admin").config.source("admin"))
        admin.setup()  # what `logtide setup --source src` does, as a user allowed to
        admin.close()
        postgres.execute("GRANT USAGE ON SCHEMA logtide TO reader", database=pg_database)
        with pytest.raises(DumpInputError, match=r"may not write .* GRANT INSERT, UPDATE ON logtide\.watermarks"):
            engine.run(DumpRequest(tables=["public.ledger"]))
    finally:
        source.close()
        postgres.execute("DROP OWNED BY reader", database=pg_database)


def test_progress_of_a_table_never_analysed_is_estimated(postgres, pg_database, make_pg_capture, caplog):
    """pg_class.reltuples is -1 until a table is analysed: the estimate must not be 0 rows (which
    said 100 % and ETA 0 s from the first chunk on); past an estimate, the percent is unknown."""
    postgres.execute(
        "CREATE TABLE fresh (id int PRIMARY KEY, v int, note text) WITH (autovacuum_enabled = false)",
        "INSERT INTO fresh SELECT i, i, 'row ' || i FROM generate_series(1, 5000) i",
        database=pg_database,
    )
    assert postgres.query("SELECT reltuples FROM pg_class WHERE relname = 'fresh'", database=pg_database) == [(-1,)]
    caplog.set_level(logging.INFO, logger="capture")
    engine, source = open_engine(make_pg_capture())
    try:
        engine.run(DumpRequest(tables=["public.fresh"], settings=DumpSettings(chunk_size=500)))
    finally:
        source.close()
    lines = [r.fields for r in caplog.records if getattr(r, "event", None) == "dump.chunk"]
    first, last = lines[0], lines[-1]
    # an ETA is given (0.0 when the rest takes under 0.05 s at the first chunk's rate, as on a quiet machine)
    assert 2 <= first["percent"] <= 50 and first["eta_s"] is not None and first["of_about"] >= 2, first
    assert last["percent"] == 100.0 and last["eta_s"] == 0.0
    assert all(line["percent"] is None or line["percent"] < 100 for line in lines[:-1])


KEYS_LANDING_AS_ONE_OR_NULL = [
    pytest.param(  # infinity and years past 9999 all land as 9999-12-31: the next chunk would read them again
        "CREATE TABLE far_keys (d date PRIMARY KEY, v int)",
        "INSERT INTO far_keys VALUES ('9999-12-30', 1), ('infinity', 2), ('10000-01-01', 3), ('20000-01-01', 4)",
        r"public\.far_keys: chunk 2 ends at key .*9999-12-31.* key \(d\)",
        (5, 4),
        id="collapsed",
    ),
    pytest.param(  # NaN lands as NULL: `(k, i) > (NULL, 2)` selects nothing, and on main the dump ended
        # there without the rows after it, and no error
        "CREATE TABLE nan_keys (k numeric(10,2), i int, v int, PRIMARY KEY (k, i))",
        "INSERT INTO nan_keys VALUES ('NaN', 1, 1), ('NaN', 2, 2), ('NaN', 3, 3)",
        r"public\.nan_keys: chunk 1 ends at key \[None, 2\], which lands as NULL",
        (4, 3),
        id="null",
    ),
]


@pytest.mark.parametrize(("ddl", "rows", "refused", "larger"), KEYS_LANDING_AS_ONE_OR_NULL)
def test_a_full_chunk_the_next_cannot_resume_after_is_refused(
    postgres, pg_database, make_pg_capture, ddl, rows, refused, larger
):
    """Keys whose landed values collapse (README) or land as NULL: with chunks of 2 the dump stops with
    an error naming the table and the key; with a chunk larger than those keys it dumps every row."""
    postgres.execute(ddl, rows, database=pg_database)
    table = "public." + ddl.split()[2]
    engine, source = open_engine(make_pg_capture())
    try:
        with pytest.raises(DumpInputError, match=refused):
            engine.run(DumpRequest(tables=[table], settings=DumpSettings(chunk_size=2)))
        chunk_size, count = larger
        request = DumpRequest(tables=[table], settings=DumpSettings(chunk_size=chunk_size))
        assert engine.run(request)["tables"][0]["rows"] == count
    finally:
        source.close()
