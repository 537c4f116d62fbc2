"""DBLog's reconciliation of chunk rows with the log, in plain Python.

This is the reference the Spark merge is checked against, and what the dump tests use.
For one table, given the landed log (up to the committed frontier) and the chunk files:

  1. Index the watermark events (`logtide.watermarks`) by watermark id -> LSN.
  2. For every chunk file, find its LOW and HIGH (capture/landing/reader.py `chunk_window`; a
     read-only chunk's LOW is in its file, its HIGH in its HIGH file). No HIGH below the
     frontier (yet): the chunk is not part of the stream (it was redone, or its HIGH is past
     the frontier). A HIGH without its LOW, or before it, contradicts the protocol: refuse
     (WatermarkError).
  3. Drop chunk rows whose key has a log event of the table between LOW and HIGH: the log
     holds a newer state of that row. PostgreSQL: also those whose key has a log event
     before LOW from a transaction the chunk's snapshot could not see (a commit is in the
     WAL slightly before it is visible; the chunk records its snapshot, see `hidden_events`).
  4. Place the surviving rows at the HIGH watermark's LSN, after any log event there.
     PostgreSQL leaves unchanged TOASTed values out of update events (`missing`): of a row
     dropped in step 3 for events (in the window, or hidden from the chunk's snapshot) that
     all leave a column out, that column is placed at HIGH too (the other columns marked
     missing), since none of those events changed it and the chunk row may be the only full
     copy (see `_base_missing`). PostgreSQL: of the window's events only those whose transaction
     the chunk's snapshot did not see count; the row holds the others already (`read_after`).
  5. Interleave with the log events in LSN order. Rows are named by the newest landed file's key
     (`logtide.key`); events logged under a key since replaced (PostgreSQL, a primary key swapped)
     that do not carry it are named by it from the row's state under their own key
     (capture/dump/old_keys.py, `stored` and the chunk rows among the states).
  5a. TRUNCATE (a `truncate` record of the schema history at LSN T, landed/reader.py
     `landed_truncates`): an event (op `t`, order 0) that empties the table (`apply`). A chunk
     with a truncate inside its window (LOW <= T <= HIGH), or, on PostgreSQL, one before LOW its
     snapshot could not see, loses all its rows (`truncated_by`): they are older than the
     truncate, and every row that exists after it has its own insert event after T. A chunk
     wholly before T is placed as usual and emptied by the truncate; one after T is untouched.
  6. PostgreSQL: complete the creates of key changes that leave TOASTed columns out from the old
     key's state (`stored`, the target's rows before the stream, then the stream; see
     capture/dump/key_changes.py); the columns nothing holds are NULL and listed in
     `ReconcileStats.unknown_values`. That is the output stream.

Keys from the log and from chunks are tuples of the same typed values (both come through
the source's one type mapping), so they compare as the database stored them. The merge's
repair deletes (capture/merge/table.py, step 4) have no counterpart here: this reference builds a
table from nothing, where a dump finds nothing to delete.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow.parquet as pq

from capture.dump.key_changes import Unknown, chunk_knows, is_completed, key_changes, resolve
from capture.dump.old_keys import Logged, file_key, old_key_rows
from capture.events import Lsn, Row
from capture.landing import LandingZone
from capture.landing.chunks import read_chunk_meta
from capture.landing.keys import hashable
from capture.landing.reader import (
    Watermarks,
    chunk_files,
    chunk_window,
    committed_frontier,
    landed_truncates,
    truncated_by,
)
from capture.landing.zone import table_folder, unified
from capture.sources.base import ReadView


@dataclass(frozen=True)
class StreamEvent:
    lsn: int
    order: int  # 0: a log event; 1 + position: a chunk row placed at its HIGH watermark
    op: str  # c, u, d from the log; r for a chunk row; t a TRUNCATE (key (), row None)
    key: Row
    row: dict[str, Any] | None  # the state after the event (None for a delete)
    missing: tuple[str, ...] = ()  # columns the event does not carry: keep the stored value
    xid: int | None = field(default=None, compare=False)  # a log event's transaction (PostgreSQL), for `read_after`


@dataclass
class ReconcileStats:
    chunks: int = 0
    chunks_pending: int = 0  # HIGH not in the log (yet)
    chunk_rows: int = 0
    dropped_by_window: int = 0
    dropped_by_visibility: int = 0  # of those: only because the chunk's snapshot missed an earlier commit
    dropped_by_truncate: int = 0  # rows of chunks a TRUNCATE emptied (`truncated_by`), not counted above
    truncates: int = 0
    unknown_values: list[Unknown] = field(default_factory=list)  # key changes' columns nothing held: NULL
    old_key_events: int = 0  # events logged under a key since replaced, named by the newest (old_keys.py)


def hidden_events(view: ReadView, low: int, lsns: list[int], xids: list[int | None]) -> list[int]:
    """Positions (in LSN order) of the log events before LOW that the chunk's read did not see
    (`ReadView.hides`; PostgreSQL: capture/sources/postgres/read_view.py says why there are any)."""
    return [i for i in range(bisect.bisect_left(lsns, low)) if view.hides(lsns[i], xids[i])]


def reconcile_table(
    zone: LandingZone, schema: str, table: str, stored: dict[Row, dict[str, Any]] | None = None
) -> tuple[list[StreamEvent], ReconcileStats]:
    """The stream of the table's landing zone; `stored`: the target's rows the stream applies to
    (only read for key changes that leave columns out; none: the landing zone is the whole history)."""
    stats = ReconcileStats()
    # One frontier for the log, the watermarks and the chunks, read before the chunk files are
    # listed: a chunk whose HIGH is below it had its file written before (the engine reads again
    # a read-only chunk whose HIGH file the frontier overtook: `DumpEngine._passed`).
    frontier = committed_frontier(zone) or 0
    # each file records the key its events were logged under; rows are named by the newest (as the merge)
    tables = zone.read_files(table_folder(schema, table), Lsn.decode(frontier))
    logged_under = [k for t in tables for k in [file_key(t.schema)] * t.num_rows]
    log_table = unified(tables)
    log_events = [] if log_table is None else log_table.to_pylist()
    key_columns = next((k for k in reversed([file_key(t.schema) for t in tables]) if k), ())
    chunks = []
    for path in chunk_files(zone, schema, table):
        meta = read_chunk_meta(path)
        key_columns = key_columns or meta.key
        chunks.append((meta, path))

    def key_of(image: dict[str, Any]) -> Row:
        return hashable(tuple(image[k] for k in key_columns))  # array keys: lists as tuples

    marks = Watermarks(zone, frontier)
    placed = []
    for meta, path in chunks:
        window = chunk_window(marks, path, meta)
        if window is None:
            stats.chunks_pending += 1
            continue
        placed.append((meta, window.low, window.high, pq.read_table(path).column("after").to_pylist()))
    # events logged under a key since replaced, named by the run's (capture/dump/old_keys.py)
    logged = [
        Logged(int(e["_lsn"]), e["_op"], e["before"], e["after"], _after_missing(e), k)
        for e, k in zip(log_events, logged_under, strict=True)
    ]
    by_key = {(k, v): row for row in (stored or {}).values() for k in {*logged_under} if (v := _key_values(row, k))}
    old = old_key_rows(
        logged, key_columns, lambda k, v: by_key.get((k, v)), [(low, r) for _, low, _, rows in placed for r in rows]
    )
    stats.old_key_events = len(old.deletes) + len(old.leaves)
    stats.unknown_values += old.unknown

    stream = []
    lsns = []
    xids: list[int | None] = []  # PostgreSQL's _txid is the transaction's xid
    for event in log_events:
        lsn = int(event["_lsn"])
        txid = event["_txid"]
        xid = int(txid) if txid and txid.isdigit() else None
        before, after = event["before"], event["after"]
        if lsn in old.leaves:  # logged under an older key: the rule says which run key the row left
            left = old.leaves[lsn]
        elif before is not None and after is not None and key_of(before) != key_of(after):
            # a key change the log could not split: the log's key is not the dump key (no primary key)
            left = key_of(before)
        else:
            left = None
        if left is not None:
            stream.append(StreamEvent(lsn, 0, "d", left, None, xid=xid))
            lsns.append(lsn)
            xids.append(xid)
        image = after if after is not None else before
        missing = _after_missing(event)
        key = old.deletes[lsn] if lsn in old.deletes else key_of(image)
        stream.append(StreamEvent(lsn, 0, event["_op"], key, after, missing, xid))
        lsns.append(lsn)
        xids.append(xid)
    truncates = landed_truncates(zone, frontier, tables={(schema, table)})
    stats.truncates = len(truncates)
    moves = key_changes(stream)
    moved_from: dict[Row, list[int]] = {}
    for lsn, old_key in moves.items():
        if old_key is not None:
            moved_from.setdefault(old_key, []).append(lsn)
    fallback: dict[int, dict[str, Any]] = {}

    for meta, low, high, rows in placed:
        in_window: dict[Row, list[StreamEvent]] = {}
        for i in range(bisect.bisect_right(lsns, low), bisect.bisect_left(lsns, high)):
            in_window.setdefault(stream[i].key, []).append(stream[i])
        hidden: dict[Row, list[StreamEvent]] = {}
        if meta.read_view is not None:
            for i in hidden_events(meta.read_view, low, lsns, xids):
                hidden.setdefault(stream[i].key, []).append(stream[i])
        stats.chunks += 1
        stats.chunk_rows += len(rows)
        if truncated_by(truncates, low, high, meta.read_view) is not None:
            stats.dropped_by_truncate += len(rows)
            continue
        for position, row in enumerate(rows):
            key = key_of(row)
            if key in in_window or key in hidden:
                stats.dropped_by_window += 1
                stats.dropped_by_visibility += key not in in_window
                newer = [*hidden.get(key, ()), *in_window.get(key, ())]  # hidden ones are before LOW
                after = read_after(meta.read_view, hidden.get(key, []), in_window.get(key, []))
                for lsn in moved_from.get(key, ()):
                    knows = chunk_knows(row, newer, lsn - 1, key_columns, after)
                    fallback[lsn] = {**knows, **fallback.get(lsn, {})}
                base = _base_missing(row, newer, key_columns, after)
                if base is not None:
                    stream.append(StreamEvent(high, 1 + position, "r", key, row, base))
            else:
                stream.append(StreamEvent(high, 1 + position, "r", key, row))
    stream += [StreamEvent(t.lsn, 0, "t", (), None) for t in truncates]
    stream.sort(key=lambda e: (e.lsn, e.order))
    if moves:
        fills, unknown = resolve(stream, moves, stored or {}, fallback)
        stream = [
            replace(e, row={**e.row, **fills[e.lsn]}, missing=()) if e.row and is_completed(e, moves) else e
            for e in stream
        ]
        stats.unknown_values += unknown
    return stream, stats


def _after_missing(event: dict[str, Any]) -> tuple[str, ...]:
    return tuple(event.get("_missing") or ()) if event["after"] is not None else ()


def _key_values(row: dict[str, Any], key: tuple[str, ...]) -> Row | None:
    if not key or any(row.get(c) is None for c in key):
        return None
    return hashable(tuple(row[c] for c in key))


def read_after(view: ReadView | None, hidden: list[StreamEvent], window: list[StreamEvent]) -> list[StreamEvent] | None:
    """Of a dropped chunk row's newer events, those that happened after its read: every one hidden
    from its snapshot (`hidden`, before LOW), and of those in its window the ones whose transaction
    the snapshot did not see (`ReadView.sees`; PostgreSQL: committed after the snapshot was taken).
    The others are in the row already. None when the view cannot tell (MySQL/MariaDB have none;
    an event without a transaction id): then the read may have been anywhere in the window."""
    if view is None:
        return None
    seen = [view.sees(e.xid) for e in window]
    if any(s is None for s in seen):
        return None
    return [*hidden, *(e for e, s in zip(window, seen, strict=True) if not s)]


def _base_missing(
    row: dict[str, Any], events: list[StreamEvent], key: tuple[str, ...], after: list[StreamEvent] | None = None
) -> tuple[str, ...] | None:
    """A dropped chunk row still knows the columns that none of the newer events carried (PostgreSQL TOAST):
    its `missing` for a placement at HIGH (every column some event carried), or None when it adds
    nothing (every column was carried) or is not the key's row any more: a newer event deleted the key
    (it ends deleted, or a key change moved another row's values in, whose left-out columns are the
    other row's: `key_changes.resolve` fills them, and the chunk's copy is stale for them).

    `after`: those of `events` that happened after the read (`read_after`; None: unknown, all of
    them may have). The row already holds the others' changes: a key swap the chunk's snapshot saw
    made its rows the swapped ones, the right copy of the columns the swap's creates left out. A row
    that saw all of them is placed whole where one of them left a column out (else the log's events
    hold every column already)."""
    if after is not None:
        if not after and not any(e.missing for e in events if e.row is not None):
            return None
        events = after
    if any(e.row is None for e in events):
        return None
    carried = {c for e in events if e.row is not None for c in e.row if c not in e.missing}
    if all(c in carried or c in key for c in row):
        return None
    return tuple(c for c in row if c in carried and c not in key)


def apply(stream: list[StreamEvent]) -> dict[Row, dict[str, Any]]:
    """The table state the stream produces: every event in order, the last one per key wins, a
    truncate (op `t`) empties it;
    columns an event does not carry (`missing`) keep the value the key had before it."""
    state: dict[Row, dict[str, Any]] = {}
    for event in stream:
        if event.op == "t":
            state.clear()
        elif event.row is None:
            state.pop(event.key, None)
        elif event.missing:
            stored = state.get(event.key, {})
            state[event.key] = {c: stored.get(c) if c in event.missing else v for c, v in event.row.items()}
        else:
            state[event.key] = event.row
    return state
