"""The plan of a merge run, without Spark: the run's chunks as the driver sees them in the landing
zone, the full dumps whose last chunk the run merges (the completed-dump repair), and the
columns of the table over the run's files (a type that widened inside the run is read wide)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pyarrow as pa

from capture.errors import MergeError
from capture.landing import LandingZone
from capture.landing.chunks import ChunkMeta
from capture.landing.reader import (
    LandedChunk,
    TruncateMark,
    Watermarks,
    closed_chunks,
    dump_chunks,
    truncated_by,
)


@dataclass
class Chunk:
    id: int
    path: Path
    meta: ChunkMeta
    low: int
    high: int
    high_ts: datetime | None
    row_type: pa.StructType


def chunks_since(zone: LandingZone, marks: Watermarks, schema: str, table: str, since: int) -> tuple[list[Chunk], int]:
    """Chunks whose HIGH (a watermark row, or a read-only chunk's HIGH file) is at or after `since`;
    and how many HIGHs were stale (redone chunks)."""
    found, stale = closed_chunks(zone, marks, schema, table, since)
    return [as_chunk(i, c) for i, c in enumerate(found)], len(stale)


def as_chunk(i: int, c: LandedChunk, row_type: pa.StructType | None = None) -> Chunk:
    return Chunk(i, c.path, c.meta, c.low, c.high, c.high_ts, row_type or c.row_type)


@dataclass
class CompletedDump:
    """A full dump of the table (one key range, no start or stop, chunks 1..N) whose last chunk
    the run merges, with every chunk's LOW and HIGH: together its chunks covered the whole key
    space in the database's own order, whatever the collation (`_completed_dump_repairs`)."""

    dump_id: str
    chunks: list[Chunk]

    @property
    def first_low(self) -> int:
        return min(c.low for c in self.chunks)

    @property
    def last(self) -> Chunk:
        return max(self.chunks, key=lambda c: c.high)


def completed_dumps(
    zone: LandingZone, marks: Watermarks, schema: str, table: str, run: list[Chunk]
) -> list[CompletedDump]:
    """The full dumps whose last chunk is among the run's chunks and that need the completed-dump
    repair: some chunk's order is not exact (exact ones are repaired range by range). A dump
    whose chunk files or watermarks are not all there (a chunk redone after the frontier) is left out."""
    found = []
    for final in run:
        meta = final.meta
        if not meta.last or meta.keys is not None or meta.start is not None or meta.stop is not None:
            continue
        dump = dump_chunks(zone, marks, meta.dump_id, schema, table)
        if dump is None:
            continue
        metas = [c.meta for c in dump]
        if [m.chunk for m in metas] != list(range(1, meta.chunk + 1)) or metas[-1].high_id != meta.high_id:
            continue
        if all(m.exact_order for m in metas) or metas[0].after is not None:
            continue
        if any(m.keys is not None or m.start is not None or m.stop is not None for m in metas):
            continue
        found.append(CompletedDump(meta.dump_id, [as_chunk(i, c, final.row_type) for i, c in enumerate(dump)]))
    return found


def truncated_dump(dump: CompletedDump, truncates: list[TruncateMark]) -> bool:
    """A completed dump a truncate cut through (between its first LOW and last HIGH, or hidden from
    a chunk's snapshot): its repair is not needed (every row before the truncate goes, every row
    after it has its events) and not sound (its chunks no longer cover the table)."""
    first, last = dump.first_low, dump.last.high
    return any(first <= t.lsn <= last for t in truncates) or any(
        truncated_by(truncates, c.low, c.high, c.meta.read_view) for c in dump.chunks
    )


def wider(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type that holds every value of both, where one widens losslessly into the other as
    Iceberg can promote a column (`_evolve_type`): a wider signed integer (`MODIFY c BIGINT` of an
    INT), DOUBLE for FLOAT, a DECIMAL with the same scale and more digits; None otherwise."""
    ints = (pa.int8(), pa.int16(), pa.int32(), pa.int64())
    if a in ints and b in ints:
        return max(a, b, key=ints.index)
    if {a, b} == {pa.float32(), pa.float64()}:
        return pa.float64()
    if pa.types.is_decimal(a) and pa.types.is_decimal(b) and a.scale == b.scale:
        return max(a, b, key=lambda t: t.precision)
    return None


def unify_columns(row_types: Iterable[tuple[pa.StructType, str]], table: str) -> dict[str, pa.DataType]:
    """Columns in order of appearance; a column whose type changed is refused with its name, unless
    the change widens it (`wider`: an ALTER during the run's stretch of the log; the wider type
    reads both)."""
    columns: dict[str, pa.DataType] = {}
    for row_type, origin in row_types:
        for f in row_type:
            known = columns.get(f.name)
            if known is None:
                columns[f.name] = f.type
            elif known != f.type and (wide := wider(known, f.type)) is not None:
                columns[f.name] = wide
            elif known != f.type:
                raise MergeError(
                    f"{table}: column {f.name!r} changed type from {known} to {f.type} ({origin}); the merge "
                    "cannot change a column's type in place: drop the target tables and run a full dump"
                )
    return columns
