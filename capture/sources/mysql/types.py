"""MySQL/MariaDB column types -> Arrow types (the binlog's values: `rows.py`; a dump's: the builders here).

Values keep their meaning and their range, and match what a plain SELECT returns, so that
log rows and dump rows compare equal:

  TINYINT..BIGINT        int8..int64; UNSIGNED widens (int16..int64), BIGINT UNSIGNED -> decimal(20,0)
  DECIMAL(p,s)           decimal128(p,s) up to p=38; beyond (Iceberg and Spark stop at 38) exact text
  FLOAT, DOUBLE          float32, float64
  CHAR/VARCHAR/TEXT      string (decoded with the column's charset)
  BINARY/VARBINARY/BLOB  binary (BINARY(n) padded with 0x00 to n, as SELECT returns it)
  DATE                   date32        DATETIME(n)  timestamp[us]     TIMESTAMP(n) timestamp[us, UTC]
  TIME(n)                duration[us] (TIME spans -838:59:59..838:59:59, not a time of day)
  YEAR                   int16         BIT(n)      int64, BIT(64) -> decimal(20,0)
  JSON                   string (JSON text; MariaDB's JSON is LONGTEXT and arrives as written)
  ENUM                   string (the error value, number 0, as ' ': `ENUM_ERROR_VALUE`)
  SET                    string, members in definition order joined by ',' (a '' member alone as
                         ',': `SET_EMPTY_MEMBER_ALONE`)
  GEOMETRY               binary (MySQL's internal SRID + WKB)
Dates with a zero part (0000-00-00, 2020-00-00, 2020-05-00, 0000-05-10; also in DATETIME) and days
their month does not have (2020-02-30: sql_mode ALLOW_INVALID_DATES) arrive as NULL, as the binlog
decoder gives them (PyMySQL's SELECT returns them as text); a zero
TIMESTAMP arrives as 1970-01-01 00:00:00 UTC (epoch 0 in the binlog, outside TIMESTAMP's range).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pymysql.converters
from pymysqlreplication.constants import FIELD_TYPE

from capture.events import Column, TableSchema
from capture.sources.mysql.column_types import definition, from_binlog

MAX_ARROW_DECIMAL = 38
# An ENUM's error value (number 0, which a permissive sql_mode writes for an invalid value) reads
# back as '', as a real '' member does: it lands as ' ', text no member can have (MariaDB/MySQL
# strip a member's trailing spaces), so that keys (error, 1) and ('', 1) stay two keys.
ENUM_ERROR_VALUE = " "
# A SET with a '' member: the server's text leaves that member's ',' out where no member before it is
# in the value (in SET('a','','b') {''} reads '' as the empty set does, {'',b} 'b' as {b} does). A SET
# lands as its members in definition order joined by ',' ({'',b} as ',b', text the server reads back as
# that value), and {''} alone as ',' (which it reads back as {''} too), so that every value is one key.
SET_EMPTY_MEMBER_ALONE = ","
_INTS = {
    FIELD_TYPE.TINY: ("tinyint", pa.int8(), pa.int16()),
    FIELD_TYPE.SHORT: ("smallint", pa.int16(), pa.int32()),
    FIELD_TYPE.INT24: ("mediumint", pa.int32(), pa.int32()),
    FIELD_TYPE.LONG: ("int", pa.int32(), pa.int64()),
    FIELD_TYPE.LONGLONG: ("bigint", pa.int64(), pa.decimal128(20, 0)),
}
_TEXT_TYPES = {FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING, FIELD_TYPE.STRING}
_BLOB_TYPES = {FIELD_TYPE.BLOB, FIELD_TYPE.TINY_BLOB, FIELD_TYPE.MEDIUM_BLOB, FIELD_TYPE.LONG_BLOB}


def column_type(col: Any) -> tuple[pa.DataType, str]:
    """Arrow type and source type name of a table map's column (`table_maps.BinlogColumn`)."""
    kind = col.type
    binary = (col.character_set_name or "").lower() == "binary"
    if kind in _INTS:
        name, signed, unsigned = _INTS[kind]
        return (unsigned, f"{name} unsigned") if col.unsigned else (signed, name)
    if kind == FIELD_TYPE.NEWDECIMAL:
        source = f"decimal({col.precision},{col.decimals})"
        if col.precision > MAX_ARROW_DECIMAL:
            return pa.string(), source
        return pa.decimal128(col.precision, col.decimals), source
    if kind == FIELD_TYPE.FLOAT:
        return pa.float32(), "float"
    if kind == FIELD_TYPE.DOUBLE:
        return pa.float64(), "double"
    if kind == FIELD_TYPE.STRING:
        if binary:
            return pa.binary(), f"binary({col.max_length})"
        return pa.string(), "char"
    if kind in _TEXT_TYPES:
        return (pa.binary(), "varbinary") if binary else (pa.string(), "varchar")
    if kind in _BLOB_TYPES:
        return (pa.binary(), "blob") if binary else (pa.string(), "text")
    if kind == FIELD_TYPE.JSON:
        return pa.string(), "json"
    if kind in (FIELD_TYPE.DATE, FIELD_TYPE.NEWDATE):
        return pa.date32(), "date"
    if kind in (FIELD_TYPE.DATETIME, FIELD_TYPE.DATETIME2):
        return pa.timestamp("us"), f"datetime({getattr(col, 'fsp', 0)})"
    if kind in (FIELD_TYPE.TIMESTAMP, FIELD_TYPE.TIMESTAMP2):
        # mysql-replication yields naive UTC datetimes; the Arrow type says UTC.
        return pa.timestamp("us", tz="UTC"), f"timestamp({getattr(col, 'fsp', 0)})"
    if kind in (FIELD_TYPE.TIME, FIELD_TYPE.TIME2):
        fsp = getattr(col, "fsp", 0)
        return pa.duration("us"), f"time({fsp})"
    if kind == FIELD_TYPE.YEAR:
        return pa.int16(), "year"
    if kind == FIELD_TYPE.BIT:
        if col.bits == 64:
            return pa.decimal128(20, 0), "bit(64)"
        return pa.int64(), f"bit({col.bits})"
    if kind == FIELD_TYPE.ENUM:
        return pa.string(), "enum"
    if kind == FIELD_TYPE.SET:
        return pa.string(), "set"
    if kind == FIELD_TYPE.GEOMETRY:
        return pa.binary(), "geometry"
    raise NotImplementedError(f"column {col.name!r}: MySQL type code {kind} is not supported")


ColumnBuilder = Callable[[list[Any]], pa.Array]
_TEXT_DECODED = (FIELD_TYPE.DECIMAL, FIELD_TYPE.NEWDECIMAL, FIELD_TYPE.DATE, FIELD_TYPE.DATETIME, FIELD_TYPE.TIMESTAMP)


def select_conversions() -> dict[int, Any]:
    """PyMySQL decoders for chunk SELECTs: DECIMAL, DATE, DATETIME and TIMESTAMP stay raw text
    (Arrow parses whole columns of them far faster than Python parses values one by one);
    BIT becomes its integer value."""
    conv = dict(pymysql.converters.conversions)
    for field_type in _TEXT_DECODED:
        conv[field_type] = _raw
    conv[FIELD_TYPE.BIT] = lambda data: int.from_bytes(data, "big")
    return conv


def _raw(data: Any) -> Any:
    return data


def _python(arrow_type: pa.DataType) -> ColumnBuilder:
    return lambda values: pa.array(values, type=arrow_type)


def _text(values: list[Any]) -> pa.Array:
    return pa.array(values, type=pa.binary()).cast(pa.string())


# a DATE or DATETIME text with a zero year, month or day: '0000-00-00', '2020-00-00', '0000-05-10 ...'
_ZERO_PART = r"^(0000-|\d{4}-00-|\d{4}-\d\d-00)"


def _parsed(arrow_type: pa.DataType, zero: str | None = None) -> ColumnBuilder:
    """Raw text -> `arrow_type` by Arrow's cast. Dates with a zero year, month or day become NULL
    (as mysql-replication decodes them from the binlog), or `zero` when given (a zero TIMESTAMP is
    epoch 0 in the binlog)."""
    naive = pa.timestamp("us") if pa.types.is_timestamp(arrow_type) else arrow_type

    def build(values: list[Any]) -> pa.Array:
        text = _text(values)
        if pa.types.is_temporal(arrow_type):
            zeros = pc.match_substring_regex(text, _ZERO_PART)
            replacement = pa.scalar(zero, pa.string())
            text = pc.if_else(zeros, replacement, text)
        try:
            return text.cast(naive).cast(arrow_type)  # naive -> UTC: the session time_zone is '+00:00'
        except pa.ArrowInvalid:
            if not pa.types.is_temporal(arrow_type):
                raise
            return _real_days(text).cast(naive).cast(arrow_type)

    return build


def _real_days(text: pa.Array) -> pa.Array:
    """`text` with NULL for each date whose day its month does not have ('2020-02-30', '2021-02-29
    10:00:00': sql_mode ALLOW_INVALID_DATES stores any day 1-31), as the binlog decoder gives them."""

    def real(value: str | None) -> str | None:
        if value is None:
            return None
        try:
            date(int(value[:4]), int(value[5:7]), int(value[8:10]))
        except ValueError:
            return None
        return value

    return pa.array([real(v) for v in text.to_pylist()], pa.string())


def column_from_catalog(info: dict[str, Any]) -> tuple[pa.DataType, str, ColumnBuilder]:
    """The same mapping from an information_schema.COLUMNS row, with the builder that turns
    a column of SELECT values (see `select_conversions`) into an Arrow array."""
    data_type = info["DATA_TYPE"].lower()
    column_type = info["COLUMN_TYPE"].lower()
    unsigned = "unsigned" in column_type
    if data_type in _CATALOG_INTS:
        name, signed, wide = _INTS[_CATALOG_INTS[data_type]]
        arrow, source = (wide, f"{name} unsigned") if unsigned else (signed, name)
        return arrow, source, _python(arrow)
    if data_type == "decimal":
        precision, scale = int(info["NUMERIC_PRECISION"]), int(info["NUMERIC_SCALE"])
        source = f"decimal({precision},{scale})"
        if precision > MAX_ARROW_DECIMAL:
            return pa.string(), source, _text
        return pa.decimal128(precision, scale), source, _parsed(pa.decimal128(precision, scale))
    if data_type in ("float", "double"):
        arrow = pa.float32() if data_type == "float" else pa.float64()
        return arrow, data_type, _python(arrow)
    precision = int(info["DATETIME_PRECISION"] or 0)
    simple: dict[str, tuple[pa.DataType, str]] = {
        "binary": (pa.binary(), f"binary({info['CHARACTER_OCTET_LENGTH']})"),
        "char": (pa.string(), "char"),
        "varchar": (pa.string(), "varchar"),
        "varbinary": (pa.binary(), "varbinary"),
        "enum": (pa.string(), "enum"),
        "set": (pa.string(), "set"),
        "json": (pa.string(), "json"),
        "time": (pa.duration("us"), f"time({precision})"),
        "year": (pa.int16(), "year"),
        **{t: (pa.string(), "text") for t in ("tinytext", "text", "mediumtext", "longtext")},
        **{t: (pa.binary(), "blob") for t in ("tinyblob", "blob", "mediumblob", "longblob")},
        **{t: (pa.binary(), "geometry") for t in _GEOMETRY},
    }
    if data_type in simple:
        arrow, source = simple[data_type]
        return arrow, source, _python(arrow)
    if data_type == "date":
        return pa.date32(), "date", _parsed(pa.date32())
    if data_type == "datetime":
        return pa.timestamp("us"), f"datetime({precision})", _parsed(pa.timestamp("us"))
    if data_type == "timestamp":
        arrow = pa.timestamp("us", tz="UTC")
        return arrow, f"timestamp({precision})", _parsed(arrow, zero="1970-01-01 00:00:00")
    if data_type == "bit":
        bits = int(info["NUMERIC_PRECISION"])
        arrow = pa.decimal128(20, 0) if bits == 64 else pa.int64()
        return arrow, f"bit({bits})", _python(arrow)
    raise NotImplementedError(f"column {info['COLUMN_NAME']!r}: type {column_type} is not supported")


_CATALOG_INTS = {
    "tinyint": FIELD_TYPE.TINY,
    "smallint": FIELD_TYPE.SHORT,
    "mediumint": FIELD_TYPE.INT24,
    "int": FIELD_TYPE.LONG,
    "bigint": FIELD_TYPE.LONGLONG,
}
_GEOMETRY = {
    "geometry",
    "point",
    "linestring",
    "polygon",
    "multipoint",
    "multilinestring",
    "multipolygon",
    "geometrycollection",
}


def table_schema(schema: str, table: str, columns: Any, key: tuple[str, ...]) -> TableSchema:
    """The table's schema from its table map's columns (`table_maps.BinlogColumn`) and key; each
    column's whole type as its `definition` (`column_types.definition`)."""
    described = tuple(Column(col.name, *column_type(col), definition(from_binlog(col))) for col in columns)
    return TableSchema(schema, table, described, key)
