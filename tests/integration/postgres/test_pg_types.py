"""Every PostgreSQL type survives the trip database -> pgoutput -> landing zone with its value
and type, and a chunk SELECT gives exactly the same values (one mapping for both paths)."""

from __future__ import annotations

import math
import re
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

import pyarrow as pa
import pytest

from capture.dump.control import DumpSettings
from capture.dump.engine import DumpRequest
from capture.errors import DumpInputError
from capture.sources import open_chunk_source
from tests.integration.dumping import open_engine

pytestmark = pytest.mark.integration

SETUP = [
    "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
    "CREATE DOMAIN posint AS integer CHECK (VALUE > 0)",
    """CREATE TABLE all_types (
      id int NOT NULL, region text COLLATE "en-x-icu" NOT NULL,
      si smallint, i integer, bi bigint, n10 numeric(10,2), n50 numeric(50,20), nu numeric,
      r real, dp double precision, t text, vc varchar(20), ch char(5), by bytea, u uuid, b boolean,
      d date, ts timestamp, tstz timestamptz, tm time, iv interval, js json, jb jsonb,
      ai integer[], at text[], an numeric(10,2)[], en mood, dm posint, ip inet,
      PRIMARY KEY (id, region)
    )""",
]
ROWS = [
    # the extremes
    "(1, 'eu', -32768, -2147483648, -9223372036854775808, -99999999.99,"
    " '-123456789012345678901234567890.12345678901234567890', '1e-40', '-3.4028235e+38',"
    " '-1.7976931348623157e+308', 'emoji 🎉 ünïcödé', 'text ✓ 𝄞', 'ab', '\\x00ff0001',"
    " 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', true, '0001-01-01', '1970-01-01 00:00:00.000001',"
    " '2038-01-19 03:14:07.499999+05:30', '23:59:59.999999', '-290000 years -1 day -00:00:00.000001',"
    ' \'{"k": [1, 2.5, "ß"], "n": null}\', \'{"b": 1, "a": [true, null]}\', \'{1,NULL,-3}\','
    " ARRAY['a b', 'c\"d\\e', NULL, 'NULL', '', '{x}'], '{1.50,NULL}', 'happy', 2147483647, '192.168.0.1/24')",
    # ordinary values and special floats
    "(2, 'us', 1, 2, 3, 0.01, 0, 'NaN', 'NaN', 'Infinity', '', '', '', '', "
    " '00000000-0000-0000-0000-000000000000', false, '2024-02-29', '2024-01-01 12:00:00',"
    " '2024-01-01 12:00:00+00', '00:00:00', '1 year 2 mons 3 days 04:05:06.789', '[]', '{}', '{}', '{}', '{}',"
    " 'sad', 1, '::1')",
    # NULL in every nullable column
    "(3, 'eu'" + ", NULL" * 27 + ")",
    # a text key that sorts differently outside the C collation
    "(3, 'EU', 0, 0, 0, 0, 0, 0, '-Infinity', 0, 'x', 'x', 'x', '\\x', "
    " 'ffffffff-ffff-ffff-ffff-ffffffffffff', true, '9999-12-31', '9999-12-31 23:59:59.999999',"
    " '1900-01-01 00:00:00+00', '24:00:00', '-1 mons +1 day', '1', 'null', '{}', '{}', '{}', 'ok', 7, '10.0.0.1')",
]


def _plain(rows: list[dict]) -> list[dict]:
    """NaN compares unequal to itself: compare it as a marker."""
    return [{k: ("NaN" if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in rows]


def test_every_type_round_trips_and_log_rows_equal_dump_rows(postgres, pg_database, make_pg_capture):
    postgres.execute(*SETUP, database=pg_database)
    capture = make_pg_capture().start()
    capture.wait_running()
    for row in ROWS:
        postgres.execute(f"INSERT INTO all_types VALUES {row}", database=pg_database)
    events = capture.wait_events("public", "all_types", len(ROWS))
    assert [e["_op"] for e in events] == ["c"] * len(ROWS)
    logged = [e["after"] for e in events]

    source = open_chunk_source("src", capture.config.source("src"))
    try:
        described = source.describe("public", "all_types")
        rows = source.select_chunk(described, None, None, None, 100)
    finally:
        source.close()
    landed = capture.zone.read_table("public", "all_types")
    assert described.row_type == landed.schema.field("after").type
    assert described.key == ("id", "region")
    dumped = rows.to_pylist()
    by_key = {(r["id"], r["region"]): r for r in logged}
    for dump_row, log_row in zip(_plain(dumped), _plain([by_key[(r["id"], r["region"])] for r in dumped]), strict=True):
        assert {k: v for k, v in dump_row.items() if v != log_row[k]} == {}, log_row
    # the dump orders by the key in its collation: 'eu' < 'EU' under ICU en, unlike C
    assert [(r["id"], r["region"]) for r in dumped] == [(1, "eu"), (2, "us"), (3, "eu"), (3, "EU")]

    types = {f.name: f.type for f in described.row_type}
    assert types["si"] == pa.int16() and types["i"] == pa.int32() and types["bi"] == pa.int64()
    assert types["n10"] == pa.decimal128(10, 2) and types["n50"] == pa.string() and types["nu"] == pa.string()
    assert types["r"] == pa.float32() and types["dp"] == pa.float64() and types["b"] == pa.bool_()
    assert types["by"] == pa.binary() and types["u"] == pa.string() and types["en"] == pa.string()
    assert types["d"] == pa.date32() and types["ts"] == pa.timestamp("us")
    assert types["tstz"] == pa.timestamp("us", tz="UTC") and types["tm"] == pa.time64("us")
    assert types["iv"] == pa.duration("us") and types["dm"] == pa.int32()
    assert types["ai"] == pa.list_(pa.int32()) and types["at"] == pa.list_(pa.string())
    assert types["an"] == pa.list_(pa.decimal128(10, 2))
    sources = {f.name: f.metadata[b"source_type"].decode() for f in described.row_type}
    assert sources["n50"] == "numeric(50,20)" and sources["en"] == "mood" and sources["dm"] == "posint"
    assert sources["ai"] == "integer[]" and sources["tstz"] == "timestamp with time zone"

    first, second, nulls, last = logged
    assert first["si"] == -32768 and first["bi"] == -(2**63) and first["n10"] == Decimal("-99999999.99")
    assert first["n50"] == "-123456789012345678901234567890.12345678901234567890"
    assert first["nu"] == "0.0000000000000000000000000000000000000001"  # exact text
    assert first["r"] == -3.4028234663852886e38 and first["dp"] == -1.7976931348623157e308
    assert first["t"] == "emoji 🎉 ünïcödé" and first["ch"] == "ab   " and first["by"] == b"\x00\xff\x00\x01"
    assert first["u"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11" and first["b"] is True
    assert first["d"] == date(1, 1, 1) and first["ts"] == datetime(1970, 1, 1, 0, 0, 0, 1)
    assert first["tstz"] == datetime(2038, 1, 18, 21, 44, 7, 499999, tzinfo=UTC)
    assert first["tm"] == time(23, 59, 59, 999999)
    assert first["iv"] == -timedelta(days=290000 * 360 + 1, microseconds=1)
    assert first["js"] == '{"k": [1, 2.5, "ß"], "n": null}' and first["jb"] == '{"a": [true, null], "b": 1}'
    assert first["ai"] == [1, None, -3] and first["at"] == ["a b", 'c"d\\e', None, "NULL", "", "{x}"]
    assert first["an"] == [Decimal("1.50"), None] and first["en"] == "happy" and first["dm"] == 2147483647
    assert first["ip"] == "192.168.0.1/24"
    assert second["nu"] == "NaN" and math.isnan(second["r"]) and second["dp"] == math.inf
    assert second["by"] == b"" and second["iv"] == timedelta(days=360 + 60 + 3, seconds=4 * 3600 + 5 * 60 + 6.789)
    assert second["ai"] == [] and second["js"] == "[]"
    assert all(v is None for k, v in nulls.items() if k not in ("id", "region"))
    assert last["r"] == -math.inf and last["tm"] is None  # 24:00:00 is no time of day Arrow can hold
    assert (
        last["iv"] == timedelta(days=-29)
        and last["jb"] == "null"
        and last["ts"] == datetime(9999, 12, 31, 23, 59, 59, 999999)
    )


def test_a_multi_dimensional_array_outside_the_key_is_refused_by_name(postgres, pg_database, make_pg_capture):
    """On main a two-dimensional value in a non-key int[] column stopped capture with a bare
    ValueError (and a dump likewise): now capture and dumps refuse it with one message naming the
    source, table, column, value and shape and the ways out; capture exits 2 and nothing of the
    refused transaction lands (another table's row in it neither)."""
    postgres.execute(
        "CREATE TABLE grid (id int PRIMARY KEY, m int[], v int)",
        "CREATE TABLE other (id int PRIMARY KEY)",
        database=pg_database,
    )
    capture = make_pg_capture().start()
    capture.wait_running()
    postgres.execute("INSERT INTO grid VALUES (1, '{1,2}', 1)", database=pg_database)
    capture.wait_events("public", "grid", 1)
    postgres.execute(
        "BEGIN; INSERT INTO other VALUES (1); INSERT INTO grid VALUES (2, '[0:1][1:3]={{1,2,3},{4,5,6}}', 2); COMMIT",
        database=pg_database,
    )
    refused = (
        "public.grid: column 'm' (integer[]) holds '[0:1][1:3]={{1,2,3},{4,5,6}}', a 2-dimensional array "
        "(2 x 3): only one-dimensional arrays land"
    )
    assert capture.wait_exit() == 2
    log = capture.log()
    assert refused in log, log[-3000:]
    assert "leave public.grid out of capture (exclude)" in log and "ALTER COLUMN m TYPE text" in log
    assert len(capture.events("public", "grid")) == 1
    assert capture.events("public", "other") == []  # nothing of the refused transaction
    engine, source = open_engine(capture)
    try:
        for request in (
            DumpRequest(tables=["public.grid"], settings=DumpSettings(chunk_size=1)),
            DumpRequest(tables=["public.grid"], keys=[2]),
        ):
            with pytest.raises(DumpInputError, match=re.escape(refused)):
                engine.run(request)
    finally:
        source.close()
