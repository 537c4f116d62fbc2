"""Chunk files of dumps: the rows one chunk SELECT returned, with what the merge needs to
reconcile them with the log (its watermarks and the key range it covers).

    <landing.path>/<source>/chunks/<dump_id>/<db>.<table>/<chunk:08d>.parquet

A chunk file is written (atomically, durably) before its HIGH watermark, so whoever reads
the HIGH watermark from the log finds the chunk. A redone chunk replaces the file and gets
new watermark ids; a HIGH watermark whose id no chunk file carries is ignored.

A read-only chunk (`watermarks: readonly`, capture/sources/mysql/snapshot.py) has no watermark
rows: its LOW is in the file (`low_lsn`), its HIGH in a small file written after it,

    <chunk:08d>.high.json   {"high_id", "high_lsn", "at"}

the landing zone's stand-in for the HIGH row: read from the log after the chunk file was
durable, so a merge whose frontier is past it finds the file. No HIGH file, or one naming
another `high_id` (left by an attempt the chunk was redone after): not part of the stream yet.
This module writes chunk files and HIGH files; capture/landing/reader.py reads them back
(`chunk_window`: a chunk's LOW and HIGH for either kind).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from capture.events import Row, TableSchema, lsn_text
from capture.landing.files import fsync_dir, write_json_atomic, write_parquet_atomic
from capture.landing.keys import decode_key, encode_key
from capture.landing.zone import LandingZone, table_folder
from capture.sources import read_view_from_json
from capture.sources.base import ReadView

META_KEY = b"logtide.chunk"
HIGH_SUFFIX = ".high.json"
RELATION_KEY = b"logtide.relation"


@dataclass(frozen=True)
class ChunkMeta:
    dump_id: str
    table: str  # db.table
    chunk: int
    low_id: str
    high_id: str
    key: tuple[str, ...]
    after: Row | None  # the chunk covers keys > after (exclusive) ...
    start: Row | None  # ... or >= start on the first chunk of a range
    stop: Row | None  # ... up to its last row's key, or to `stop` (None: no end) when `last`
    last: bool  # the SELECT returned fewer rows than asked: the range is exhausted
    keys: tuple[Row, ...] | None  # key-list dumps: the keys asked for
    rows: int
    # PostgreSQL: which transactions the chunk's snapshot could see (ChunkSource.read_view);
    # None for MySQL/MariaDB, where visibility follows binlog order
    read_view: ReadView | None = None
    # the database's order of the key is Spark's for this chunk's range and rows (a table with
    # `TableSchema.exact_key_order`, no NULL among its bounds and returned keys): only then may the
    # merge delete target keys it finds inside the range. False in files written before it existed.
    exact_order: bool = False
    # `watermarks: readonly`: LOW, the encoded LSN the chunk's consistent snapshot stands at (HIGH
    # is in the chunk's HIGH file); no watermark row names low_id. None: table watermarks.
    low_lsn: int | None = None
    # a key value of the chunk landed as another value (PostgreSQL `clamped_keys: accept`: '-infinity'
    # and '0001-01-01' both as 0001-01-01), so two of its rows may hold one landed key; False: every
    # key landed as itself (MySQL/MariaDB always). None in files written before it existed: unknown,
    # which the merge takes as True (its short path, `TableMerge._fresh_chunk`, needs False).
    clamped_keys: bool | None = None
    # key-list dumps: per key column, how the database compares it, as folds the merge's repair
    # applies before comparing asked keys with the target's ('case', 'pad', 'case,pad' or '':
    # capture/sources/key_folds.py). None: byte equality (files written before it existed).
    key_folds: tuple[str, ...] | None = None

    def to_json(self) -> str:
        data = asdict(self)
        for name in ("after", "start", "stop"):
            data[name] = encode_key(data[name])
        data["keys"] = None if self.keys is None else [encode_key(k) for k in self.keys]
        data["read_view"] = None if self.read_view is None else self.read_view.to_json()
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str | bytes) -> ChunkMeta:
        data: dict[str, Any] = json.loads(text)
        for name in ("after", "start", "stop"):
            data[name] = decode_key(data[name])
        data["key"] = tuple(data["key"])
        data["keys"] = None if data["keys"] is None else tuple(decode_key(k) for k in data["keys"])
        data["read_view"] = read_view_from_json(data.get("read_view"))
        data["key_folds"] = None if data.get("key_folds") is None else tuple(data["key_folds"])
        return cls(**data)


def chunk_folder(zone: LandingZone, dump_id: str, schema: str, table: str) -> Path:
    return zone.root / "chunks" / dump_id / table_folder(schema, table)


def chunk_path(zone: LandingZone, dump_id: str, schema: str, table: str, chunk: int) -> Path:
    return chunk_folder(zone, dump_id, schema, table) / f"{chunk:08d}.parquet"


def write_chunk(zone: LandingZone, table: TableSchema, meta: ChunkMeta, rows: pa.StructArray) -> Path:
    path = chunk_path(zone, meta.dump_id, table.schema, table.table, meta.chunk)
    path.parent.mkdir(parents=True, exist_ok=True)
    metadata = {META_KEY: meta.to_json(), b"logtide.fingerprint": table.fingerprint}
    if table.relation is not None:  # PostgreSQL: the relation read (a baseline for capture: dumped_schema)
        metadata[RELATION_KEY] = str(table.relation)
    schema = pa.schema([pa.field("after", table.row_type)], metadata=metadata)
    data = pa.Table.from_arrays([rows], schema=schema)
    write_parquet_atomic(data, path)
    fsync_dir(path.parent)
    # a chunk renamed into a table folder changes that folder only: touch its dump folder, whose mtime is
    # what capture's watcher stats each round (landing.reader.DumpedTables), so a chunk landing in a folder
    # that was there (a dump resumed under its id, after its table was dropped and created again) is seen
    os.utime(path.parent.parent)
    return path


def read_chunk_meta(path: Path) -> ChunkMeta:
    return ChunkMeta.from_json(pq.read_schema(path).metadata[META_KEY])


def high_path(chunk: Path) -> Path:
    """Where a read-only chunk's HIGH file is, next to the chunk file."""
    return chunk.with_name(chunk.name.removesuffix(".parquet") + HIGH_SUFFIX)


def write_chunk_high(chunk: Path, meta: ChunkMeta, high_lsn: int) -> None:
    """A read-only chunk's HIGH, durably, after its file (see the module docstring)."""
    at = datetime.now(UTC).isoformat()
    write_json_atomic({"high_id": meta.high_id, "high_lsn": lsn_text(high_lsn), "at": at}, high_path(chunk))
