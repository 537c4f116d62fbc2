"""The merge's inline tables (`values_frame`): its own values reach Spark exactly, whatever text they
hold (a dump id is the user's, a chunk path the file system's), with no Spark job to read them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from capture.merge.spark_types import values_frame
from capture.merge.table import CHUNK_COLUMNS

pytestmark = pytest.mark.spark


def test_inline_tables_hold_hostile_text_lsns_and_times_exactly(spark):
    east = timezone(timedelta(hours=5, minutes=30))
    rows = [
        ("file:/tmp/a b/ü'x\\y\".parquet", 0, 2**64 + 1, Decimal(2**100), datetime(1, 1, 1, tzinfo=UTC), "'); DROP", 1),
        ("", 1, 0, 1, datetime(2026, 11, 24, 5, 31, 2, 345678, tzinfo=east), "d\n\x00💥", -2),
        ("f", 2, 5, 6, None, "", 3),
    ]
    frame = values_frame(spark, CHUNK_COLUMNS, rows)
    assert frame.schema.simpleString() == (
        "struct<_file:string,_cid:int,_low:decimal(38,0),_high:decimal(38,0),_high_ts:timestamp,"
        "_dump_id:string,_chunk:int>"
    )
    assert "LocalTableScan" in frame._jdf.queryExecution().executedPlan().toString()
    # times compared as microseconds: Python cannot hold year 1 in a zone west of UTC
    got = frame.selectExpr("_file", "_cid", "_low", "_high", "unix_micros(_high_ts)", "_dump_id", "_chunk").collect()
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    micros = [None if r[4] is None else (r[4] - epoch) // timedelta(microseconds=1) for r in rows]
    expected = [(r[0], r[1], Decimal(r[2]), Decimal(r[3]), us, r[5], r[6]) for r, us in zip(rows, micros, strict=True)]
    assert [tuple(r) for r in got] == expected
    lists = values_frame(spark, [("_cid", "int"), ("_xip", "array<bigint>")], [(1, []), (2, [1, 2**40])])
    assert [tuple(r) for r in lists.collect()] == [(1, []), (2, [1, 2**40])]
