"""Rows of WRITE/UPDATE/DELETE_ROWS events, decoded by a decoder compiled once per table map.

mysql-replication decodes every value through a chain of method calls on event objects (0.3 to
0.5 ms of CPU a single-row transaction here, README "Small transactions"). A `RowDecoder`
instead holds one small reader per column, chosen once from the table map: a precompiled
struct, or a closure that knows its column's width, charset and scale. Values are what a plain
SELECT returns, typed as `types.py` says:

  BINARY(n)   padded with 0x00 to n (the binlog drops trailing zero bytes)
  YEAR 0000   0;  SET: members in definition order joined by ',' ('' when empty)
  BIT(n)      its integer value;  DECIMAL(p>38): exact text;  MySQL JSON: JSON text
  DATE/DATETIME with a zero year, month or day: NULL;  a zero TIMESTAMP: 1970-01-01 00:00:00
  TIME        a signed timedelta (MySQL's packed TIME, negative fractions included)

A column type or charset this module does not know fails the table map's first rows event with
an error naming the table, column and type, and a row image that leaves columns out (written by a
session with binlog_row_image MINIMAL or NOBLOB) fails too: nothing is guessed.
"""

from __future__ import annotations

import codecs
import json
import struct
from collections.abc import Callable
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.json_binary import parse_json

from capture.errors import BinlogDecodeError
from capture.events import Row
from capture.sources.mysql.table_maps import BinlogColumn, TableMap, python_encoding
from capture.sources.mysql.types import ENUM_ERROR_VALUE, MAX_ARROW_DECIMAL, SET_EMPTY_MEMBER_ALONE

Reader = Callable[[bytes, int], tuple[Any, int]]

_EPOCH = datetime(1970, 1, 1)
_ENUM_SET = (FIELD_TYPE.ENUM, FIELD_TYPE.SET)
# the pre-5.6 formats: whole seconds only (`reader` refuses such columns with fractions)
OLD_TEMPORAL = (FIELD_TYPE.DATETIME, FIELD_TYPE.TIME, FIELD_TYPE.TIMESTAMP)
_DECIMAL_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)  # bytes of a group of 0..9 decimal digits
_INVERT = bytes(255 - b for b in range(256))
_FRACTION_SCALE = (0, 10_000, 10_000, 100, 100, 1, 1)  # stored fraction unit in µs, per fsp
_FIXED = {
    (FIELD_TYPE.TINY, False): "<b",
    (FIELD_TYPE.TINY, True): "<B",
    (FIELD_TYPE.SHORT, False): "<h",
    (FIELD_TYPE.SHORT, True): "<H",
    (FIELD_TYPE.LONG, False): "<i",
    (FIELD_TYPE.LONG, True): "<I",
    (FIELD_TYPE.LONGLONG, False): "<q",
    (FIELD_TYPE.LONGLONG, True): "<Q",
    (FIELD_TYPE.FLOAT, False): "<f",
    (FIELD_TYPE.DOUBLE, False): "<d",
}


class RowDecoder:
    """Decodes the row images of one table map's rows events into value tuples."""

    def __init__(self, table_map: TableMap) -> None:
        self.where = f"{table_map.schema}.{table_map.table}"
        self.columns = table_map.columns
        self.readers = [column_reader(col, self.where) for col in table_map.columns]
        self.width = len(self.readers)
        self._full: set[bytes] = set()  # column bitmaps seen naming every column

    def rows(self, data: bytes, pos: int, end: int) -> list[Row]:
        """The rows of a WRITE or DELETE rows event; `pos` is where its column count starts."""
        pos = self._bitmap(data, pos)
        image = self._image
        rows = []
        while pos < end:
            row, pos = image(data, pos)
            rows.append(row)
        self._check_end(pos, end)
        return rows

    def pairs(self, data: bytes, pos: int, end: int) -> list[tuple[Row, Row]]:
        """The (before, after) images of an UPDATE rows event."""
        pos = self._bitmap(data, pos, images=2)
        image = self._image
        pairs = []
        while pos < end:
            before, pos = image(data, pos)
            after, pos = image(data, pos)
            pairs.append((before, after))
        self._check_end(pos, end)
        return pairs

    def _bitmap(self, data: bytes, pos: int, images: int = 1) -> int:
        """Past the column count and the `images` column bitmaps (each must name every column)."""
        count = data[pos]
        if count >= 0xFB:
            size = {0xFC: 2, 0xFD: 3, 0xFE: 8}[count]
            count = int.from_bytes(data[pos + 1 : pos + 1 + size], "little")
            pos += size
        pos += 1
        if count != self.width:
            raise BinlogDecodeError(f"{self.where}: rows event has {count} columns, its table map {self.width}")
        size = (self.width + 7) >> 3
        for _ in range(images):
            self._check_full(data[pos : pos + size])
            pos += size
        return pos

    def _check_full(self, bitmap: bytes) -> None:
        """Check that a row image carries every column (binlog_row_image=FULL): one that leaves
        columns out (a session with MINIMAL or NOBLOB) cannot say what they hold."""
        if bitmap in self._full:
            return
        bits = int.from_bytes(bitmap, "little")
        missing = [col.name for i, col in enumerate(self.columns) if not bits >> i & 1]
        if missing:
            raise BinlogDecodeError(
                f"{self.where}: rows event leaves out column {missing[0]!r} ({len(missing)} in all): it was written "
                "with binlog_row_image other than FULL (a session setting?); capture needs binlog_row_image=FULL"
            )
        self._full.add(bitmap)

    def _image(self, data: bytes, pos: int) -> tuple[Row, int]:
        """One row image: its NULL bitmap, then the non-NULL values."""
        index = -1
        try:
            size = (self.width + 7) >> 3
            nulls = int.from_bytes(data[pos : pos + size], "little")
            pos += size
            values: list[Any] = []
            append = values.append
            for index, read in enumerate(self.readers):
                if nulls >> index & 1:
                    append(None)
                else:
                    value, pos = read(data, pos)
                    append(value)
            return tuple(values), pos
        except (ValueError, IndexError, struct.error, UnicodeDecodeError) as exc:
            raise self._error(index, exc) from None

    def _error(self, index: int, exc: Exception) -> BinlogDecodeError:
        if index < 0:
            return BinlogDecodeError(f"{self.where}: row image cut short ({exc})")
        col = self.columns[index]
        return BinlogDecodeError(f"{self.where}: cannot decode column {col.name!r} (type code {col.type}): {exc}")

    def _check_end(self, pos: int, end: int) -> None:
        if pos != end:
            raise BinlogDecodeError(f"{self.where}: the rows event's last row ends at {pos}, the event at {end}")


def column_reader(col: BinlogColumn, where: str) -> Reader:
    """The reader of one column's values: (data, pos) -> (value, next pos)."""
    kind = col.type
    fixed = _FIXED.get((kind, col.unsigned and kind not in (FIELD_TYPE.FLOAT, FIELD_TYPE.DOUBLE)))
    if fixed is not None:
        return _fixed(fixed)
    if kind == FIELD_TYPE.INT24:
        return _int24(col.unsigned)
    if kind == FIELD_TYPE.YEAR:
        return _year
    if kind == FIELD_TYPE.NEWDECIMAL:
        return _decimal(col.precision, col.decimals)
    if kind in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING):
        prefix = 2 if col.max_length > 255 else 1
        pad = col.max_length if kind == FIELD_TYPE.STRING else 0
        return _text(prefix, _codec(col, where), pad)
    if kind == FIELD_TYPE.BLOB:
        return _text(col.length_size, _codec(col, where), 0)
    if kind == FIELD_TYPE.GEOMETRY:
        return _text(col.length_size, None, 0)
    if kind == FIELD_TYPE.JSON:
        return _json(col.length_size)
    if kind == FIELD_TYPE.DATE:
        return _date
    if kind == FIELD_TYPE.DATETIME2:
        return _datetime2(col.fsp)
    if kind == FIELD_TYPE.TIMESTAMP2:
        return _timestamp2(col.fsp)
    if kind == FIELD_TYPE.TIME2:
        return _time2(col.fsp)
    if kind == FIELD_TYPE.DATETIME:
        return _datetime
    if kind == FIELD_TYPE.TIMESTAMP:
        return _timestamp
    if kind == FIELD_TYPE.TIME:
        return _time
    if kind == FIELD_TYPE.ENUM and col.enum_values is not None:
        return _enum(col.size, [ENUM_ERROR_VALUE, *col.enum_values])  # 0: the error value
    if kind == FIELD_TYPE.SET and col.set_values is not None:
        return _set(col.size, col.set_values)
    if kind == FIELD_TYPE.BIT:
        return _bit(col.bits)
    raise BinlogDecodeError(
        f"{where}: column {col.name!r} has binlog type code {kind}, which capture cannot decode"
        + (
            " (its member list is missing: set binlog_row_metadata=FULL)"
            if kind in (FIELD_TYPE.ENUM, FIELD_TYPE.SET)
            else ""
        )
    )


def _codec(col: BinlogColumn, where: str) -> str | None:
    """The column's Python codec; None for binary strings (values stay bytes)."""
    if (col.character_set_name or "").lower() == "binary":
        return None
    encoding = python_encoding(col.character_set_name)
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise BinlogDecodeError(
            f"{where}: column {col.name!r} has charset {col.character_set_name!r}, which Python cannot decode"
        ) from None
    return encoding


def _fixed(fmt: str) -> Reader:
    unpack, size = struct.Struct(fmt).unpack_from, struct.calcsize(fmt)

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        return unpack(data, pos)[0], pos + size

    return read


def _int24(unsigned: bool) -> Reader:
    signed = not unsigned

    def read(data: bytes, pos: int) -> tuple[int, int]:
        return int.from_bytes(data[pos : pos + 3], "little", signed=signed), pos + 3

    return read


def _year(data: bytes, pos: int) -> tuple[int, int]:
    value = data[pos]
    return (1900 + value if value else 0), pos + 1  # 0 is YEAR 0000


def _decimal(precision: int, scale: int) -> Reader:
    """MySQL's packed DECIMAL: groups of 9 digits in 4 bytes big-endian, the leading integer and
    the trailing fraction digits in fewer; sign bit flipped, negative values bitwise inverted."""
    lead_digits, whole_groups = (precision - scale) % 9, (precision - scale) // 9
    fraction_groups, tail_digits = divmod(scale, 9)
    lead, tail = _DECIMAL_BYTES[lead_digits], _DECIMAL_BYTES[tail_digits]
    size = lead + 4 * (whole_groups + fraction_groups) + tail
    as_text = precision > MAX_ARROW_DECIMAL

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        raw = bytearray(data[pos : pos + size])
        negative = not raw[0] & 0x80
        raw[0] ^= 0x80
        if negative:
            raw = bytearray(raw.translate(_INVERT))
        parts = ["-"] if negative else []
        at = lead
        if lead:
            parts.append(str(int.from_bytes(raw[:lead], "big")))
        for _ in range(whole_groups):
            parts.append(f"{int.from_bytes(raw[at : at + 4], 'big'):09d}")
            at += 4
        parts.append(".")
        for _ in range(fraction_groups):
            parts.append(f"{int.from_bytes(raw[at : at + 4], 'big'):09d}")
            at += 4
        if tail:
            parts.append(f"{int.from_bytes(raw[at : at + tail], 'big'):0{tail_digits}d}")
        value = Decimal("".join(parts))
        return (format(value, "f") if as_text else value), pos + size

    return read


def _text(prefix: int, encoding: str | None, pad: int) -> Reader:
    """A length-prefixed string: decoded with `encoding`, or bytes (BINARY(n): padded to `pad`)."""

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        start = pos + prefix
        stop = start + (data[pos] if prefix == 1 else int.from_bytes(data[pos:start], "little"))
        raw = data[start:stop]
        if encoding is not None:
            return raw.decode(encoding), stop
        return (raw.ljust(pad, b"\x00") if pad else raw), stop

    return read


def _json(prefix: int) -> Reader:
    """MySQL's binary JSON, as JSON text (MariaDB's JSON is LONGTEXT: a BLOB column)."""

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        start = pos + prefix
        stop = start + int.from_bytes(data[pos:start], "little")
        if stop == start:
            return None, stop
        value = parse_json(data[start], data[start + 1 : stop])
        return json.dumps(_text_keys(value), ensure_ascii=False, separators=(", ", ": ")), stop

    return read


def _text_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {(k.decode() if isinstance(k, bytes) else k): _text_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_text_keys(v) for v in value]
    if isinstance(value, bytes):
        return value.decode()
    return value


def _date(data: bytes, pos: int) -> tuple[date | None, int]:
    """NULL for a zero year, month or day, and for a day its month does not have ('2020-02-30':
    sql_mode ALLOW_INVALID_DATES), which no date type holds."""
    value = int.from_bytes(data[pos : pos + 3], "little")
    day, month, year = value & 31, value >> 5 & 15, value >> 9
    try:
        return date(year, month, day), pos + 3
    except ValueError:
        return None, pos + 3


def _fraction(fsp: int) -> tuple[int, int]:
    """Bytes of a stored fraction of `fsp` digits and the microseconds of its unit."""
    return (fsp + 1) // 2, _FRACTION_SCALE[fsp]


def _datetime2(fsp: int) -> Reader:
    """DATETIME2: 1 sign bit, 17 bits year*13+month, 5 day, 5 hour, 6 minute, 6 second, then the fraction."""
    frac_bytes, unit = _fraction(fsp)
    size = 5 + frac_bytes

    def read(data: bytes, pos: int) -> tuple[datetime | None, int]:
        value = int.from_bytes(data[pos : pos + 5], "big")
        micro = int.from_bytes(data[pos + 5 : pos + size], "big") * unit if frac_bytes else 0
        year_month = value >> 22 & 0x1FFFF
        try:
            result = datetime(
                year_month // 13,
                year_month % 13,
                value >> 17 & 31,
                value >> 12 & 31,
                value >> 6 & 63,
                value & 63,
                micro,
            )
        except ValueError:  # a zero year, month or day, or a day its month does not have (ALLOW_INVALID_DATES)
            return None, pos + size
        return result, pos + size

    return read


def _timestamp2(fsp: int) -> Reader:
    """TIMESTAMP2: seconds since the epoch (4 bytes big-endian), then the fraction. Naive UTC."""
    frac_bytes, unit = _fraction(fsp)
    size = 4 + frac_bytes

    def read(data: bytes, pos: int) -> tuple[datetime, int]:
        seconds = int.from_bytes(data[pos : pos + 4], "big")  # unsigned: MariaDB 11.5 reaches 2106
        micro = int.from_bytes(data[pos + 4 : pos + size], "big") * unit if frac_bytes else 0
        return _EPOCH + timedelta(seconds=seconds, microseconds=micro), pos + size

    return read


def _time2(fsp: int) -> Reader:
    """TIME2 (MySQL's my_time_packed_from_binary): an offset integer part of 1 sign, 1 unused,
    10 hour, 6 minute and 6 second bits, then the fraction; a negative time with a fraction
    stores integer part + 1 and the fraction's complement."""
    frac_bytes, unit = _fraction(fsp)
    size = 3 + frac_bytes

    def read(data: bytes, pos: int) -> tuple[timedelta, int]:
        int_part = int.from_bytes(data[pos : pos + 3], "big") - 0x800000
        if fsp <= 4:
            frac = int.from_bytes(data[pos + 3 : pos + size], "big")
            if int_part < 0 and frac:
                int_part += 1
                frac -= 1 << (8 * frac_bytes)
            packed = (int_part << 24) + frac * unit
        else:
            packed = int.from_bytes(data[pos : pos + size], "big") - 0x800000000000
        magnitude = -packed if packed < 0 else packed
        hms = magnitude >> 24
        micros = ((hms >> 12 & 0x3FF) * 3600 + (hms >> 6 & 63) * 60 + (hms & 63)) * 1_000_000 + (magnitude & 0xFFFFFF)
        return timedelta(microseconds=-micros if packed < 0 else micros), pos + size

    return read


def _datetime(data: bytes, pos: int) -> tuple[datetime | None, int]:
    """The pre-5.6 DATETIME: YYYYMMDDhhmmss as an 8-byte integer."""
    value = int.from_bytes(data[pos : pos + 8], "little")
    day_part, time_part = divmod(value, 1_000_000)
    year, month, day = day_part // 10000, day_part // 100 % 100, day_part % 100
    try:  # NULL for a zero year, month or day, or a day its month does not have
        return datetime(year, month, day, time_part // 10000, time_part // 100 % 100, time_part % 100), pos + 8
    except ValueError:
        return None, pos + 8


def _timestamp(data: bytes, pos: int) -> tuple[datetime, int]:
    """The pre-5.6 TIMESTAMP: seconds since the epoch, 4 bytes little-endian. Naive UTC."""
    return _EPOCH + timedelta(seconds=int.from_bytes(data[pos : pos + 4], "little")), pos + 4


def _time(data: bytes, pos: int) -> tuple[timedelta, int]:
    """The pre-5.6 TIME: ±hhmmss as a 3-byte signed integer."""
    value = int.from_bytes(data[pos : pos + 3], "little", signed=True)
    magnitude = abs(value)
    seconds = magnitude // 10000 * 3600 + magnitude // 100 % 100 * 60 + magnitude % 100
    return timedelta(seconds=-seconds if value < 0 else seconds), pos + 3


def _enum(size: int, members: list[str]) -> Reader:
    def read(data: bytes, pos: int) -> tuple[str, int]:
        return members[int.from_bytes(data[pos : pos + size], "little")], pos + size

    return read


def _set(size: int, members: list[str]) -> Reader:
    bits = [(1 << i, m) for i, m in enumerate(members)]
    empty = sum(bit for bit, m in bits if m == "")  # the '' member's bit: alone it lands as ','

    def read(data: bytes, pos: int) -> tuple[str, int]:
        mask = int.from_bytes(data[pos : pos + size], "little")
        text = ",".join([m for bit, m in bits if mask & bit])
        return (SET_EMPTY_MEMBER_ALONE if mask & empty and not text else text), pos + size

    return read


def _bit(bits: int) -> Reader:
    size, mask = (bits + 7) // 8, (1 << bits) - 1

    def read(data: bytes, pos: int) -> tuple[int, int]:
        return int.from_bytes(data[pos : pos + size], "big") & mask, pos + size

    return read
