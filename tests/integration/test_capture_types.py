"""Every MariaDB type survives the trip database -> binlog -> landing zone with its value and type."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pyarrow as pa
import pytest

pytestmark = pytest.mark.integration

TYPES_TABLE = """
CREATE TABLE all_types (
  id INT NOT NULL, region CHAR(2) NOT NULL,
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED,
  mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
  d65 DECIMAL(65,30), d10 DECIMAL(10,2), f FLOAT, db DOUBLE,
  c CHAR(10), vc VARCHAR(100), tx TEXT, l1 VARCHAR(20) CHARACTER SET latin1,
  bn BINARY(4), vb VARBINARY(10), bl BLOB,
  dt DATE, dtm DATETIME(6), dts DATETIME, ts TIMESTAMP(6) NULL, tm TIME(6), yr YEAR,
  js JSON, en ENUM('small','medium','large'), st SET('a','b','c','d'),
  b1 BIT(1), b12 BIT(12), b64 BIT(64),
  PRIMARY KEY (id, region)
) CHARACTER SET utf8mb4
"""

ROWS = [
    # the extremes
    "(1, 'eu', -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295,"
    " -9223372036854775808, 18446744073709551615,"
    " '-12345678901234567890123456789012345.123456789012345678901234567890', -99999999.99,"
    " 1.5, -2.2250738585072014e-308,"
    " 'ab', 'emoji 🎉 ünïcödé', 'text ✓ 𝄞', 'café',"
    " X'00ff0000', X'00ff', X'0001ff00',"
    " '1000-01-01', '9999-12-31 23:59:59.999999', '2024-02-29 12:00:00', '2038-01-19 03:14:07.499999',"
    " '-838:59:59.000000', 1901,"
    " '{\"k\": [1, 2.5, \"ß\"], \"n\": null}', 'large', 'a,d', b'1', b'101010101010',"
    " b'1111111111111111111111111111111111111111111111111111111111111111')",
    # ordinary values
    "(2, 'us', 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, '0.000000000000000000000000000001', 0.01, 0.25,"
    " 3.141592653589793, 'x', '', 'short', 'naïve', X'01020304', X'', X'', '2024-01-01',"
    " '2024-01-01 00:00:00.000001',"
    " '2024-01-01 00:00:00', '1970-01-01 00:00:01', '838:59:59.999999', 2155, '[]', 'small', '', b'0',"
    " b'000000000001', b'0')",
    # NULL in every nullable column
    "(3, 'eu'" + ", NULL" * 33 + ")",
]


def _expected(column: str, value: object) -> object:
    """What the landing zone must hold for a value as PyMySQL's SELECT returns it (see types.py)."""
    if value is None:
        return None
    if column in ("b1", "b12", "b64"):
        return int.from_bytes(value, "big")  # type: ignore[arg-type]
    return value


def _landed(column: str, value: object) -> object:
    if value is None:
        return None
    if column == "d65":
        return Decimal(value)  # type: ignore[arg-type]
    if column in ("biu", "b64"):
        return int(value)  # type: ignore[arg-type]
    if column == "ts":
        assert isinstance(value, datetime) and value.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
        return value.replace(tzinfo=None)
    return value


def test_every_type_round_trips(mariadb, database, make_capture):
    mariadb.execute(TYPES_TABLE, database=database)
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        for row in ROWS:
            cur.execute(f"INSERT INTO all_types VALUES {row}")
        cur.execute("SELECT * FROM all_types ORDER BY id")
        names = [d[0] for d in cur.description]
        source = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    events = capture.wait_events(database, "all_types", len(ROWS))
    assert [e["_op"] for e in events] == ["c"] * len(ROWS)
    for want, event in zip(source, events, strict=True):
        got = event["after"]
        assert list(got) == names
        for column in names:
            assert _landed(column, got[column]) == _expected(column, want[column]), column

    data = capture.zone.read_table(database, "all_types")
    after = data.schema.field("after").type
    types = {after.field(i).name: after.field(i).type for i in range(after.num_fields)}
    assert types["tiu"] == pa.int16() and types["iu"] == pa.int64() and types["biu"] == pa.decimal128(20, 0)
    assert types["d10"] == pa.decimal128(10, 2) and types["d65"] == pa.string()
    assert types["f"] == pa.float32() and types["db"] == pa.float64()
    assert types["bn"] == pa.binary() and types["vc"] == pa.string()
    assert types["dtm"] == pa.timestamp("us") and types["ts"] == pa.timestamp("us", tz="UTC")
    assert types["tm"] == pa.duration("us") and types["dt"] == pa.date32()
    assert after.field("d65").metadata[b"source_type"] == b"decimal(65,30)"


def test_edge_values_of_time_and_year(mariadb, database, make_capture):
    mariadb.execute("CREATE TABLE edges (id INT PRIMARY KEY, t TIME(6), t0 TIME, y YEAR)", database=database)
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    values = [
        "(1, '-00:00:01.001', '-00:00:01', 0)",
        "(2, '-01:02:03.000004', '-838:59:59', 1901)",
        "(3, '-00:00:00.25', '00:00:00', 2155)",
        "(4, '-00:00:00.5', '838:59:59', NULL)",
        "(5, '-838:59:59.000000', '-00:00:00', 2000)",
        "(6, '25:00:00.001', '-12:00:00', 1999)",
    ]
    mariadb.execute(f"INSERT INTO edges VALUES {', '.join(values)}", database=database)
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, t, t0, y FROM edges ORDER BY id")
        source = [dict(zip(("id", "t", "t0", "y"), r, strict=True)) for r in cur.fetchall()]
    events = capture.wait_events(database, "edges", len(values))
    assert [e["after"] for e in events] == source


def test_dump_rows_have_the_same_types_and_values_as_log_rows(mariadb, database, make_capture):
    """The merge compares chunk rows with log rows: both paths must give identical values."""
    from capture.sources import open_chunk_source

    mariadb.execute(TYPES_TABLE, database=database)
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    for row in ROWS:
        mariadb.execute(f"INSERT INTO all_types VALUES {row}", database=database)
    mariadb.execute(
        "SET SESSION sql_mode = ''",
        "INSERT INTO all_types (id, region, dt, dtm, ts, yr) VALUES "
        "(4, 'eu', '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00', 0)",
        # partial zero dates: a zero month, day or year
        "INSERT INTO all_types (id, region, dt, dtm, dts) VALUES "
        "(5, 'eu', '2020-00-00', '2020-05-00 10:00:00.5', '0000-05-10 00:00:00')",
        database=database,
    )
    events = capture.wait_events(database, "all_types", len(ROWS) + 2)
    source = open_chunk_source("src", capture.config.source("src"))
    try:
        described = source.describe(database, "all_types")
        rows = source.select_chunk(described, None, None, None, 100)
    finally:
        source.close()
    landed = capture.zone.read_table(database, "all_types")
    assert described.row_type == landed.schema.field("after").type
    assert described.key == ("id", "region")
    assert rows.type == described.row_type
    as_arrow = rows.to_pylist()
    assert as_arrow == [e["after"] for e in events]
    assert as_arrow[-2]["dt"] is None and as_arrow[-2]["yr"] == 0  # zero dates as NULL on both paths
    assert as_arrow[-2]["ts"] == datetime(1970, 1, 1, tzinfo=UTC)  # a zero TIMESTAMP: epoch 0
    assert [as_arrow[-1][c] for c in ("dt", "dtm", "dts")] == [None, None, None]


def test_float_and_binary_values_are_exact_on_both_paths(mariadb, database, make_capture):
    """A FLOAT holds 24 bits of mantissa: both the log and a dump must land that float32, not the six
    digits the text protocol prints (887753.375 is not 887753.0). A BINARY(n) lands padded to n with
    0x00 as SELECT returns it, whatever its value (empty, all zero bytes, text-like bytes)."""
    from capture.sources import open_chunk_source

    mariadb.execute("CREATE TABLE exact (id INT PRIMARY KEY, f FLOAT, bn BINARY(4))", database=database)
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    floats = [887753.375, -532940.6875, 3.4028234663852886e38, -3.4028234663852886e38, 1.1754943508222875e-38, 0.1]
    binaries = [b"", b"\x00", b"\x00\x00\x00\x00", b"a", b"ab\x00", b"\xff\xff\xff\xff"]
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        for i, (f, b) in enumerate(zip(floats, binaries, strict=True)):
            cur.execute("INSERT INTO exact VALUES (%s, %s, %s)", (i, f, b))
        conn.commit()
        cur.execute("SELECT id, CAST(f AS DOUBLE), bn FROM exact ORDER BY id")
        source = [{"id": i, "f": f, "bn": bn} for i, f, bn in cur.fetchall()]
    assert [r["bn"] for r in source] == [b.ljust(4, b"\x00") for b in binaries]

    events = capture.wait_events(database, "exact", len(floats))
    assert [e["after"] for e in events] == source
    chunks = open_chunk_source("src", capture.config.source("src"))
    try:
        rows = chunks.select_chunk(chunks.describe(database, "exact"), None, None, None, 100).to_pylist()
    finally:
        chunks.close()
    assert rows == source
