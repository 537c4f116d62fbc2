"""PostgreSQL pieces that need no server: pgoutput messages, text -> Arrow parsing, chunk SQL."""

from __future__ import annotations

import struct
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

import pyarrow as pa
import pytest

from capture.sources.postgres import pgoutput
from capture.sources.postgres.connection import format_lsn, parse_lsn
from capture.sources.postgres.sql import chunk_select, keys_select, quote
from capture.sources.postgres.types import (
    TypeInfo,
    array_literal,
    builder,
    column_type,
    interval_micros,
    parse_array,
)

pytestmark = pytest.mark.unit


def _tuple(*values) -> bytes:
    out = struct.pack(">h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is pgoutput.UNCHANGED:
            out += b"u"
        else:
            data = v.encode()
            out += b"t" + struct.pack(">I", len(data)) + data
    return out


def test_pgoutput_messages():
    lsn, micros, xid = pgoutput.begin_fields(b"B" + struct.pack(">qqI", 0x1_0000_0010, 86_400_000_000, 745))
    assert (lsn, pgoutput.timestamp(micros), xid) == (0x1_0000_0010, datetime(2000, 1, 2, tzinfo=UTC), 745)
    assert pgoutput.commit_fields(b"C" + struct.pack(">bqqq", 0, 0x10, 0x40, 0)) == (0x40, 0)
    relation = pgoutput.parse_relation(
        b"R"
        + struct.pack(">I", 16392)
        + b"public\x00t\x00d"
        + struct.pack(">h", 2)
        + b"\x01id\x00"
        + struct.pack(">Ii", 23, -1)
        + b"\x00n\x00"
        + struct.pack(">Ii", 1700, 655366)
    )
    assert relation.schema == "public" and relation.table == "t" and relation.replica_identity == "d"
    assert relation.columns == (
        pgoutput.RelationColumn("id", 23, -1, True),
        pgoutput.RelationColumn("n", 1700, 655366, False),
    )
    update = pgoutput.parse_change(
        b"U" + struct.pack(">I", 16392) + b"K" + _tuple("1", None) + b"N" + _tuple("2", pgoutput.UNCHANGED)
    )
    assert (update.kind, update.old_kind, update.old, update.new) == ("U", "K", ["1", None], ["2", pgoutput.UNCHANGED])
    plain = pgoutput.parse_change(b"U" + struct.pack(">I", 7) + b"N" + _tuple("é", "x"))
    assert plain.old is None and plain.new == ["é", "x"]
    delete = pgoutput.parse_change(b"D" + struct.pack(">I", 7) + b"O" + _tuple("1", "a"))
    assert (delete.old_kind, delete.old, delete.new) == ("O", ["1", "a"], None)
    truncate = pgoutput.parse_truncate(b"T" + struct.pack(">ib", 2, 0) + struct.pack(">II", 5, 6))
    assert truncate.relations == (5, 6)
    assert parse_lsn("1A/2B3C") == 0x1A_0000_2B3C and format_lsn(0x1A_0000_2B3C) == "1A/2B3C"


def _build(name: str, values: list, typmod: int = -1, element: TypeInfo | None = None) -> pa.Array:
    return builder(TypeInfo(0, name, "b", element, typmod))(values)


def test_text_values_become_typed_arrow_columns():
    assert _build("int8", ["-9223372036854775808", None]).to_pylist() == [-(2**63), None]
    assert _build("numeric", ["1.50", "NaN"], typmod=(10 << 16 | 2) + 4).to_pylist() == [Decimal("1.50"), None]
    assert column_type(TypeInfo(0, "numeric", "b", None, -1))[0] == pa.string()  # unconstrained: exact text
    assert column_type(TypeInfo(0, "numeric", "b", None, (50 << 16 | 2) + 4))[0] == pa.string()
    assert _build("bool", ["t", "f", None]).to_pylist() == [True, False, None]
    assert _build("bytea", ["\\x00ff", "\\x"]).to_pylist() == [b"\x00\xff", b""]
    # outside 0001-01-01 .. 9999-12-31: the nearest end of it (README, PostgreSQL types)
    far = ["infinity", "-infinity", "0044-03-15 BC", "10000-01-01", "5874897-12-31", "0001-01-01", None]
    assert _build("date", ["2024-02-29", *far]).to_pylist() == [
        date(2024, 2, 29), date.max, date.min, date.min, date.max, date.max, date(1, 1, 1), None,
    ]  # fmt: skip
    far = ["infinity", "-infinity", "0044-03-15 12:00:00 BC", "294276-12-31 23:59:59", "9999-12-31 23:59:59.999999"]
    assert _build("timestamp", far).to_pylist() == [datetime.max, datetime.min, datetime.min, datetime.max,
                                                    datetime(9999, 12, 31, 23, 59, 59, 999999)]  # fmt: skip
    far = ["infinity", "0001-12-31 23:00:00+00 BC", "10000-01-01 00:59:59.999999+00", "1000-01-01 06:30:00+00"]
    assert _build("timestamptz", far).to_pylist() == [
        datetime.max.replace(tzinfo=UTC), datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC),
        datetime(1000, 1, 1, 6, 30, tzinfo=UTC),
    ]  # fmt: skip
    with pytest.raises(ValueError):  # not a date PostgreSQL writes (DateStyle ISO): no silent NULL
        _build("date", ["29.02.2024"])
    assert _build("timestamptz", ["2024-01-01 10:00:00.5+00"]).to_pylist() == [
        datetime(2024, 1, 1, 10, 0, 0, 500000, tzinfo=UTC)
    ]
    assert _build("time", ["23:59:59.999999", "24:00:00"]).to_pylist() == [time(23, 59, 59, 999999), None]
    assert _build("interval", ["P1Y2M3DT4H5M6.7S", "PT0S"]).to_pylist() == [
        timedelta(days=360 + 60 + 3, hours=4, minutes=5, seconds=6.7),
        timedelta(0),
    ]
    assert interval_micros("P-1Y-2M3DT-4H-5M-6.000001S") == -(
        (420 - 3) * 86_400_000_000 + (4 * 3600 + 5 * 60 + 6) * 1_000_000 + 1
    )
    ints = TypeInfo(0, "int4", "b", None, -1)
    assert _build("_int4", ["{1,NULL,-3}", "{}", None], element=ints).to_pylist() == [[1, None, -3], [], None]


def test_array_literals():
    assert parse_array('{"a b","c\\"d\\\\e",NULL,"NULL","",x}') == ["a b", 'c"d\\e', None, "NULL", "", "x"]
    assert parse_array("[0:1]={1,2}") == ["1", "2"]
    with pytest.raises(ValueError, match="multi-dimensional"):
        parse_array("{{1,2},{3,4}}")


def test_chunk_sql_uses_row_comparisons_and_bound_values():
    assert quote('we"ird') == '"we""ird"'
    sql, params = chunk_select(
        "s", "t", ["a", "b", "v"], ["a", "b"], (1, "x"), None, (9, "z"), 100, [True, False, True]
    )
    assert sql == (
        'SELECT "a"::text, "b", "v"::text FROM "s"."t" WHERE ("a", "b") > (%s, %s) AND ("a", "b") <= (%s, %s)'
        ' ORDER BY "s"."t"."a", "s"."t"."b" LIMIT %s'
    )
    assert params == [1, "x", 9, "z", 100]
    sql, params = chunk_select("s", "t", ["id"], ["id"], None, (5,), None, 10)
    assert sql == 'SELECT "id" FROM "s"."t" WHERE "id" >= %s ORDER BY "s"."t"."id" LIMIT %s' and params == [5, 10]
    # the key's text selected with the chunk; the next chunk goes on after it, cast to the key's types
    sql, params = chunk_select(
        "s",
        "t",
        ["k", "i"],
        ["k", "i"],
        (None, 2),
        None,
        (9, 1),
        5,
        key_types=["numeric(10,2)", 'x."10%"'],
        after_source=["NaN", "2"],
    )
    assert sql == (
        'SELECT "k", "i", "k"::text, "i"::text FROM "s"."t" WHERE ("k", "i") > (%s::numeric(10,2), %s::x."10%%")'
        ' AND ("k", "i") <= (%s, %s) ORDER BY "s"."t"."k", "s"."t"."i" LIMIT %s'
    )
    assert params == ["NaN", "2", 9, 1, 5]
    sql, params = chunk_select("s", "t", ["d"], ["d"], None, ("2020-01-01",), None, 2, key_types=["date"])
    assert sql == 'SELECT "d", "d"::text FROM "s"."t" WHERE "d" >= %s ORDER BY "s"."t"."d" LIMIT %s'
    sql, params = chunk_select(
        "s", "t", ["d"], ["d"], (date(1, 1, 1),), None, None, 2, key_types=["date"], after_source=["-infinity"]
    )
    assert sql == 'SELECT "d", "d"::text FROM "s"."t" WHERE "d" > %s::date ORDER BY "s"."t"."d" LIMIT %s'
    sql, params = keys_select("s", "t", ["a", "b"], ["a", "b"], [(1, "x"), (2, "y")])
    assert sql == (
        'SELECT "a", "b" FROM "s"."t" WHERE ("a", "b") IN ((%s, %s), (%s, %s)) ORDER BY "s"."t"."a", "s"."t"."b"'
    )
    assert params == [1, "x", 2, "y"]
    # an array key part is bound as its text, cast to the column's type (ARRAY[...] of text would be text[])
    sql, params = keys_select("s", "t", ["a", "b"], ["a", "b"], [(1, "{x}")], casts=[None, "mood[]"])
    assert (
        sql == 'SELECT "a", "b" FROM "s"."t" WHERE ("a", "b") IN ((%s, %s::mood[])) ORDER BY "s"."t"."a", "s"."t"."b"'
    )


def test_array_literal_names_the_landed_array():
    values = [None, "a,b", 'q"x', "b\\s", "NULL", "", "{}"]
    assert array_literal(values) == '{NULL,"a,b","q\\"x","b\\\\s","NULL","","{}"}'
    assert parse_array(array_literal(values)) == values
    special = [float("nan"), float("-inf"), -0.0, b"\x00", Decimal("1.50"), date(2020, 1, 2), timedelta(seconds=1)]
    assert array_literal(special) == ('{"NaN","-Infinity","-0.0","\\\\x00","1.50","2020-01-02","1000000 microseconds"}')
