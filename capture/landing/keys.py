"""Key values encoded as JSON for progress files and chunk metadata without losing their type
(decimals, bytes, dates, times of day, durations and lists (PostgreSQL array keys) as tagged
objects), and `hashable`: a key as a set member or dict key (lists as tuples)."""

from __future__ import annotations

import base64
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from capture.events import Row


def encode_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if value is NAN:  # a key compared through `hashable`
        return float("nan")
    if isinstance(value, Decimal):
        return {"decimal": format(value, "f")}
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    if isinstance(value, datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, date):
        return {"date": value.isoformat()}
    if isinstance(value, timedelta):
        return {"micros": value // timedelta(microseconds=1)}
    if isinstance(value, time):  # PostgreSQL time (MariaDB's TIME is a timedelta)
        return {"time": value.isoformat()}
    if isinstance(value, (list, tuple)):  # a PostgreSQL array key lands as a list
        return {"list": [encode_value(v) for v in value]}
    raise TypeError(f"cannot encode key value of type {type(value).__name__}")


def decode_value(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    ((kind, text),) = value.items()
    return {
        "decimal": Decimal,
        "base64": base64.b64decode,
        "datetime": datetime.fromisoformat,
        "date": date.fromisoformat,
        "micros": lambda n: timedelta(microseconds=n),
        "time": time.fromisoformat,
        "list": lambda items: [decode_value(v) for v in items],
    }[kind](text)


def encode_key(key: Row | None) -> list[Any] | None:
    return None if key is None else [encode_value(v) for v in key]


def decode_key(key: list[Any] | None) -> Row | None:
    return None if key is None else tuple(decode_value(v) for v in key)


class _NaN:
    """A float NaN in a key (PostgreSQL's float4/float8 'NaN', alone or in an array): one value, as
    the database compares it (NaN = NaN) and Spark's MERGE does, where Python's NaN equals nothing."""

    def __repr__(self) -> str:
        return "NaN"


NAN = _NaN()


def hashable(key: Row) -> Row:
    """`key` with its list values (PostgreSQL array keys, as Arrow gives them) as tuples, element
    lists too, and float NaN as `NAN`: a set member or dict key that equals another key's exactly
    when their values do. A key with neither (the usual one) is returned as it is: building it again
    value by value cost about as much as the rest of a chunk row's reconciliation (README, Outputs)."""
    for value in key:
        if isinstance(value, list | float):
            return tuple(_frozen(v) for v in key)
    return key if type(key) is tuple else tuple(key)


def _frozen(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, float) and value != value:
        return NAN
    return value
