"""TABLE_MAP events parsed into the columns Logtide decodes rows with, once per distinct table map.

The binlog carries a table map before the rows of every transaction that touches a table. Its
body (table id, schema, table, column types and metadata and, with binlog_row_metadata=FULL,
which preflight requires, names, signedness, charsets, ENUM/SET members and the primary key) is
all the parse reads, so a body equal to an earlier one's gets that one's `TableMap` (cache per
stream, `TableMapCache`); the reader hangs its compiled row decoder on it.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field
from typing import Any

import pymysql.charset
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.row_event import find_charset

from capture.errors import BinlogDecodeError

MAX_ENTRIES = 1024  # distinct table maps kept per stream (new table ids, e.g. after FLUSH TABLES)

# optional metadata (TLV) types, sql/log_event.h
_SIGNEDNESS, _DEFAULT_CHARSET, _COLUMN_CHARSET, _COLUMN_NAME = 1, 2, 3, 4
_SET_STR_VALUE, _ENUM_STR_VALUE, _SIMPLE_PRIMARY_KEY = 5, 6, 8
_ENUM_AND_SET_DEFAULT_CHARSET, _ENUM_AND_SET_COLUMN_CHARSET = 10, 11

_NUMERIC = {
    FIELD_TYPE.TINY,
    FIELD_TYPE.SHORT,
    FIELD_TYPE.INT24,
    FIELD_TYPE.LONG,
    FIELD_TYPE.LONGLONG,
    FIELD_TYPE.NEWDECIMAL,
    FIELD_TYPE.FLOAT,
    FIELD_TYPE.DOUBLE,
    FIELD_TYPE.YEAR,
}
_CHARACTER = {FIELD_TYPE.STRING, FIELD_TYPE.VAR_STRING, FIELD_TYPE.VARCHAR, FIELD_TYPE.BLOB}
_ENUM_SET = {FIELD_TYPE.ENUM, FIELD_TYPE.SET}
# metadata bytes per column type (types not listed have none)
_ONE_BYTE = {
    FIELD_TYPE.DOUBLE,
    FIELD_TYPE.FLOAT,
    FIELD_TYPE.TIMESTAMP2,
    FIELD_TYPE.DATETIME2,
    FIELD_TYPE.TIME2,
    FIELD_TYPE.BLOB,
    FIELD_TYPE.GEOMETRY,
    FIELD_TYPE.JSON,
}


@dataclass
class BinlogColumn:
    """One column as the table map describes it (attribute names as `types.column_type` reads them)."""

    name: str
    type: int
    nullable: bool = True
    unsigned: bool = False
    character_set_name: str | None = None  # MySQL charset name, e.g. 'utf8mb4', 'latin1', 'binary'
    max_length: int = 0  # VARCHAR/CHAR: bytes
    length_size: int = 0  # BLOB/GEOMETRY/JSON: bytes of the length prefix
    size: int = 0  # ENUM/SET: bytes of the value; FLOAT/DOUBLE: bytes
    fsp: int = 0
    precision: int = 0
    decimals: int = 0
    bits: int = 0
    enum_values: list[str] | None = None
    set_values: list[str] | None = None


@dataclass(eq=False)
class TableMap:
    """A table at one moment of the log. `compiled` is the reader's (schema, decoder) for it, `seen`
    whether it has read it: the reader notes a captured table's map as its last only when it changes."""

    table_id: int
    schema: str
    table: str
    columns: tuple[BinlogColumn, ...]
    key: tuple[str, ...]  # SIMPLE_PRIMARY_KEY columns, in column order
    compiled: Any = field(default=None, repr=False)
    seen: bool = field(default=False, repr=False)  # the reader has read this table map (`BinlogReader._items`)


class TableMapCache:
    """Parsed table maps of one binlog stream, keyed by body bytes."""

    def __init__(self, mariadb: bool) -> None:
        self.dbms = "mariadb" if mariadb else "mysql"
        self._parsed: dict[bytes, TableMap] = {}

    def get(self, body: bytes, post_header_len: int) -> TableMap:
        table_map = self._parsed.get(body)
        if table_map is None:
            table_map = parse(body, post_header_len, self.dbms)
            if len(self._parsed) >= MAX_ENTRIES:
                self._parsed.clear()
            self._parsed[body] = table_map
        return table_map


class _Reader:
    """Cursor over a table map body."""

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data, self.pos = data, pos

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise BinlogDecodeError("table map event is shorter than its contents")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def byte(self) -> int:
        return self.take(1)[0]

    def lenenc(self) -> int:
        first = self.byte()
        if first < 0xFB:
            return first
        size = {0xFC: 2, 0xFD: 3, 0xFE: 8}.get(first)
        if size is None:
            raise BinlogDecodeError(f"bad length-encoded integer 0x{first:02x} in a table map")
        return int.from_bytes(self.take(size), "little")

    def ints(self, end: int) -> list[int]:
        values = []
        while self.pos < end:
            values.append(self.lenenc())
        return values

    def text(self) -> bytes:
        return self.take(self.lenenc())


def parse(body: bytes, post_header_len: int, dbms: str) -> TableMap:
    """A TABLE_MAP event's body (header and checksum cut off) as a `TableMap`."""
    table_id = int.from_bytes(body[:6], "little") if post_header_len != 6 else int.from_bytes(body[:4], "little")
    r = _Reader(body, post_header_len)
    schema = r.take(r.byte()).decode()
    r.take(1)
    table = r.take(r.byte()).decode()
    r.take(1)
    count = r.lenenc()
    types = list(r.take(count))
    meta = _Reader(r.text())
    columns = [_column(kind, meta) for kind in types]
    if meta.pos != len(meta.data):  # a type whose metadata this parse does not know: the rest would shift
        raise BinlogDecodeError(
            f"table map of {schema}.{table}: column metadata of types {sorted(set(types))} is {len(meta.data)} bytes, "
            f"{meta.pos} understood"
        )
    nullable = int.from_bytes(r.take((count + 7) // 8), "little")
    for index, col in enumerate(columns):
        col.nullable = bool(nullable >> index & 1)
    names, keys = _optional_metadata(r, columns, dbms)
    where = f"{schema}.{table}"
    if len(names) != count:
        raise BinlogDecodeError(f"table map of {where} carries no column names: set binlog_row_metadata=FULL")
    for col, name in zip(columns, names, strict=True):
        col.name = name
    key = tuple(col.name for index, col in enumerate(columns) if index in keys)
    return TableMap(table_id, schema, table, tuple(columns), key)


def _column(kind: int, meta: _Reader) -> BinlogColumn:
    col = BinlogColumn("", kind)
    if kind == FIELD_TYPE.VARCHAR:
        col.max_length = int.from_bytes(meta.take(2), "little")
    elif kind in _ONE_BYTE:
        value = meta.byte()
        if kind in (FIELD_TYPE.FLOAT, FIELD_TYPE.DOUBLE):
            col.size = value
        elif kind in (FIELD_TYPE.BLOB, FIELD_TYPE.GEOMETRY, FIELD_TYPE.JSON):
            col.length_size = value
        else:
            col.fsp = value
    elif kind in (FIELD_TYPE.VAR_STRING, FIELD_TYPE.STRING):
        high, low = meta.byte(), meta.byte()
        if high in (FIELD_TYPE.ENUM, FIELD_TYPE.SET):
            col.type, col.size = high, low
        else:  # CHAR(n): the byte length is 10 bits, the top two stored inverted in `high`
            col.max_length = (((high << 8 | low) >> 4) & 0x300 ^ 0x300) + low
    elif kind == FIELD_TYPE.NEWDECIMAL:
        col.precision, col.decimals = meta.byte(), meta.byte()
    elif kind == FIELD_TYPE.BIT:
        bits, whole_bytes = meta.byte(), meta.byte()
        col.bits = whole_bytes * 8 + bits
    return col


def _optional_metadata(r: _Reader, columns: list[BinlogColumn], dbms: str) -> tuple[list[str], set[int]]:
    """Apply the optional metadata TLVs to `columns`; return the names and the key's column indexes."""
    character = [c for c in columns if c.type in _CHARACTER or (dbms == "mariadb" and c.type == FIELD_TYPE.GEOMETRY)]
    enum_set = [c for c in columns if c.type in _ENUM_SET]
    numeric = [c for c in columns if c.type in _NUMERIC]
    names: list[str] = []
    keys: set[int] = set()
    end = len(r.data)
    while r.pos < end:
        kind = r.byte()
        length = r.lenenc()
        stop = r.pos + length
        if kind == _SIGNEDNESS:
            flags = int.from_bytes(r.take(length), "big")
            for index, col in enumerate(numeric):
                col.unsigned = bool(flags >> (length * 8 - 1 - index) & 1)
        elif kind in (_DEFAULT_CHARSET, _ENUM_AND_SET_DEFAULT_CHARSET):
            default = r.lenenc()
            own = dict(zip(*[iter(r.ints(stop))] * 2, strict=True))
            targets = character if kind == _DEFAULT_CHARSET else enum_set
            for index, col in enumerate(targets):
                col.character_set_name = _charset(own.get(index, default), dbms)
        elif kind in (_COLUMN_CHARSET, _ENUM_AND_SET_COLUMN_CHARSET):
            ids = r.ints(stop)
            targets = character if kind == _COLUMN_CHARSET else enum_set
            for col, charset_id in zip(targets, ids, strict=True):
                col.character_set_name = _charset(charset_id, dbms)
        elif kind == _COLUMN_NAME:
            while r.pos < stop:
                names.append(r.text().decode())
        elif kind in (_SET_STR_VALUE, _ENUM_STR_VALUE):
            members = []
            while r.pos < stop:
                members.append([r.text() for _ in range(r.lenenc())])
            wanted = FIELD_TYPE.SET if kind == _SET_STR_VALUE else FIELD_TYPE.ENUM
            for col, values in zip([c for c in enum_set if c.type == wanted], members, strict=True):
                if kind == _SET_STR_VALUE:
                    col.set_values = values  # type: ignore[assignment] # decoded below, with the charset
                else:
                    col.enum_values = values  # type: ignore[assignment]
        elif kind == _SIMPLE_PRIMARY_KEY:
            keys = set(r.ints(stop))
        r.pos = stop  # GEOMETRY_TYPE, PRIMARY_KEY_WITH_PREFIX, VISIBILITY and unknown kinds: not needed
    for col in enum_set:
        for attr in ("enum_values", "set_values"):
            raw = getattr(col, attr)
            if raw is not None:
                setattr(col, attr, [_member(m, col.character_set_name) for m in raw])
    return names, keys


def _charset(collation_id: int, dbms: str) -> str:
    """The MySQL charset name of a collation id ('latin1', 'utf16', 'binary'); `python_encoding`
    finds its codec."""
    found = find_charset(str(collation_id), dbms=dbms)
    return found[2] if found else f"unknown collation {collation_id}"


def _member(raw: bytes, charset: str | None) -> str:
    """An ENUM/SET member's text: the table map carries it in the column's charset (bytes that
    happen to be valid UTF-8 are not UTF-8 text in a latin1 or utf16 column)."""
    encoding = "utf-8" if charset == "binary" else python_encoding(charset)  # a dump lands binary members as UTF-8
    try:
        return raw.decode(encoding)
    except (LookupError, UnicodeDecodeError) as exc:
        raise BinlogDecodeError(f"an ENUM/SET member {raw!r} in charset {charset!r} cannot be decoded: {exc}") from None


# MySQL charsets Python names otherwise or reads otherwise: Python's 'utf16' and 'utf32' read
# little-endian without a BOM (MySQL's are big-endian); MySQL's latin1 is cp1252 plus 5 bytes
# Python's cp1252 leaves undefined (`_mysql_latin1`)
_CODECS = {
    "utf16": "utf-16-be",
    "utf16le": "utf-16-le",
    "utf32": "utf-32-be",
    "ucs2": "utf-16-be",
    "latin1": "mysql_latin1",
}


def python_encoding(charset: str | None) -> str:
    """The Python codec of a table map's charset name."""
    if charset is None:
        return "utf-8"
    if charset.lower() in _CODECS:
        return _CODECS[charset.lower()]
    known = pymysql.charset.charset_by_name(charset)
    return known.encoding if known else charset


# MySQL's latin1: cp1252, but 0x81, 0x8D, 0x8F, 0x90 and 0x9D are U+0081.. U+009D
_LATIN1_TABLE = "".join(bytes([b]).decode("cp1252", errors="ignore") or chr(b) for b in range(256))
_LATIN1 = codecs.CodecInfo(
    name="mysql_latin1",
    encode=codecs.lookup("cp1252").encode,  # never used: the decoder only decodes
    decode=lambda data, errors="strict": codecs.charmap_decode(data, errors, _LATIN1_TABLE),
)
codecs.register(lambda name: _LATIN1 if name == "mysql_latin1" else None)
