"""Which key columns the merge may judge by Spark's order (range repair deletes): the sources'
catalog rules, case by case (README, Merge: keys and their order). The collation tests in
tests/spark/test_merge_collation.py check the recorded answer against real servers."""

from __future__ import annotations

import pyarrow as pa
import pytest

from capture.sources.mysql import catalog as mysql
from capture.sources.postgres import catalog as postgres
from capture.sources.postgres.types import TypeInfo


@pytest.mark.parametrize(
    ("data_type", "charset", "collation", "precision", "exact"),
    [
        ("int", None, None, 10, True),
        ("bigint", None, None, 20, True),
        ("decimal", None, None, 38, True),
        ("decimal", None, None, 50, False),  # lands as text
        ("datetime", None, None, None, True),
        ("time", None, None, None, True),
        ("varbinary", None, None, None, True),
        ("binary", None, None, None, True),
        ("varchar", "utf8mb4", "utf8mb4_nopad_bin", None, True),
        ("text", "utf8mb3", "utf8mb3_nopad_bin", None, True),
        ("varchar", "utf8mb4", "utf8mb4_bin", None, False),  # PAD SPACE
        ("varchar", "utf8mb4", "utf8mb4_general_ci", None, False),
        ("varchar", "utf8mb4", "utf8mb4_nopad_general_ci", None, False),
        ("varchar", "latin1", "latin1_nopad_bin", None, False),  # cp1252: not code point order
        ("char", "utf8mb4", "utf8mb4_nopad_bin", None, False),
        ("double", None, None, None, False),
        ("float", None, None, None, False),
        ("enum", "utf8mb4", "utf8mb4_bin", None, False),
    ],
)
def test_mariadb_key_order(data_type, charset, collation, precision, exact):
    info = {"DATA_TYPE": data_type, "CHARACTER_SET_NAME": charset, "COLLATION_NAME": collation}
    assert mysql.exact_order({**info, "NUMERIC_PRECISION": precision}) is exact


def _pg(name: str, kind: str = "b", element: TypeInfo | None = None) -> TypeInfo:
    return TypeInfo(0, name, kind, element, -1)


@pytest.mark.parametrize(
    ("info", "arrow_type", "collation", "encoding", "exact"),
    [
        (_pg("int8"), pa.int64(), None, "UTF8", True),
        (_pg("uuid"), pa.string(), None, "UTF8", True),
        (_pg("bytea"), pa.binary(), None, "UTF8", True),
        (_pg("timestamptz"), pa.timestamp("us", tz="UTC"), None, "UTF8", True),
        (_pg("numeric"), pa.decimal128(12, 2), None, "UTF8", True),
        (_pg("numeric"), pa.string(), None, "UTF8", False),  # unconstrained or beyond 38 digits: text
        (_pg("text"), pa.string(), ["c", "C", None], "UTF8", True),
        (_pg("varchar"), pa.string(), ["c", "POSIX", None], "UTF8", True),
        (_pg("text"), pa.string(), ["b", None, "C.UTF-8"], "UTF8", True),  # PostgreSQL 17 builtin
        (_pg("text"), pa.string(), ["c", "C", None], "LATIN1", False),
        (_pg("text"), pa.string(), ["c", "C.UTF-8", None], "UTF8", False),  # libc: not guaranteed
        (_pg("text"), pa.string(), ["c", "en_US.utf8", None], "UTF8", False),
        (_pg("text"), pa.string(), ["i", "C", "und-u-ks-level2"], "UTF8", False),  # database default ICU
        (_pg("bpchar"), pa.string(), ["c", "C", None], "UTF8", False),
        (_pg("float8"), pa.float64(), None, "UTF8", False),
        (_pg("interval"), pa.duration("us"), None, "UTF8", False),
        (_pg("mood", "e"), pa.string(), None, "UTF8", False),
        (_pg("_int4", element=_pg("int4")), pa.list_(pa.int32()), None, "UTF8", False),
    ],
)
def test_postgres_key_order(info, arrow_type, collation, encoding, exact):
    assert postgres.exact_order(info, arrow_type, collation, encoding) is exact
