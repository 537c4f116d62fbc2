"""Reading the landing zone back: the one place that lists log files below a frontier, indexes
the watermark events by id and finds the chunk file a HIGH watermark closes, with its LOW and
HIGH (`Window`) for both kinds of watermarks: rows in the log of `logtide.watermarks`, or a
read-only chunk's LOW in its file and HIGH in its HIGH file (capture/landing/chunks.py).

Its users are the Spark merge (capture/merge/table.py), the plain-Python reconciliation
(capture/dump/reconcile.py), the Airflow wait for a dump's last HIGH watermarks, `logtide status`
and the output relays. Files are LSN-named (`<first>-<last>.parquet`), so a listing is a directory
read and the frontier comparison is done on the names, without opening a file.
"""

from __future__ import annotations

import glob
import json
import os
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from capture.errors import WatermarkError
from capture.landing.chunks import HIGH_SUFFIX, META_KEY, RELATION_KEY, ChunkMeta, chunk_folder, chunk_path, high_path
from capture.landing.files import Segment, segments
from capture.landing.zone import LandingZone, folder_table, table_folder
from capture.log import get_logger
from capture.sources.base import WATERMARK_SCHEMA, WATERMARK_TABLE

log = get_logger(__name__)


def committed_frontier(zone: LandingZone) -> int | None:
    """The checkpoint's frontier, encoded; None before capture's first checkpoint."""
    checkpoint = zone.checkpoint()
    return None if checkpoint is None else checkpoint.frontier.encode()


def table_segments(zone: LandingZone, schema: str, table: str, frontier: int, since: int = 0) -> list[Segment]:
    """`segments` of one table's log folder."""
    return segments(zone.log_dir / table_folder(schema, table), frontier, since)


# -- truncates ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TruncateMark:
    """A landed TRUNCATE (a `truncate` record of the schema history): every row of the table
    ordered before `lsn` is gone."""

    lsn: int
    schema: str
    table: str
    txid: str | None
    commit_ts: datetime | None

    @property
    def xid(self) -> int | None:
        """PostgreSQL's transaction id (for a chunk's read view); None for MySQL/MariaDB."""
        return int(self.txid) if self.txid and self.txid.isdigit() else None


def landed_truncates(
    zone: LandingZone, frontier: int, since: int = 0, tables: set[tuple[str, str]] | None = None
) -> list[TruncateMark]:
    """The TRUNCATEs landed with since <= LSN < frontier (of `tables`, or all), in LSN order."""
    found = []
    for segment in segments(zone.history_dir, frontier, since):
        data = pq.read_table(segment.path, columns=["_lsn", "_txid", "_commit_ts", "kind", "schema", "table"])
        for row in data.to_pylist():
            lsn = int(row["_lsn"])
            if row["kind"] != "truncate" or not since <= lsn < frontier:
                continue
            if tables is None or (row["schema"], row["table"]) in tables:
                found.append(TruncateMark(lsn, row["schema"], row["table"], row["_txid"], row["_commit_ts"]))
    return sorted(found, key=lambda t: t.lsn)


def truncated_by(truncates: list[TruncateMark], low: int, high: int, view: Any = None) -> TruncateMark | None:
    """The truncate that empties a chunk with this LOW and HIGH: one inside its window (LOW <= T <=
    HIGH, both ends included: a read-only window's positions are where events start), or, with a
    read view (PostgreSQL), one before LOW that the chunk's snapshot could not see. Such a chunk's
    rows are all older than the truncate: every row that exists after it has its own insert event
    after it. None: the chunk is placed as usual (a chunk wholly before a truncate is emptied by
    the truncate itself, one after it is untouched)."""
    for t in truncates:
        if low <= t.lsn <= high or (t.lsn < low and view is not None and view.hides(t.lsn, t.xid)):
            return t
    return None


# -- watermarks --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mark:
    """One landed watermark event: where it is in the log and which chunk it brackets."""

    lsn: int
    id: str
    dump_id: str
    table: str  # db.table
    chunk: int
    kind: str  # LOW or HIGH
    commit_ts: datetime | None


class Watermarks:
    """The watermark events of one source below a frontier, by id, read newest file first and only
    as far back as a question needs (each file once: committed files never change).

    With `frontier` None the checkpoint's is used and `refresh` follows it as capture commits more
    (a poller's loop); with a given frontier the index is fixed (a merge "as of" it)."""

    def __init__(self, zone: LandingZone, frontier: int | None = None) -> None:
        self.zone = zone
        self.folder = zone.log_dir / table_folder(WATERMARK_SCHEMA, WATERMARK_TABLE)
        self.follows_checkpoint = frontier is None
        self.frontier = 0
        self.by_id: dict[str, Mark] = {}
        self._pending: list[Segment] = []  # not read yet, in LSN order: read from the end
        self._listed: set[str] = set()
        self.refresh(frontier)

    def refresh(self, frontier: int | None = None) -> int:
        """Take in the files committed since the last look (the checkpoint's frontier unless given)."""
        if frontier is None:
            frontier = (committed_frontier(self.zone) or 0) if self.follows_checkpoint else self.frontier
        if frontier < self.frontier:
            raise ValueError(f"the frontier went back from {self.frontier} to {frontier}")
        self.frontier = frontier
        fresh = [s for s in segments(self.folder, frontier) if s.path.name not in self._listed]
        self._listed.update(s.path.name for s in fresh)
        self._pending = sorted(self._pending + fresh)
        return frontier

    def _load_newest(self) -> None:
        segment = self._pending.pop()
        data = pq.read_table(segment.path, columns=["_lsn", "_commit_ts", "after"])
        for event in data.to_pylist():
            after, lsn = event["after"], int(event["_lsn"])
            if after is not None and lsn < self.frontier:
                self.by_id[after["watermark_id"]] = Mark(
                    lsn,
                    after["watermark_id"],
                    after["dump_id"],
                    after["table_name"],
                    int(after["chunk"]),
                    after["kind"],
                    event["_commit_ts"],
                )

    def since(self, lsn: int) -> list[Mark]:
        """Every watermark at or after `lsn`, in log order."""
        while self._pending and self._pending[-1].last >= lsn:
            self._load_newest()
        return sorted((m for m in self.by_id.values() if m.lsn >= lsn), key=lambda m: m.lsn)

    def find(self, watermark_id: str) -> Mark | None:
        while watermark_id not in self.by_id and self._pending:
            self._load_newest()
        return self.by_id.get(watermark_id)

    def find_all(self, ids: set[str]) -> dict[str, Mark]:
        """The ids found so far, reading back until all are (or the log is exhausted)."""
        while not ids <= self.by_id.keys() and self._pending:
            self._load_newest()
        return {i: self.by_id[i] for i in ids if i in self.by_id}

    def all(self) -> list[Mark]:
        """Every watermark below the frontier, in log order."""
        return self.since(0)


# -- chunks ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """Where a chunk stands in the log: its LOW and HIGH (encoded LSNs), and the commit time its
    rows take at HIGH (the HIGH row's; read-only: when the HIGH was read)."""

    low: int
    high: int
    high_ts: datetime | None


@dataclass(frozen=True)
class LandedChunk:
    """A chunk file with its LOW and HIGH found in the landed log (or its HIGH file)."""

    path: Path
    meta: ChunkMeta
    row_type: pa.StructType
    low: int
    high: int
    high_ts: datetime | None


def read_chunk_schema(path: Path) -> tuple[ChunkMeta, pa.StructType]:
    """A chunk file's metadata and row type, from its footer (no rows read)."""
    schema = pq.read_schema(path)
    return ChunkMeta.from_json(schema.metadata[META_KEY]), schema.field("after").type


def dump_chunk_files(zone: LandingZone, dump_id: str, schema: str, table: str) -> list[Path]:
    """The chunk files of one table in one dump, in chunk order (not the hidden temp file of one
    being written)."""
    return sorted(chunk_folder(zone, dump_id, schema, table).glob("[0-9]*.parquet"))


def chunk_files(zone: LandingZone, schema: str, table: str) -> list[Path]:
    """Every chunk file of a table, all dumps, by dump id then chunk."""
    base = zone.root / "chunks"
    if not base.is_dir():
        return []
    return [p for dump in sorted(base.iterdir()) for p in dump_chunk_files(zone, dump.name, schema, table)]


def landed_tables(zone: LandingZone) -> set[tuple[str, str]]:
    """(schema, table) of every table with log events or dump chunks in the landing zone."""
    names = set(zone.tables())
    base = zone.root / "chunks"
    if base.is_dir():
        names |= {folder_table(p.name) for d in base.iterdir() if d.is_dir() for p in d.iterdir() if p.is_dir()}
    return names


def schema_history_records(zone: LandingZone) -> list[dict]:
    """The committed schema history's records in LSN order (kind, schema, table, statement, columns)."""
    history = zone.read_schema_history()
    if history is None:
        return []
    names = [n for n in ("_lsn", "kind", "schema", "table", "statement", "columns") if n in history.column_names]
    return history.select(names).to_pylist()


def merge_tables(zone: LandingZone) -> list[str]:
    """`db.table` of every table with log events or dump chunks (what a merge can merge), the
    watermark table left out."""
    names = {f"{s}.{t}" for s, t in zone.tables()}
    base = zone.root / "chunks"
    if base.is_dir():
        names |= {"{}.{}".format(*folder_table(p.name)) for d in base.iterdir() if d.is_dir() for p in d.iterdir()}
    names.discard(f"{WATERMARK_SCHEMA}.{WATERMARK_TABLE}")
    return sorted(names)


def dumped_tables(zone: LandingZone) -> set[tuple[str, str]]:
    """(schema, table) of every table with dump chunks (any dump), the watermark table left out."""
    base = zone.root / "chunks"
    if not base.is_dir():
        return set()
    found = {folder_table(p.name) for d in base.iterdir() if d.is_dir() for p in d.iterdir() if p.is_dir()}
    found.discard((WATERMARK_SCHEMA, WATERMARK_TABLE))
    return found


class DumpedTables:
    """`dumped_tables(zone)`, listed again only when `chunks/` or one of its dump folders changed (its
    mtime: a dump folder made or removed, a table's folder made in one, a chunk written into one, whose
    writer touches its dump folder, `landing.chunks.write_chunk`): a call stats the dump
    folders instead of listing every table folder. The same object is returned until a change, so a
    caller sees a new list by its identity. A folder changed within RACY_S is listed again at the next
    call too (a change in the same mtime tick as the listing would go unseen)."""

    RACY_S = 2.0

    def __init__(self, zone: LandingZone) -> None:
        self.zone = zone
        self._stamp: tuple[tuple[str, int], ...] | None = None
        self._found: frozenset[tuple[str, str]] = frozenset()

    def __call__(self) -> frozenset[tuple[str, str]]:
        base = self.zone.root / "chunks"
        try:
            folders = sorted((d.name, d.stat().st_mtime_ns) for d in os.scandir(base) if d.is_dir())
            stamp = ((".", base.stat().st_mtime_ns), *folders)
        except FileNotFoundError:
            stamp = ()
        if stamp != self._stamp:
            self._found = frozenset(dumped_tables(self.zone))
            recent = time.time_ns() - int(self.RACY_S * 1e9)
            self._stamp = None if any(mtime >= recent for _, mtime in stamp) else stamp
        return self._found


def dumped_schema(zone: LandingZone, schema: str, table: str) -> tuple[dict[str, str], int | None] | None:
    """The columns (name -> source type) and relation OID (PostgreSQL; None where not recorded) of the
    table as its newest chunk file read it; None without chunks. Capture's baseline for a table whose
    rows came only from dumps (sources/postgres/schema_change.py)."""
    files = chunk_files(zone, schema, table)
    if not files:
        return None
    newest = max(files, key=lambda p: (p.stat().st_mtime_ns, p.parent.parent.name, p.name))
    file_schema = pq.read_schema(newest)
    columns = {f.name: (f.metadata or {}).get(b"source_type", b"").decode() for f in file_schema.field("after").type}
    relation = (file_schema.metadata or {}).get(RELATION_KEY)
    return columns, int(relation) if relation is not None else None


def chunk_low(marks: Watermarks, meta: ChunkMeta, high: Mark) -> int:
    """The LSN of the chunk's LOW; WatermarkError when the log has none before its HIGH."""
    low = marks.find(meta.low_id)
    if low is None or low.lsn >= high.lsn:
        raise WatermarkError(
            f"{meta.table} chunk {meta.chunk} of dump {meta.dump_id}: HIGH watermark at {high.lsn} has "
            f"{'no LOW' if low is None else f'its LOW after it ({low.lsn})'} in the log"
        )
    return low.lsn


def _high_file(path: Path) -> tuple[str, int, datetime] | None:
    """(HIGH id, HIGH LSN, when it was read) from a chunk's HIGH file; None when it has none."""
    try:
        data = json.loads(high_path(path).read_text())
    except FileNotFoundError:
        return None
    return data["high_id"], int(data["high_lsn"]), datetime.fromisoformat(data["at"])


def readonly_window(path: Path, meta: ChunkMeta) -> Window | None:
    """A read-only chunk's LOW (its file) and HIGH (its HIGH file), wherever the frontier is; None
    while the HIGH file is missing or names another attempt (the chunk was redone after it)."""
    high = _high_file(path)
    if meta.low_lsn is None or high is None or high[0] != meta.high_id:
        return None
    return Window(meta.low_lsn, high[1], high[2])


def chunk_window(marks: Watermarks, path: Path, meta: ChunkMeta) -> Window | None:
    """The chunk's LOW and HIGH when its HIGH is below the frontier of `marks`, for both kinds of
    watermarks; None while it is not part of the stream (HIGH not landed, or the chunk redone).
    A HIGH row without its LOW before it contradicts the protocol: WatermarkError."""
    if meta.low_lsn is not None:
        window = readonly_window(path, meta)
        return window if window is not None and window.high < marks.frontier else None
    high = marks.find(meta.high_id)
    if high is None:
        return None
    return Window(chunk_low(marks, meta, high), high.lsn, high.commit_ts)


def closed_chunks(
    zone: LandingZone, marks: Watermarks, schema: str, table: str, since: int
) -> tuple[list[LandedChunk], list[Mark]]:
    """The chunks of a table whose HIGH is at or after `since` (and below the frontier), in HIGH
    order; and the stale HIGH rows: those whose chunk file is gone or now carries another HIGH (the
    chunk was redone: a later HIGH carries its rows)."""
    name = f"{schema}.{table}"
    found, stale = [], []
    for mark in marks.since(since):
        if mark.kind != "HIGH" or mark.table != name:
            continue
        path = chunk_path(zone, mark.dump_id, schema, table, mark.chunk)
        try:
            meta, row_type = read_chunk_schema(path)
        except FileNotFoundError:
            log.warning("landing.chunk_missing", table=name, dump_id=mark.dump_id, chunk=mark.chunk, path=str(path))
            stale.append(mark)
            continue
        if meta.high_id != mark.id:
            stale.append(mark)
            continue
        low = chunk_low(marks, meta, mark)
        found.append(LandedChunk(path, meta, row_type, low, mark.lsn, mark.commit_ts))
    found += _readonly_closed(zone, marks, schema, table, since)
    return sorted(found, key=lambda c: c.high), stale  # stable: chunks sharing a HIGH keep their order


def _readonly_closed(zone: LandingZone, marks: Watermarks, schema: str, table: str, since: int) -> list[LandedChunk]:
    """Read-only chunks whose HIGH file puts HIGH in [since, frontier), in chunk order (dump id, then
    chunk: `closed_chunks` sorts by HIGH stably, so chunks sharing a HIGH keep it). The HIGH files
    are listed once (a glob of the table's folders; table-watermark chunks have none) and the chunk
    file's footer is read only for those in range."""
    found = []
    for high_file in readonly_high_files(zone, schema, table):
        path = high_file.with_name(high_file.name.removesuffix(HIGH_SUFFIX) + ".parquet")
        high = _high_file(path)
        if high is None or not since <= high[1] < marks.frontier:
            continue
        try:
            meta, row_type = read_chunk_schema(path)
        except FileNotFoundError:  # a HIGH file left without its chunk file: nothing to place
            continue
        if meta.low_lsn is not None and meta.high_id == high[0]:
            found.append(LandedChunk(path, meta, row_type, meta.low_lsn, high[1], high[2]))
    return found


def readonly_high_files(zone: LandingZone, schema: str, table: str) -> list[Path]:
    """The HIGH files of a table's read-only chunks, all dumps, by dump id then chunk."""
    base = zone.root / "chunks"
    if not base.is_dir():
        return []
    folder = glob.escape(table_folder(schema, table))
    return sorted(base.glob(f"*/{folder}/[0-9]*{HIGH_SUFFIX}"))


def dump_chunks(
    zone: LandingZone, marks: Watermarks, dump_id: str, schema: str, table: str
) -> list[LandedChunk] | None:
    """Every chunk of one table in one dump with its LOW and HIGH, in chunk order; None when some
    chunk's HIGH is not (yet) below the frontier."""
    chunks = []
    for path in dump_chunk_files(zone, dump_id, schema, table):
        meta, row_type = read_chunk_schema(path)
        window = chunk_window(marks, path, meta)
        if window is None:
            return None
        chunks.append(LandedChunk(path, meta, row_type, window.low, window.high, window.high_ts))
    return chunks
