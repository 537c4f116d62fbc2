"""Decoding of pgoutput's logical replication messages (protocol version 1), as pure functions.

    B Begin     final (commit) LSN, commit time, xid
    R Relation  relation oid, schema, name, replica identity, columns (flags, name, type oid, typmod)
    I Insert    relation oid, 'N' new tuple
    U Update    relation oid, optional 'K' (old key) or 'O' (old row), 'N' new tuple
    D Delete    relation oid, 'K' (old key) or 'O' (old row)
    T Truncate  relation oids
    C Commit    flags, commit LSN, end LSN, commit time
    Y Type, O Origin, M Message: not needed here
A tuple is a list of column values: text (str), None for NULL, or `UNCHANGED` for an
out-of-line (TOASTed) value the update did not touch, which the log does not carry.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from struct import Struct
from typing import Any

PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_I16, _I32, _I64, _U32 = Struct(">h"), Struct(">i"), Struct(">q"), Struct(">I")
_BEGIN = Struct(">qqI")
_COMMIT = Struct(">bqqq")


class _Unchanged:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Any = _Unchanged()
Tuple = list[Any]


@dataclass(frozen=True, slots=True)
class Begin:
    commit_lsn: int
    commit_ts: datetime
    xid: int


@dataclass(frozen=True, slots=True)
class Commit:
    commit_lsn: int
    end_lsn: int
    commit_ts: datetime


@dataclass(frozen=True, slots=True)
class RelationColumn:
    name: str
    type_oid: int
    typmod: int
    key: bool  # part of the replica identity


@dataclass(frozen=True, slots=True)
class Relation:
    oid: int
    schema: str
    table: str
    replica_identity: str  # d default, f full, i index, n nothing
    columns: tuple[RelationColumn, ...]


@dataclass(frozen=True, slots=True)
class RowChange:
    kind: str  # I, U, D
    relation: int
    old_kind: str | None  # K (key columns only) or O (whole row), None when absent
    old: Tuple | None
    new: Tuple | None


@dataclass(frozen=True, slots=True)
class Truncate:
    relations: tuple[int, ...]


def timestamp(micros: int) -> datetime:
    return PG_EPOCH + timedelta(microseconds=micros)


def _string(buf: bytes, pos: int) -> tuple[str, int]:
    end = buf.index(0, pos)
    return buf[pos:end].decode(), end + 1


def parse_tuple(buf: bytes, pos: int) -> tuple[Tuple, int]:
    (count,) = _I16.unpack_from(buf, pos)
    pos += 2
    values: Tuple = []
    append = values.append
    unpack = _U32.unpack_from
    for _ in range(count):
        kind = buf[pos]
        pos += 1
        if kind == 116:  # 't' text
            (length,) = unpack(buf, pos)
            pos += 4
            append(buf[pos : pos + length].decode())
            pos += length
        elif kind == 110:  # 'n' null
            append(None)
        elif kind == 117:  # 'u' unchanged TOASTed value
            append(UNCHANGED)
        else:
            raise ValueError(f"pgoutput tuple column kind {chr(kind)!r} is not supported (binary mode is off)")
    return values, pos


def parse_relation(buf: bytes) -> Relation:
    (oid,) = _U32.unpack_from(buf, 1)
    schema, pos = _string(buf, 5)
    table, pos = _string(buf, pos)
    identity = chr(buf[pos])
    (count,) = _I16.unpack_from(buf, pos + 1)
    pos += 3
    columns = []
    for _ in range(count):
        flags = buf[pos]
        name, pos = _string(buf, pos + 1)
        type_oid, typmod = _U32.unpack_from(buf, pos)[0], _I32.unpack_from(buf, pos + 4)[0]
        pos += 8
        columns.append(RelationColumn(name, type_oid, typmod, bool(flags & 1)))
    return Relation(oid, schema, table, identity, tuple(columns))


def parse_change(buf: bytes) -> RowChange:
    kind = chr(buf[0])
    (relation,) = _U32.unpack_from(buf, 1)
    pos = 5
    old_kind = old = new = None
    marker = chr(buf[pos])
    if kind in "UD" and marker in "KO":
        old_kind = marker
        old, pos = parse_tuple(buf, pos + 1)
        marker = chr(buf[pos]) if pos < len(buf) else ""
    if kind in "IU":
        if marker != "N":
            raise ValueError(f"pgoutput {kind} message without a new tuple")
        new, pos = parse_tuple(buf, pos + 1)
    return RowChange(kind, relation, old_kind, old, new)


def parse_begin(buf: bytes) -> Begin:
    lsn, micros, xid = _BEGIN.unpack_from(buf, 1)
    return Begin(lsn, timestamp(micros), xid)


def parse_commit(buf: bytes) -> Commit:
    _flags, lsn, end, micros = _COMMIT.unpack_from(buf, 1)
    return Commit(lsn, end, timestamp(micros))


def parse_truncate(buf: bytes) -> Truncate:
    (count,) = _I32.unpack_from(buf, 1)
    return Truncate(tuple(_U32.unpack_from(buf, 6 + 4 * i)[0] for i in range(count)))
