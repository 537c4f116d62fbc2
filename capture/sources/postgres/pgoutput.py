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

`split_tuples` reads many tuples of one relation at once, column by column with Arrow
compute (no Python per value): the capture's hot path, and the benchmark's baseline.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from struct import Struct
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

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


def begin_fields(buf: bytes) -> tuple[int, int, int]:
    """(commit LSN, commit time in µs since PG_EPOCH, xid) of a Begin: plain integers, no
    objects, since the reader pays this once per transaction (`timestamp` makes the time)."""
    return _BEGIN.unpack_from(buf, 1)


def commit_fields(buf: bytes) -> tuple[int, int]:
    """(end LSN, commit time in µs since PG_EPOCH) of a Commit, as `begin_fields`."""
    _flags, _lsn, end, micros = _COMMIT.unpack_from(buf, 1)
    return end, micros


def parse_truncate(buf: bytes) -> Truncate:
    (count,) = _I32.unpack_from(buf, 1)
    return Truncate(tuple(_U32.unpack_from(buf, 6 + 4 * i)[0] for i in range(count)))


@dataclass(frozen=True, slots=True)
class TupleColumns:
    """Tuples split column by column: per column the texts (null for NULL and for unchanged),
    and where some value was an unchanged TOASTed value, a boolean mask of those (else None)."""

    texts: list[pa.Array]
    unchanged: list[pa.Array | None]
    ends: pa.Array  # int64: the position just past each tuple


_PAD = bytes(8)  # a non-text column's length is read (and ignored): never past the buffer
_KINDS = pa.array([116, 110, 117], pa.uint8())  # t n u


@lru_cache(maxsize=4)
def _positions(count: int) -> tuple[pa.Array, pa.Array]:
    """(interleave, evens) for `count` values: the order [0, n, 1, n+1, ...] that interleaves
    starts and ends into offsets, and the even slots of the result (the values themselves)."""
    slots = pa.array(range(2 * count), pa.int64())
    interleave = pc.add(pc.shift_right(slots, 1), pc.multiply(pc.bit_wise_and(slots, 1), count))
    return interleave, pa.array(range(0, 2 * count, 2), pa.int64())


def message_octets(data: bytes) -> pa.Array:
    """`data` (concatenated messages) as a uint8 array, padded for `split_tuples`."""
    buffer = pa.py_buffer(data + _PAD)
    return pa.Array.from_buffers(pa.uint8(), len(data) + len(_PAD), [None, buffer])


@lru_cache(maxsize=4)
def _word_bytes(count: int) -> tuple[pa.Array, pa.Array]:
    """(word, byte) for `count` 4-byte words: slot 4i+j reads byte 3-j of word i, so the gathered
    bytes of a big-endian word lie in the little-endian order of a uint32."""
    slots = pa.array(range(4 * count), pa.int64())
    return pc.shift_right(slots, 2), pc.subtract(3, pc.bit_wise_and(slots, 3))


def _u32(octets: pa.Array, at: pa.Array) -> pa.Array:
    """The big-endian uint32 at each offset in `at`, as int64."""
    if sys.byteorder != "little":
        value = pc.take(octets, at).cast(pa.int64())
        for shift in (1, 2, 3):
            value = pc.bit_wise_or(pc.shift_left(value, 8), pc.take(octets, pc.add(at, shift)).cast(pa.int64()))
        return value
    word, byte = _word_bytes(len(at))
    gathered = pc.take(octets, pc.add(pc.take(at, word), byte))
    return pa.Array.from_buffers(pa.uint32(), len(at), [None, gathered.buffers()[1]]).cast(pa.int64())


def split_tuples(octets: pa.Array, starts: pa.Array, width: int) -> TupleColumns:
    """Split the tuples (2-byte column count, then per column 't' + length + text, 'n' or 'u')
    that begin at `starts` (int64 offsets into `octets`, see `message_octets`), all of `width`
    columns. Values are sliced out of the buffer by offsets: texts are never decoded one by one.
    The texts are checked to be UTF-8 as `parse_tuple` checks them."""
    count = len(starts)
    counts = pc.bit_wise_or(
        pc.shift_left(pc.take(octets, starts).cast(pa.int64()), 8), pc.take(octets, pc.add(starts, 1))
    )
    if count and not pc.all(pc.equal(counts, width)).as_py():
        raise ValueError(f"pgoutput tuple does not have the relation's {width} columns")
    interleave, evens = _positions(count)
    data = octets.buffers()[1]
    pos = pc.add(starts, 2)
    texts: list[pa.Array] = []
    unchanged: list[pa.Array | None] = []
    for _ in range(width):
        kind = pc.take(octets, pos)
        if count and not pc.all(pc.is_in(kind, value_set=_KINDS)).as_py():
            bad = next(k for k in kind.to_pylist() if k not in (116, 110, 117))
            raise ValueError(f"pgoutput tuple column kind {chr(bad)!r} is not supported (binary mode is off)")
        is_text = pc.equal(kind, 116)
        length = pc.if_else(is_text, _u32(octets, pc.add(pos, 1)), 0)
        begin = pc.add(pos, pc.if_else(is_text, 5, 1))
        pos = pc.add(begin, length)
        offsets = pc.take(pa.concat_arrays([begin, pos]), interleave)
        spans = pa.Array.from_buffers(pa.large_binary(), max(0, 2 * count - 1), [None, offsets.buffers()[1], data])
        values = pc.if_else(is_text, pc.take(spans, evens), pa.scalar(None, pa.large_binary()))
        texts.append(values.cast(pa.string()))
        marked = pc.equal(kind, 117)
        unchanged.append(marked if pc.any(marked).as_py() else None)
    return TupleColumns(texts, unchanged, pos)
