"""Key values a user gives (dump ranges, key lists): checked against the key's column types.
Their JSON form for progress files and chunk metadata is capture/landing/keys.py."""

from __future__ import annotations

import struct
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from capture.errors import DumpInputError
from capture.events import Row, TableSchema


def _coerce(column: str, arrow_type: pa.DataType, value: Any) -> Any:
    """A user-given key value (JSON: number or string) as the Python value of the column's type."""

    def wrong(expected: str) -> DumpInputError:
        return DumpInputError(f"key value {value!r} for column {column!r} is not {expected}")

    if value is None:
        raise DumpInputError(f"key value for column {column!r} is null; key columns are never null")
    if pa.types.is_list(arrow_type):
        return _coerce_list(column, arrow_type.value_type, value)
    if pa.types.is_integer(arrow_type) or (pa.types.is_decimal(arrow_type) and arrow_type.scale == 0):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise wrong("an integer")
        try:
            return int(value)
        except ValueError:
            raise wrong("an integer") from None
    if pa.types.is_decimal(arrow_type):
        try:
            number = Decimal(str(value))
        except InvalidOperation:
            raise wrong("a decimal number") from None
        if not _fits(number, arrow_type.precision, arrow_type.scale):
            raise wrong(f"a decimal({arrow_type.precision},{arrow_type.scale}) value")
        return number
    if pa.types.is_floating(arrow_type):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise wrong("a number")
        if pa.types.is_float32(arrow_type):  # the stored single-precision value, as the database compares it
            return struct.unpack("f", struct.pack("f", float(value)))[0]
        return float(value)
    if not isinstance(value, str):
        raise wrong("a string")
    try:
        if pa.types.is_binary(arrow_type):
            return bytes.fromhex(value.removeprefix("0x"))
        if pa.types.is_timestamp(arrow_type):
            return _timestamp(datetime.fromisoformat(value), arrow_type.tz is not None, wrong)
        if pa.types.is_date(arrow_type):
            return date.fromisoformat(value)
    except ValueError:
        raise wrong(f"a valid {arrow_type} (hex for binary, ISO 8601 for dates)") from None
    return value


def _coerce_list(column: str, element: pa.DataType, value: Any) -> Any:
    """A PostgreSQL array key value: a JSON list, its elements as the element type's values (null
    for a NULL element), or a string, the array's text ('{1,2}'), which the source reads as the
    database does (ChunkSource.landed_keys)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise DumpInputError(
            f"key value {value!r} for column {column!r} is not an array: give a JSON list such as [1, 2] or the "
            "array's text such as '{1,2}'"
        )
    if any(isinstance(v, list) for v in value):
        raise DumpInputError(f"key value {value!r} for column {column!r}: only one-dimensional arrays land as lists")
    return [None if v is None else _coerce(column, element, v) for v in value]


def _fits(number: Decimal, precision: int, scale: int) -> bool:
    """Whether the column holds `number` exactly: a value it would round (more places than its
    scale) is compared unrounded by the database but rounded by Spark, which then sees another key."""
    if not number.is_finite():
        return False
    if number.is_zero():
        return True
    exponent = number.normalize().as_tuple().exponent
    places = -exponent if isinstance(exponent, int) and exponent < 0 else 0
    return places <= scale and number.adjusted() < precision - scale


def _timestamp(value: datetime, zoned: bool, wrong: Callable[[str], DumpInputError]) -> datetime:
    """A key value for a timestamp column as the database and Spark both read it: with time zone
    (TIMESTAMP, timestamptz) the instant in UTC (without an offset: UTC); without, the wall time,
    which an offset would make ambiguous (the drivers disagree on what it means)."""
    if zoned:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if value.tzinfo is not None:
        raise wrong("a date and time without a UTC offset (the column has no time zone)")
    return value


def coerce_key(table: TableSchema, values: Any) -> Row:
    """A key as given by a user (a scalar for one-column keys, else a list) -> typed tuple. A
    one-column key of an array type takes its value as given: a list is the array, not its parts."""
    types = {c.name: c.arrow_type for c in table.columns}
    one_array = len(table.key) == 1 and pa.types.is_list(types[table.key[0]])
    parts = values if isinstance(values, (list, tuple)) and not one_array else [values]
    if len(parts) != len(table.key):
        raise DumpInputError(
            f"key {values!r} has {len(parts)} value(s); {table.qualified_name} is keyed by "
            f"{len(table.key)} column(s): {', '.join(table.key)}"
        )
    return tuple(_coerce(column, types[column], v) for column, v in zip(table.key, parts, strict=True))
