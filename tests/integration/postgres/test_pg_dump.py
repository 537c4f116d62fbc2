"""Watermark dumps against a real PostgreSQL with the capture service running: the log and the
chunks reconcile to the table, for every kind of key."""

from __future__ import annotations

import dataclasses
import logging
import re

import pyarrow.parquet as pq
import pytest
import yaml

from capture.config import load_config
from capture.dump.control import DumpSettings
from capture.dump.engine import DumpRequest
from capture.dump.progress import ProgressStore
from capture.errors import DumpInputError
from capture.landing.chunks import read_chunk_meta
from capture.landing.reader import chunk_files
from capture.sources import open_chunk_source
from capture.status import render, source_status
from tests.integration.dumping import Died, DiesBeforeHigh, assert_refused, check_schema_change_rereads, open_engine
from tests.integration.postgres.dumping import Workload, reconciled_state, table_state, wait_until_landed
from tests.servers import wait_for

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
        # written as unquoted SQL would fold it; names are matched as the catalog spells them
        (DumpRequest(tables=["public.LEDGER"]), "as the catalog spells them: did you mean public.ledger?"),
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


# Key values that land as NULL (README, PostgreSQL: NaN in numeric(p,s), time 24:00; PostgreSQL holds
# at most one such value per key column, so the NULL stands for exactly one), in tables whose chunks
# of 2 end on such keys. Each row has its own `v`. On main the dump refused them (`DumpInputError`:
# the next chunk went on after the landed key, and `(k, i) > (NULL, 2)` selects nothing).
SOURCE_VALUED_KEYS = {
    "nan_keys": (
        "CREATE TABLE nan_keys (k numeric(10,2), i int, v int UNIQUE, PRIMARY KEY (k, i))",
        "INSERT INTO nan_keys VALUES (1.5, 1, 1), ('NaN', 1, 2), ('NaN', 2, 3), ('NaN', 3, 4), ('NaN', 4, 5),"
        " (-2, 9, 6)",
    ),
    "nan_one": (  # one NaN at most: the first chunk ends on it, the second must find nothing
        "CREATE TABLE nan_one (k numeric(10,2) PRIMARY KEY, v int UNIQUE)",
        "INSERT INTO nan_one VALUES (1, 1), ('NaN', 2)",
    ),
    "midnight": (
        "CREATE TABLE midnight (t time, i int, v int UNIQUE, PRIMARY KEY (t, i))",
        "INSERT INTO midnight VALUES ('23:59', 1, 1), ('24:00', 1, 2), ('24:00', 2, 3), ('24:00', 3, 4),"
        " ('00:00', 7, 5)",
    ),
    "nan_midnight": (  # both parts NULL in the landing zone
        "CREATE TABLE nan_midnight (k numeric(10,2), t time, v int UNIQUE, PRIMARY KEY (k, t))",
        "INSERT INTO nan_midnight VALUES ('NaN', '24:00', 1), ('NaN', '00:00', 2), (1, '24:00', 3),"
        " ('NaN', '12:00', 4), (1, '00:00', 5), (2, '24:00', 6)",
    ),
}


def _dumped_values(capture, table: str, dump_id: str) -> list[int]:
    """Every `v` the dump's chunk files hold (a chunk read again replaces its file), sorted."""
    values = []
    for path in chunk_files(capture.zone, "public", table):
        if read_chunk_meta(path).dump_id == dump_id:
            values += pq.read_table(path, columns=["after"]).column("after").combine_chunks().field("v").to_pylist()
    return sorted(values)


def _source_values(postgres, database: str, table: str) -> list[int]:
    with postgres.connect(database) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT v FROM {table} ORDER BY v")
        return [row[0] for row in cursor.fetchall()]


def test_chunks_ending_on_keys_that_land_as_null_go_on_after_the_source_value(postgres, pg_database, make_pg_capture):
    """Every row of every table is dumped exactly once, in chunks of 2 and of 3 (chunks end on other
    keys), though their keys land as NULL."""
    for ddl, rows in SOURCE_VALUED_KEYS.values():
        postgres.execute(ddl, rows, database=pg_database)
    capture = make_pg_capture()
    engine, source = open_engine(capture)
    try:
        for size in (2, 3):
            for table in SOURCE_VALUED_KEYS:
                request = DumpRequest(tables=[f"public.{table}"], settings=DumpSettings(chunk_size=size))
                summary = engine.run(request)
                expected = _source_values(postgres, pg_database, table)
                assert _dumped_values(capture, table, request.dump_id) == expected, (table, size)
                assert summary["tables"][0]["rows"] == len(expected), (table, size)
    finally:
        source.close()


@pytest.mark.parametrize(("table", "dies_at"), [("nan_keys", 3), ("midnight", 3), ("nan_midnight", 2)])
def test_a_dump_resumed_after_such_a_key_goes_on_after_its_source_value(
    postgres, pg_database, make_pg_capture, table, dies_at
):
    """The dump dies before HIGH of a chunk whose predecessor ended on such a key; a new chunk source
    and engine (what a new process has: the progress file) finish it with every row once."""
    postgres.execute(*SOURCE_VALUED_KEYS[table], database=pg_database)
    capture = make_pg_capture()
    request = DumpRequest(tables=[f"public.{table}"], settings=DumpSettings(chunk_size=2))
    engine, source = open_engine(capture)
    try:
        engine.source = DiesBeforeHigh(source, dies_at)
        with pytest.raises(Died):
            engine.run(request)
    finally:
        source.close()
    assert ProgressStore(capture.zone, request.dump_id).load("public", table).after_source is not None
    engine, source = open_engine(capture)
    try:
        engine.run(request)
    finally:
        source.close()
    assert _dumped_values(capture, table, request.dump_id) == _source_values(postgres, pg_database, table)


# Date and timestamp keys outside 0001-01-01 .. 9999-12-31 land as that range's ends, where other such
# values and the end itself land too: several source keys would be one target row (README). On main
# the dump refused some when two chunks ended at one landed key, skipped rows silently in others (a
# chunk ending at a BC date went on after 0001-01-01: bc_days lost 1 BC), and took the rest, which
# the merge then collapsed (-infinity, 44 BC and 0001-01-01: one target row). Now the dump refuses
# the table at the first such key, naming the column and the value.
CLAMPED_KEYS = [
    pytest.param(
        "CREATE TABLE days (d date PRIMARY KEY, v int)",
        "INSERT INTO days VALUES ('0001-01-01', 1), ('2020-02-29', 2), ('9999-12-31', 3), ('10000-01-01', 4)",
        "'d' holds '10000-01-01', which lands as 9999-12-31",
        id="past 9999",
    ),
    pytest.param(
        "CREATE TABLE bc_days (d date PRIMARY KEY, v int)",
        "INSERT INTO bc_days VALUES ('-infinity', 1), ('0044-03-15 BC', 2), ('0001-01-01 BC', 3), ('2020-01-01', 4)",
        "'d' holds '-infinity', which lands as 0001-01-01",
        id="-infinity",
    ),
    pytest.param(
        "CREATE TABLE stamps (t timestamp PRIMARY KEY, v int)",
        "INSERT INTO stamps VALUES ('0001-01-01 00:00', 1), ('2020-01-01', 2), ('0100-01-01 00:00 BC', 3)",
        "'t' holds '0100-01-01 00:00:00 BC', which lands as 0001-01-01",
        id="BC timestamp",
    ),
    pytest.param(  # 1 BC in UTC, which timestamptz lands in
        "CREATE TABLE zoned (t timestamptz PRIMARY KEY, v int)",
        "INSERT INTO zoned VALUES ('0001-01-01 00:00+00', 1), ('0001-01-01 00:30+01', 2)",
        r"'t' holds '0001-12-31 23:30:00\+00 BC', which lands as 0001-01-01",
        id="timestamptz BC in UTC",
    ),
    pytest.param(
        "CREATE TABLE valid (id int, valid_to timestamptz, v int, PRIMARY KEY (id, valid_to))",
        "INSERT INTO valid VALUES (1, '2020-01-01', 1), (1, 'infinity', 2), (2, '9999-12-31 23:59:59.999999+00', 3)",
        "'valid_to' holds 'infinity', which lands as 9999-12-31",
        id="composite infinity",
    ),
]


@pytest.mark.parametrize(("ddl", "rows", "refused"), CLAMPED_KEYS)
def test_a_dump_refuses_keys_that_would_land_as_another_key(postgres, pg_database, make_pg_capture, ddl, rows, refused):
    postgres.execute(ddl, rows, database=pg_database)
    table = "public." + ddl.split()[2]
    engine, source = open_engine(make_pg_capture())
    try:
        with pytest.raises(DumpInputError, match=rf"{table}: key column {refused} .*\(exclude\)") as info:
            engine.run(DumpRequest(tables=[table], settings=DumpSettings(chunk_size=2)))
    finally:
        source.close()
    assert "UPDATE ... SET" in str(info.value) and "set `clamped_keys: accept` on the source" in str(info.value)


def test_capture_stops_at_a_key_that_would_land_as_another_key(postgres, pg_database, make_pg_capture):
    """On main `-infinity` and 44 BC landed under one key, 0001-01-01, with the real 0001-01-01: the
    merge kept one target row for the three source rows, and a delete of one removed it."""
    postgres.execute(
        "CREATE TABLE ck (d date PRIMARY KEY, v int)",
        "CREATE TABLE ok (id int PRIMARY KEY, d date)",
        database=pg_database,
    )
    capture = make_pg_capture().start()
    capture.wait_running()
    postgres.execute(
        "INSERT INTO ok VALUES (1, '-infinity')",  # outside a key: lands as 0001-01-01, as before
        "INSERT INTO ck VALUES ('0001-01-01', 1)",
        database=pg_database,
    )
    capture.wait_events("public", "ck", 1)
    postgres.execute("INSERT INTO ck VALUES ('0044-03-15 BC', 2)", database=pg_database)
    assert capture.wait_exit() == 2
    log = capture.log()
    assert "public.ck: key column 'd' holds '0044-03-15 BC', which lands as 0001-01-01" in log and "exclude" in log
    assert "clamped_keys: accept" in log and "capture.clamped_key_accepted" not in log
    assert len(capture.events("public", "ck")) == 1  # nothing of the refused transaction
    assert len(capture.events("public", "ok")) == 1


def test_with_clamped_keys_accepted_infinity_keys_are_captured_and_dumped_whole(
    postgres, pg_database, make_pg_capture, caplog
):
    """`clamped_keys: accept`: a temporal `(id, valid_to)` key whose open rows hold 'infinity' (one an
    id, so no two keys land as one) is captured and dumped, every source row one target row, with
    one warning per table and column from capture and one from the dump."""
    postgres.execute(
        "CREATE TABLE valid (id int, valid_to timestamptz, v int UNIQUE, PRIMARY KEY (id, valid_to))",
        "INSERT INTO valid VALUES (1, '2020-01-01', 1), (1, 'infinity', 2), (2, 'infinity', 3), (3, '2021-01-01', 4),"
        " (3, 'infinity', 5), (4, 'infinity', 6)",
        database=pg_database,
    )
    capture = make_pg_capture(clamped_keys="accept").start()
    capture.wait_running()
    postgres.execute(
        "INSERT INTO valid VALUES (5, 'infinity', 7), (5, '2022-01-01', 8)",
        "UPDATE valid SET v = 9 WHERE id = 2 AND valid_to = 'infinity'",
        "UPDATE valid SET valid_to = '2023-01-01' WHERE id = 4",  # closed: the key moves out of infinity
        "INSERT INTO valid VALUES (4, 'infinity', 10)",
        "DELETE FROM valid WHERE id = 3 AND valid_to = 'infinity'",
        database=pg_database,
    )
    caplog.set_level(logging.WARNING, logger="capture")
    engine, source = open_engine(capture)
    try:
        request = DumpRequest(tables=["public.valid"], settings=DumpSettings(chunk_size=2))
        summary = engine.run(request)
    finally:
        source.close()
    expected = _source_values(postgres, pg_database, "valid")
    assert summary["tables"][0]["rows"] == len(expected) == 8
    assert _dumped_values(capture, "valid", request.dump_id) == expected
    wait_until_landed(postgres, pg_database, capture)
    state, _ = reconciled_state(capture, "public", "valid")
    assert sorted(row["v"] for row in state.values()) == expected  # every source row, one row each
    assert capture.process.poll() is None  # capture goes on

    warned = [r for r in caplog.records if getattr(r, "event", None) == "capture.clamped_key_accepted"]
    assert len(warned) == 1 and warned[0].fields["value"] == "infinity"  # the dump's: once, 3 chunks of infinity
    lines = [x for x in capture.log().splitlines() if "capture.clamped_key_accepted" in x]
    assert len(lines) == 1, lines
    assert "table=public.valid" in lines[0] and "column=valid_to" in lines[0] and "infinity" in lines[0]
    assert "become one target row" in lines[0]
    report = source_status(load_config(capture.config_path), "src")
    assert report["clamped_keys"] == "accept" and "clamped keys accepted" in render([report])


def _set_source(capture, **settings) -> None:
    """Change the capture's source settings (as a person edits the config), for its next start."""
    data = yaml.safe_load(capture.config_path.read_text())
    data["sources"]["src"].update(settings)
    capture.config_path.write_text(yaml.safe_dump(data))


def test_the_refusals_advice_lets_capture_go_on(postgres, pg_database, make_pg_capture):
    """Audit: the message told to UPDATE the rows; the refused INSERT stays in the WAL past the
    checkpoint and the UPDATE's old key holds the same value, so a restarted capture stopped again.
    Following the ways out it now gives (exclude, restart, fix the rows, capture the table again and
    dump it), capture goes on and the target converges to the table."""
    postgres.execute("CREATE TABLE ck (d date PRIMARY KEY, v int)", database=pg_database)
    capture = make_pg_capture().start()
    capture.wait_running()
    postgres.execute("INSERT INTO ck VALUES ('2019-01-01', 1)", "INSERT INTO ck VALUES ('0044-03-15 BC', 2)",
                     database=pg_database)  # fmt: skip
    assert capture.wait_exit() == 2
    log = capture.log()
    assert "leave public.ck out of capture (exclude) and restart capture" in log and "UPDATE ... SET d" in log
    _set_source(capture, exclude=["public.ck"])
    capture.start()
    capture.wait_running()
    postgres.execute("UPDATE ck SET d = '0002-01-01' WHERE d < '0001-01-01'", database=pg_database)
    wait_until_landed(postgres, pg_database, capture)
    capture.stop()
    _set_source(capture, exclude=[])
    capture.start()
    capture.wait_running()
    postgres.execute("INSERT INTO ck VALUES ('2020-01-01', 3)", database=pg_database)
    engine, source = open_engine(capture)
    try:
        engine.run(DumpRequest(tables=["public.ck"], settings=DumpSettings(chunk_size=2)))
    finally:
        source.close()
    wait_until_landed(postgres, pg_database, capture)
    assert capture.process.poll() is None  # capture goes on
    landed = reconciled_state(capture, "public", "ck")[0].values()
    expected = table_state(postgres, pg_database, "ck", key=("d",)).values()
    assert sorted((r["d"], r["v"]) for r in landed) == sorted((r["d"], r["v"]) for r in expected)
    assert len(expected) == 3


def test_the_refusals_other_way_out_accept_lets_capture_go_on(postgres, pg_database, make_pg_capture):
    """The other way out: `clamped_keys: accept`; the refused change lands clamped on restart."""
    postgres.execute("CREATE TABLE ck (d date PRIMARY KEY, v int)", database=pg_database)
    capture = make_pg_capture().start()
    capture.wait_running()
    postgres.execute("INSERT INTO ck VALUES ('0044-03-15 BC', 2)", database=pg_database)
    assert capture.wait_exit() == 2
    _set_source(capture, clamped_keys="accept")
    capture.start()
    capture.wait_running()
    postgres.execute("INSERT INTO ck VALUES ('2020-01-01', 3)", database=pg_database)
    events = capture.wait_events("public", "ck", 2, timeout=30)
    assert capture.process.poll() is None
    assert sorted(e["after"]["v"] for e in events) == [2, 3]


# Key values that land as NULL or clamped inside other types (README, PostgreSQL: types): intervals
# past Arrow's durations all land as NULL, arrays with an out-of-range element as a list holding the
# range's end. On main both were taken: '300000 years' and '400000 years' became one target row.
UNLANDABLE_KEYS = [
    pytest.param(
        "CREATE TABLE spans (i interval PRIMARY KEY, v int)",
        "INSERT INTO spans VALUES ('1 day', 1), ('300000 years', 2), ('400000 years', 3)",
        "'i' holds 'P300000Y', which lands as NULL",
        id="interval",
    ),
    pytest.param(
        "CREATE TABLE day_lists (d date[] PRIMARY KEY, v int)",
        "INSERT INTO day_lists VALUES ('{2020-01-01}', 1), ('{infinity}', 2), ('{10000-01-01}', 3)",
        "'d' holds '{10000-01-01}', which lands as a list whose element '10000-01-01' lands as 9999-12-31",
        id="date array",
    ),
    pytest.param(
        "CREATE TABLE stamp_lists (t timestamp[] PRIMARY KEY, v int)",
        'INSERT INTO stamp_lists VALUES (\'{"2020-01-01 00:00","0100-01-01 00:00 BC"}\', 1)',
        "'t' holds '{\"2020-01-01 00:00:00\",\"0100-01-01 00:00:00 BC\"}', which lands as a list",
        id="timestamp array",
    ),
]


@pytest.mark.parametrize(("ddl", "rows", "refused"), UNLANDABLE_KEYS)
def test_a_dump_refuses_keys_that_would_land_as_null_or_clamped(
    postgres, pg_database, make_pg_capture, ddl, rows, refused
):
    """Audit: the refusal happens at the chunk (a PG dump no longer checks landed keys for resuming)."""
    postgres.execute(ddl, rows, database=pg_database)
    table = "public." + ddl.split()[2]
    engine, source = open_engine(make_pg_capture())
    try:
        with pytest.raises(DumpInputError, match=re.escape(refused)):
            engine.run(DumpRequest(tables=[table], settings=DumpSettings(chunk_size=10)))
    finally:
        source.close()


@pytest.mark.parametrize(
    ("ddl", "keys", "fine", "refused"),
    [
        pytest.param(  # refused as the plan reads the given keys, before anything is written
            "CREATE TABLE day_lists (d date[] PRIMARY KEY, v int)",
            ["{infinity}", "{10000-01-01}"],
            "{2020-01-01}",
            "'d' holds '{infinity}', which lands as a list whose element 'infinity' lands as 9999-12-31",
            id="date array",
        ),
        pytest.param(
            "CREATE TABLE spans (i interval PRIMARY KEY, v int)",
            ["300000 years", "400000 years"],
            "1 day",
            "'i' holds 'P300000Y', which lands as NULL",
            id="interval",
        ),
    ],
)
def test_a_key_list_dump_refuses_keys_that_would_land_as_another_key(
    postgres, pg_database, make_pg_capture, ddl, keys, fine, refused
):
    """Audit: a key-list dump (`select_keys`) did not check: asked for '{infinity}' and
    '{10000-01-01}' it landed both as [9999-12-31], one target row for two source rows."""
    table = ddl.split()[2]
    postgres.execute(ddl, f"INSERT INTO {table} VALUES ('{keys[0]}', 1), ('{keys[1]}', 2)", database=pg_database)
    if fine:
        postgres.execute(f"INSERT INTO {table} VALUES ('{fine}', 3)", database=pg_database)
    engine, source = open_engine(make_pg_capture())
    try:
        with pytest.raises(DumpInputError, match=re.escape(refused)):
            engine.run(DumpRequest(tables=[f"public.{table}"], keys=keys))
        if fine:  # a key that lands as itself is dumped
            assert engine.run(DumpRequest(tables=[f"public.{table}"], keys=[fine]))["tables"][0]["rows"] == 1
    finally:
        source.close()


def test_capture_stops_at_interval_and_array_keys_that_would_not_land_as_themselves(
    postgres, pg_database, make_pg_capture
):
    postgres.execute(
        "CREATE TABLE spans (i interval PRIMARY KEY, v int)",
        "CREATE TABLE day_lists (d date[] PRIMARY KEY, v int)",
        database=pg_database,
    )
    capture = make_pg_capture().start()
    capture.wait_running()
    postgres.execute("INSERT INTO spans VALUES ('1 day', 1)", database=pg_database)
    capture.wait_events("public", "spans", 1)
    postgres.execute("INSERT INTO spans VALUES ('300000 years', 2)", database=pg_database)
    assert capture.wait_exit() == 2
    assert "public.spans: key column 'i' holds 'P300000Y', which lands as NULL" in capture.log()
    _set_source(capture, exclude=["public.spans"])
    capture.start()
    capture.wait_running()
    postgres.execute("INSERT INTO day_lists VALUES ('{2020-01-01,-infinity}', 1)", database=pg_database)
    assert capture.wait_exit() == 2
    assert "public.day_lists: key column 'd' holds '{2020-01-01,-infinity}', which lands as a list" in capture.log()
    assert len(capture.events("public", "spans")) == 1


def test_clamped_keys_accepted_warn_once_per_capture_run_across_reconnects(postgres, pg_database, make_pg_capture):
    """README: capture logs `capture.clamped_key_accepted` once per run, table and column. On main every
    reconnect (the walsender ended, the network cut) made a new reader, which warned again at the next
    such key; now the source keeps what was warned for the whole run. A new run warns once again."""
    postgres.execute("CREATE TABLE valid (id int, valid_to date, PRIMARY KEY (id, valid_to))", database=pg_database)
    capture = make_pg_capture(clamped_keys="accept").start()
    capture.wait_running()

    def warned() -> int:
        return sum("capture.clamped_key_accepted" in x for x in capture.log().splitlines())

    def reconnect() -> None:
        slot = capture.config.source("src").slot_name("src")
        postgres.execute(
            f"SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = '{slot}'"
        )
        wait_for(lambda: capture.log().count("capture.source_lost") > lost, 30, what="the stream to end")

    postgres.execute("INSERT INTO valid VALUES (1, 'infinity')", database=pg_database)
    capture.wait_events("public", "valid", 1)
    assert warned() == 1
    for n in (2, 3):
        lost = capture.log().count("capture.source_lost")
        reconnect()
        postgres.execute(f"INSERT INTO valid VALUES ({n}, 'infinity')", database=pg_database)
        capture.wait_events("public", "valid", n)
    assert warned() == 1
    assert capture.stop() == 0
    capture.start()
    capture.wait_running()
    postgres.execute("INSERT INTO valid VALUES (4, 'infinity')", database=pg_database)
    capture.wait_events("public", "valid", 4)
    assert warned() == 2  # the new run's
    assert capture.stop() == 0
