"""User-given key values (--keys, --from, --to) are taken as the column stores them, so that the
database and the merge (Spark) see the same key: a value the column would round is refused,
not rounded by one and compared unrounded by the other."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pyarrow as pa
import pytest

from capture.dump.keys import coerce_key
from capture.errors import DumpInputError
from capture.events import Column, TableSchema


def _table(arrow_type: pa.DataType) -> TableSchema:
    return TableSchema("db", "t", (Column("k", arrow_type, "x"), Column("v", pa.int32(), "int")), ("k",))


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1.5", Decimal("1.5")), ("1.50", Decimal("1.50")), (-9999, Decimal(-9999)), ("0.000", Decimal("0.000"))],
)
def test_a_decimal_key_the_column_holds_is_kept(value, expected):
    assert coerce_key(_table(pa.decimal128(5, 1)), value) == (expected,)


@pytest.mark.parametrize("value", ["1.55", "10000", "1e5", "NaN", "Infinity"])
def test_a_decimal_key_the_column_would_round_or_cannot_hold_is_refused(value):
    with pytest.raises(DumpInputError, match=r"for column 'k' is not a decimal\(5,1\) value"):
        coerce_key(_table(pa.decimal128(5, 1)), value)


def test_a_float_key_is_the_single_precision_value_the_column_stores():
    (value,) = coerce_key(_table(pa.float32()), 0.1)
    assert value == 0.10000000149011612 and coerce_key(_table(pa.float64()), 0.1) == (0.1,)


def test_timestamp_keys_are_instants_in_utc_or_wall_times_without_an_offset():
    zoned = _table(pa.timestamp("us", tz="UTC"))
    assert coerce_key(zoned, "2024-01-01T02:00:00+02:00") == (datetime(2024, 1, 1, tzinfo=UTC),)
    assert coerce_key(zoned, "2024-01-01T00:00:00") == (datetime(2024, 1, 1, tzinfo=UTC),)
    naive = _table(pa.timestamp("us"))
    assert coerce_key(naive, "2024-01-01T00:00:00") == (datetime(2024, 1, 1),)
    with pytest.raises(DumpInputError, match="without a UTC offset"):
        coerce_key(naive, "2024-01-01T00:00:00+02:00")
