"""What an output relay reads: the committed landing zone in LSN order, chunk files, its own position.

Only files wholly below the capture checkpoint's frontier are read: they are durable and final (the
capture service writes files, then the checkpoint; a crash leaves nothing below the frontier that a
restart changes), so a relay never sees an event that could still vanish, and never needs capture alive.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import repeat
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from capture.errors import LandingZoneError
from capture.events import lsn_text
from capture.landing.chunks import ChunkMeta, chunk_path, read_chunk_meta
from capture.landing.files import list_segments, write_json_atomic
from capture.landing.reader import LandedChunk, Watermarks, closed_chunks, merge_tables, table_segments
from capture.landing.zone import SCHEMA_HISTORY, LandingZone, folder_table
from capture.output.formats import ArrowEncoder, Message
from capture.output.interleave import Event
from capture.sources.base import WATERMARK_SCHEMA, WATERMARK_TABLE

POSITION_VERSION = 1
CACHE_SLACK_S = 2.0
# files of fewer rows are encoded event by event (`Encoder`): the Arrow path's fixed cost (about 25 kernel
# calls, 0.5 ms a file) is more than the per-row saving below about this many rows (README, Outputs)
ARROW_ROWS = 256


class LandingReader:
    def __init__(self, zone: LandingZone, include: Callable[[str, str], bool] | None = None) -> None:
        """`include(db, table)`: the tables whose events are read (the watermark table always is)."""
        self.zone = zone
        self._include = include
        # the relay's fast path (`read_encoded`): messages written from the files' columns for the tables
        # `encoded(db, table)` names, and their events without images unless `collecting("db.table")`
        self.encoder: ArrowEncoder | None = None
        self.encoded: Callable[[str, str], bool] | None = None
        self.collecting: Callable[[str], bool] | None = None
        self.arrow_rows = ARROW_ROWS
        self._folders: dict[str, bool] = {}
        # folder -> (when it was listed, its segments (first, last, name) not yet wholly read): a folder
        # is listed again only when its mtime is near or after that moment (CACHE_SLACK_S covers
        # coarse file-system timestamps), so a quiet table costs one stat per read, not a listing
        self._listings: dict[str, tuple[float, list[tuple[int, int, str]]]] = {}

    def frontier(self) -> int:
        checkpoint = self.zone.checkpoint()
        return 0 if checkpoint is None else checkpoint.frontier.encode()

    def _files(self, start: int, frontier: int) -> list[tuple[int, int, Path]]:
        found = []
        log_dir = self.zone.log_dir
        if not log_dir.exists():
            return []
        folders = [f for f in log_dir.iterdir() if self._wanted(f.name) and f.is_dir()]
        if self.zone.history_dir.is_dir():  # its `truncate` records are events of the stream
            folders.append(self.zone.history_dir)
        for folder in folders:
            for first, last, name in self._segments(folder, start):
                if last >= start and first < frontier and last < frontier:
                    found.append((first, last, folder / name))
        found.sort()
        return found

    def _wanted(self, name: str) -> bool:
        wanted = self._folders.get(name)
        if wanted is None:
            if name == SCHEMA_HISTORY:
                wanted = False
            else:
                schema, table = folder_table(name)
                marks = schema == WATERMARK_SCHEMA and table == WATERMARK_TABLE
                wanted = marks or self._include is None or self._include(schema, table)
            self._folders[name] = wanted
        return wanted

    def _segments(self, folder: Path, start: int) -> list[tuple[int, int, str]]:
        cached = self._listings.get(folder.name)
        if cached is None or folder.stat().st_mtime >= cached[0] - CACHE_SLACK_S:
            listed_at = time.time()
            cached = (listed_at, [(s.first, s.last, s.path.name) for s in list_segments(folder)])
        segments = [s for s in cached[1] if s[1] >= start]  # what is wholly read is not looked at again
        self._listings[folder.name] = (cached[0], segments)
        return segments

    def read(self, start: int, frontier: int, max_rows: int = 20_000) -> tuple[list[Event], int]:
        """The committed events with start <= LSN < end, in LSN order, and `end` (at most `frontier`):
        where the next read starts. About `max_rows` events at a time (whole files)."""
        events, _messages, end = self.read_encoded(start, frontier, max_rows)
        return events, end

    def read_encoded(
        self, start: int, frontier: int, max_rows: int = 20_000
    ) -> tuple[list[Event], list[Message | None], int]:
        """`read`, and each event's message as `encoder` (an `ArrowEncoder`) writes it from the file's
        columns, for the tables `encoded(db, table)` names; None for the others. Those events come
        without images (before and after None: Arrow building them as dicts was the reader's largest
        cost) unless `collecting("db.table")` says the interleaver may keep them (a dump window of the
        table open, or a look-back) or a LOW watermark of the table is among the events read: only a
        window reads an event's images (its keys, at HIGH), and the message is already written."""
        files = self._files(start, frontier)
        taken, rows, end = [], 0, frontier
        for first, _last, path in files:
            if taken and rows >= max_rows and first > start:
                end = first  # every event below it is in the files taken
                break
            data = pq.read_table(path, memory_map=True)
            taken.append((path, data))
            rows += data.num_rows
        events: list[Event] = []
        messages: list[Message | None] = []
        lows = _lows(taken) if self.collecting is not None else set()
        for path, data in taken:
            if path.parent == self.zone.history_dir:
                truncates = self._truncates(data, start, end)
                events.extend(truncates)
                messages.extend([None] * len(truncates))
                continue
            schema, table = folder_table(path.parent.name)
            metadata = data.schema.metadata or {}
            key = tuple(k for k in metadata.get(b"logtide.key", b"").decode().split(",") if k)
            # column by column: Arrow builds each column's Python values in one pass (a row-wise
            # to_pylist costs about twice as much, the relay's largest share after the output itself)
            texts = data.column("_lsn").cast(pa.string())  # no Decimal objects
            lsns = [int(v) for v in texts.to_pylist()]
            keep = [i for i, lsn in enumerate(lsns) if start <= lsn < end]
            if len(keep) < len(lsns):
                data, lsns, texts = data.take(keep), [lsns[i] for i in keep], texts.take(keep)
            n = len(lsns)
            encoded = None
            if (
                self.encoder is not None
                and n >= self.arrow_rows
                and self.encoded is not None
                and self.encoded(schema, table)
            ):
                encoded = self.encoder.messages(schema, table, key, data, texts.combine_chunks())
            name = f"{schema}.{table}"
            kept = self.collecting is None or self.collecting(name) or name in lows
            bare = encoded is not None and not kept
            missing = data.column("_missing").to_pylist() if "_missing" in data.column_names else [None] * n
            columns = zip(
                lsns,
                data.column("_op").to_pylist(),
                repeat(None, n) if bare else data.column("before").to_pylist(),
                repeat(None, n) if bare else data.column("after").to_pylist(),
                data.column("_txid").to_pylist(),
                _repeated(data.column("_commit_ts")),
                missing,
                strict=True,
            )
            read = [
                Event(schema, table, lsn, op, before, after, key, txid, ts, tuple(gone) if gone else ())
                for lsn, op, before, after, txid, ts, gone in columns
            ]
            events.extend(read)
            if encoded is None:
                messages.extend([None] * n)
            else:  # tuple.__new__ over zip's tuples: no Python code a message
                messages.extend(map(tuple.__new__, repeat(Message, n), zip(read, *encoded, strict=True)))
        lsns = [e.lsn for e in events]
        if sorted(lsns) != lsns:  # files of several tables: merged in LSN order
            ordered = sorted(range(len(events)), key=lsns.__getitem__)
            events, messages = [events[i] for i in ordered], [messages[i] for i in ordered]
        return events, messages, end

    def _truncates(self, history: pa.Table, start: int, end: int) -> list[Event]:
        """The `truncate` records of a schema-history file in [start, end) as events (op `t`) of the
        tables read."""
        out = []
        for row in history.select(["_lsn", "_txid", "_commit_ts", "kind", "schema", "table"]).to_pylist():
            lsn = int(row["_lsn"])
            if row["kind"] != "truncate" or not start <= lsn < end:
                continue
            if self._include is None or self._include(row["schema"], row["table"]):
                schema, table = row["schema"], row["table"]
                out.append(Event(schema, table, lsn, "t", None, None, (), row["_txid"], row["_commit_ts"]))
        return out

    def load_chunk(self, dump_id: str, table: str, chunk: int) -> tuple[ChunkMeta, list[dict[str, Any]]] | None:
        schema, _, name = table.partition(".")
        path = chunk_path(self.zone, dump_id, schema, name, chunk)
        try:
            data = pq.read_table(path, memory_map=True)
            meta = read_chunk_meta(path)
        except FileNotFoundError:
            return None
        return meta, data.column("after").to_pylist()

    def open_windows_before(self, frontier: int) -> int:
        """The LSN of the oldest LOW watermark below `frontier` whose chunk has no HIGH below it (a window
        open at the frontier), or `frontier`: where an output that starts at the frontier begins to read."""
        open_lows: dict[tuple[str, str], int] = {}
        for mark in Watermarks(self.zone, frontier).all():
            slot = (mark.dump_id, mark.table)
            if mark.kind == "LOW":
                open_lows[slot] = mark.lsn
            else:
                open_lows.pop(slot, None)
        return min(open_lows.values(), default=frontier)


class ReadonlyChunks:
    """The read-only chunks (`watermarks: readonly`) of the tables read, found by their HIGH files and
    handed out in HIGH order for the interleaver to place (`Interleaver.readonly_chunk`).

    No watermark row tells a reader of the log where such a chunk stands, so `scan(start, frontier)` is
    called with every new frontier before any event below it is read: it takes in the chunks whose HIGH
    is in [start, frontier) (each range once). That finds every chunk before the log passes its HIGH:
    the dump writes the HIGH file and then reads the frontier again, and reads the chunk again when the
    frontier is already past HIGH (capture/dump/engine.py `_passed`), so a HIGH file that stays valid
    was written while the frontier was at or below HIGH; a scan after reading a frontier sees every
    HIGH below it. `due(before)` hands out (and forgets) the chunks whose HIGH is below `before`;
    `load(chunk)` reads its rows and the events of its table it is judged against, again from the
    landing zone (its LOW is usually behind the reader by then)."""

    def __init__(self, zone: LandingZone, include: Callable[[str, str], bool] | None, lookback: int) -> None:
        self.zone = zone
        self._include = include
        self._lookback = lookback
        self._scanned: int | None = None  # frontier of the last scan: HIGHs below it are taken in
        self._queue: list[LandedChunk] = []
        self._placed = (-1, 1)  # HIGH of the last chunk loaded, and the order its rows end before
        self.superseded = 0

    def scan(self, start: int, frontier: int) -> None:
        since = start if self._scanned is None else max(start, self._scanned)
        if since < frontier:
            marks = Watermarks(self.zone, frontier)
            for name in merge_tables(self.zone):
                schema, _, table = name.partition(".")
                if self._include is not None and not self._include(schema, table):
                    continue
                found, _stale = closed_chunks(self.zone, marks, schema, table, since)
                self._queue += [c for c in found if c.meta.low_lsn is not None]
            self._queue.sort(key=lambda c: c.high)  # stable: chunks sharing a HIGH keep their order
        self._scanned = frontier if self._scanned is None else max(frontier, self._scanned)

    def next_high(self) -> int | None:
        return self._queue[0].high if self._queue else None

    def due(self, before: int) -> list[LandedChunk]:
        n = 0
        while n < len(self._queue) and self._queue[n].high < before:
            n += 1
        taken, self._queue = self._queue[:n], self._queue[n:]
        return taken

    def load(
        self, chunk: LandedChunk, frontier: int
    ) -> tuple[ChunkMeta, list[dict[str, Any]], list[Event], int] | None:
        """The chunk's meta and rows, its table's events (TRUNCATEs too) from its look-back up to HIGH,
        and the order of its first row; None when its file now carries another HIGH (the chunk was read
        again: that attempt has a HIGH of its own, at or above a frontier read after this one).

        Chunks may share a HIGH (read-only HIGHs are log positions: on a source where nothing commits
        between them, several chunks are read at the same binlog end), so each row's order is 1 + its
        position after the rows of the chunks loaded before it at the same HIGH: (LSN, order) names one
        message, as output message ids and acknowledged positions need. Chunks are loaded in `due`'s
        order, which a replay from that HIGH repeats."""
        try:
            data = pq.read_table(chunk.path, memory_map=True)
            meta = read_chunk_meta(chunk.path)
        except FileNotFoundError:
            meta = None
        if meta is None or meta.high_id != chunk.meta.high_id:
            self.superseded += 1
            return None
        schema, _, table = meta.table.partition(".")
        reader = LandingReader(self.zone, lambda s, t: s == schema and t == table)
        at = self._start(schema, table, chunk.low, frontier) if meta.read_view is not None else chunk.low
        events: list[Event] = []
        while at <= chunk.high and at < frontier:
            read, at = reader.read(at, frontier, 5_000)
            events += read
        first = self._placed[1] if self._placed[0] == chunk.high else 1
        rows = data.column("after").to_pylist()
        self._placed = (chunk.high, first + len(rows))
        wanted = [
            e
            for e in events
            if e.lsn <= chunk.high and not (e.schema == WATERMARK_SCHEMA and e.table == WATERMARK_TABLE)
        ]
        return meta, rows, wanted, first

    def _start(self, schema: str, table: str, low: int, frontier: int) -> int:
        """PostgreSQL: where to read from for `lookback` of the table's events before LOW (whole files)
        that the chunk's read view may hide (capture/sources/postgres/read_view.py)."""
        before = [s for s in table_segments(self.zone, schema, table, frontier) if s.first < low]
        counted = 0
        for segment in reversed(before):
            counted += pq.ParquetFile(segment.path).metadata.num_rows
            if counted >= self._lookback:
                return segment.first
        return before[0].first if before else low


def _lows(taken: list[tuple[Path, pa.Table]]) -> set[str]:
    """The tables ("db.table") named by a LOW watermark in the files read."""
    lows: set[str] = set()
    for path, data in taken:
        if folder_table(path.parent.name) == (WATERMARK_SCHEMA, WATERMARK_TABLE):
            marks = data.column("after").to_pylist()
            lows.update(m["table_name"] for m in marks if m is not None and m["kind"] == "LOW")
    return lows


def _repeated(column: pa.ChunkedArray) -> list[Any]:
    """A column's Python values, each distinct one built once: a transaction's events share its commit
    time, and a zoned timestamp costs more to build than the rest of its event's columns together."""
    encoded = column.combine_chunks().dictionary_encode()
    values = encoded.dictionary.to_pylist()
    return [None if i is None else values[i] for i in encoded.indices.to_pylist()]


@dataclass(frozen=True)
class Position:
    """An output's acknowledged position: every message up to (lsn, order) is acknowledged; a restart
    reads the log again from `replay_from` (to rebuild the windows open there) and sends what follows."""

    lsn: int
    order: int
    replay_from: int
    delivered: int = 0  # messages acknowledged so far (all runs)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": POSITION_VERSION,
            "lsn": lsn_text(self.lsn),
            "order": self.order,
            "replay_from": lsn_text(self.replay_from),
            "delivered": self.delivered,
            "updated_at": datetime.now(UTC).isoformat(),
        }


def position_path(zone: LandingZone, output: str) -> Path:
    return zone.root / "outputs" / output / "position.json"


def read_position(zone: LandingZone, output: str) -> Position | None:
    path = position_path(zone, output)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise LandingZoneError(f"output position {path} is unreadable ({exc}); delete it to start over") from None
    if data.get("version") != POSITION_VERSION:
        raise LandingZoneError(f"output position {path} has format {data.get('version')!r}, not {POSITION_VERSION}")
    return Position(int(data["lsn"]), int(data["order"]), int(data["replay_from"]), int(data.get("delivered", 0)))


def write_position(zone: LandingZone, output: str, position: Position) -> None:
    """Written after every acknowledgement: the file's data is fsynced before the rename (never a torn
    position); the folder only when the file is new. A power cut that loses a later rename leaves an
    earlier position: more duplicates after it, never a lost message."""
    path = position_path(zone, output)
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    write_json_atomic(position.to_json(), path, sync_folder=new)
