"""DBLog's online interleaver: log events as they come, each chunk's surviving rows right after its HIGH.

The batch reconciler (capture/dump/reconcile.py) does this for a whole landed table at once; this does it
incrementally, one log event at a time in LSN order, for every table of a source, with memory bounded by the
changes inside open windows:

  - a LOW watermark opens a window for its table: from then on the keys of that table's log events are
    collected (with a short look-back of events before LOW, for PostgreSQL's visibility rule);
  - the matching HIGH loads the chunk file (written durably before HIGH, so it is there), drops the rows
    whose key a log event inside the window touched, and emits the rest right after HIGH (op `r`, placed at
    HIGH's LSN with order 1 + position), before the next log event;
  - every other log event is emitted at once, unchanged (op c/u/d, order 0), a TRUNCATE too (op `t`, no
    images, from the schema history's `truncate` records): a window of its table open across it, or
    (PostgreSQL) opened after it with a snapshot that could not see it, emits none of its chunk's rows at
    its HIGH (all are older than the truncate; every row after it has its own insert event), as the merge.

The rules are reconcile.py's own (its `hidden_events`, `read_after` and `_base_missing`), so the online stream and the
merge judge a chunk row the same way. Several windows (dumps of several tables) may be open at once. A LOW
whose HIGH never comes (a killed dump) is dropped, with a log line, when its dump writes the next LOW for
the same table (the chunk is redone) or when the log's commit time passes `window_timeout_s` after it. A
HIGH that names no chunk file, or a file that now carries another HIGH (the chunk was read again after a
schema change), closes its window without rows, as the merge ignores it. Anything else that contradicts the
protocol raises WatermarkError: a watermark id seen twice, a HIGH whose LOW was never seen or came after it,
a HIGH arriving after its window timed out, a LOW for a chunk before one already emitted. (A chunk whose
rows were emitted at its HIGH and that the dump then reads again, after a schema change, is emitted again
at its new HIGH: the later rows restate the earlier ones.)

No I/O here except through `load_chunk`, so the scenarios are tested without servers.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from capture.dump.reconcile import StreamEvent, _base_missing, hidden_events, read_after
from capture.errors import WatermarkError
from capture.events import Row
from capture.landing.chunks import ChunkMeta
from capture.landing.keys import hashable
from capture.landing.reader import TruncateMark, truncated_by
from capture.log import get_logger
from capture.sources.base import WATERMARK_SCHEMA, WATERMARK_TABLE

log = get_logger(__name__)

SEEN_IDS = 100_000  # watermark ids remembered to refuse a duplicate


@dataclass(slots=True)  # not frozen: a frozen dataclass costs 6 times as much to build, once a message
class Event:
    """One event of the output stream: a landed log event (order 0), a TRUNCATE (op `t`, order 0, no
    images, `key` empty) or a chunk row (op `r`, order 1 + its position in the chunk, at its HIGH
    watermark's LSN, with `dump_id` and `chunk`). Treat it as immutable (the interleaver may hold it in a
    window): an enrichment hook returns a changed copy (`dataclasses.replace`)."""

    schema: str
    table: str
    lsn: int
    op: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    key: tuple[str, ...]  # key column names
    txid: str | None = None
    commit_ts: datetime | None = None
    missing: tuple[str, ...] = ()  # columns the event does not carry (PostgreSQL TOAST): keep the stored value
    order: int = 0
    dump_id: str | None = None
    chunk: int | None = None

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.table}"

    @property
    def position(self) -> tuple[int, int]:
        return (self.lsn, self.order)

    def key_values(self) -> dict[str, Any]:
        image = self.after if self.after is not None else self.before
        return {k: (image or {}).get(k) for k in self.key}


ChunkLoader = Callable[[str, str, int], "tuple[ChunkMeta, list[dict[str, Any]]] | None"]


@dataclass
class _Window:
    low_id: str
    dump_id: str
    table: str  # db.table
    chunk: int
    low_lsn: int
    low_ts: datetime | None
    history_from: int  # LSN of the oldest event this window needs (its look-back), for a replay after a restart
    events: list[Event] = field(default_factory=list)  # look-back (before LOW), then the window's own


class Interleaver:
    """Feed log events in LSN order to `push`; it returns what to emit, in order.

    `load_chunk(dump_id, "db.table", chunk)` returns the chunk file's meta and rows (after images), or None
    when there is no file. `lookback`: events (all tables) kept to find, at a HIGH, the events before its LOW
    that a PostgreSQL chunk's snapshot could not see."""

    def __init__(self, load_chunk: ChunkLoader, window_timeout_s: float = 3600.0, lookback: int = 10_000) -> None:
        self._load = load_chunk
        self._timeout = window_timeout_s
        self._open: dict[str, _Window] = {}  # LOW id -> window
        self._by_table: dict[str, list[_Window]] = {}  # db.table -> its open windows
        self._seen: OrderedDict[str, None] = OrderedDict()  # watermark ids already read
        self._dropped: OrderedDict[str, str] = OrderedDict()  # LOW id -> why its window was dropped
        self._finished: dict[tuple[str, str], int] = {}  # (dump, table) -> last chunk emitted
        self._recent: deque[Event] = deque(maxlen=lookback)
        self._last_ts: datetime | None = None
        self._last_lsn = -1
        self.rows_emitted = 0
        self.rows_dropped = 0
        self.windows_dropped = 0

    @property
    def open_windows(self) -> int:
        return len(self._open)

    def collecting(self, table: str) -> bool:
        """Whether `push` may keep the events of `table` ("db.table") from now until the next LOW of
        it: a window of it is open, or the look-back keeps every event. Only kept events have their
        images read (a window's keys, at HIGH); the others' images are never looked at here."""
        return table in self._by_table or self._recent.maxlen != 0

    def replay_from(self, next_lsn: int) -> int:
        """Where a restarted interleaver must start reading to rebuild the open windows (their look-back
        included); `next_lsn` when none is open."""
        if not self._open:  # the usual case, asked for every event
            return next_lsn
        return min((w.history_from for w in self._open.values()), default=next_lsn)

    def push(self, event: Event) -> list[Event]:
        if event.lsn <= self._last_lsn:
            raise WatermarkError(f"log event at LSN {event.lsn} after LSN {self._last_lsn}: the log must be in order")
        self._last_lsn = event.lsn
        if event.commit_ts is not None and event.commit_ts != self._last_ts:
            self._last_ts = event.commit_ts
            self._expire(event.commit_ts)
        if event.schema == WATERMARK_SCHEMA and event.table == WATERMARK_TABLE:
            mark = event.after
            if mark is None:
                return []
            if mark["kind"] == "LOW":
                self._low(mark, event)
                return []
            if mark["kind"] == "HIGH":
                return self._high(mark, event)
            raise WatermarkError(f"watermark {mark['watermark_id']} at LSN {event.lsn} has kind {mark['kind']!r}")
        if self._by_table:  # a window is open
            for window in self._by_table.get(event.qualified_name, ()):
                window.events.append(event)
        self._recent.append(event)
        return [event]

    # -- watermarks ---------------------------------------------------------------------------

    def _remember(self, mark_id: str, lsn: int) -> None:
        if mark_id in self._seen:
            raise WatermarkError(f"watermark {mark_id} is in the log twice (again at LSN {lsn})")
        self._seen[mark_id] = None
        if len(self._seen) > SEEN_IDS:
            self._seen.popitem(last=False)

    def _low(self, mark: dict[str, Any], event: Event) -> None:
        mark_id, dump_id, table, chunk = mark["watermark_id"], mark["dump_id"], mark["table_name"], int(mark["chunk"])
        self._remember(mark_id, event.lsn)
        done = self._finished.get((dump_id, table))
        if done is not None and chunk < done:  # the same number again: read again after a schema change
            raise WatermarkError(
                f"LOW watermark {mark_id} at LSN {event.lsn} is for chunk {chunk} of {table} in dump {dump_id}, "
                f"but chunk {done} was already emitted: watermarks out of order"
            )
        for window in list(self._by_table.get(table, ())):
            if window.dump_id == dump_id:
                self._drop(window, f"dump {dump_id} wrote a new LOW (chunk {chunk}) at LSN {event.lsn}: chunk redone")
        pre = [e for e in self._recent if e.qualified_name == table]
        window = _Window(
            mark_id, dump_id, table, chunk, event.lsn, event.commit_ts, pre[0].lsn if pre else event.lsn, pre
        )
        self._open[mark_id] = window
        self._by_table.setdefault(table, []).append(window)

    def _close(self, window: _Window) -> None:
        del self._open[window.low_id]
        windows = self._by_table[window.table]
        windows.remove(window)
        if not windows:
            del self._by_table[window.table]

    def _drop(self, window: _Window, why: str) -> None:
        self._close(window)
        self._dropped[window.low_id] = why
        if len(self._dropped) > SEEN_IDS:
            self._dropped.popitem(last=False)
        self.windows_dropped += 1
        log.warning(
            "output.window_dropped",
            dump_id=window.dump_id,
            table=window.table,
            chunk=window.chunk,
            low_lsn=window.low_lsn,
            reason=why,
        )

    def _expire(self, now: datetime) -> None:
        for window in list(self._open.values()):
            if window.low_ts is not None and (now - window.low_ts).total_seconds() > self._timeout:
                self._drop(window, f"no HIGH within window_timeout_s={self._timeout:g} of log time")

    def _high(self, mark: dict[str, Any], event: Event) -> list[Event]:
        mark_id, dump_id, table, chunk = mark["watermark_id"], mark["dump_id"], mark["table_name"], int(mark["chunk"])
        self._remember(mark_id, event.lsn)
        loaded = self._load(dump_id, table, chunk)
        if loaded is None or loaded[0].high_id != mark_id:
            # no chunk file carries this HIGH: the chunk was read again (the merge ignores it too)
            for window in list(self._by_table.get(table, ())):
                if window.dump_id == dump_id and window.chunk == chunk:
                    self._close(window)
            log.info("output.chunk_superseded", dump_id=dump_id, table=table, chunk=chunk, high_lsn=event.lsn)
            return []
        meta, rows = loaded
        window = self._open.get(meta.low_id)
        if window is None:
            if meta.low_id in self._dropped:
                raise WatermarkError(
                    f"HIGH watermark of {table} chunk {chunk} (dump {dump_id}) at LSN {event.lsn} arrived after its "
                    f"window was dropped ({self._dropped[meta.low_id]}); raise the output's window_timeout_s"
                )
            raise WatermarkError(
                f"HIGH watermark of {table} chunk {chunk} (dump {dump_id}) at LSN {event.lsn} has no LOW before it "
                f"in the log (LOW id {meta.low_id})"
            )
        self._close(window)
        self._finished[(dump_id, table)] = chunk
        return self._survivors(window, meta, rows, event)

    # -- read-only chunks ------------------------------------------------------------------------

    def readonly_chunk(
        self,
        meta: ChunkMeta,
        rows: list[dict[str, Any]],
        low: int,
        high: int,
        high_ts: datetime | None,
        events: list[Event],
        first_order: int = 1,
    ) -> list[Event]:
        """A read-only chunk's (`watermarks: readonly`) surviving rows, placed at its HIGH position
        (order 1 + position), for the caller to emit once every log event at or before HIGH is emitted
        and before any after it. No watermark rows bracket such a chunk: its LOW is in its file and its
        HIGH in its HIGH file (capture/landing/reader.py `readonly_window`), so the caller finds it and
        gives, read again from the landing zone, the events of its table (TRUNCATEs too) from before
        LOW (PostgreSQL: as far back as its look-back; the read view hides events before LOW by xid)
        up to HIGH. The rules are the table windows' (and the merge's): a key an event inside LOW..HIGH
        touched is dropped, on PostgreSQL also one an event the snapshot did not see touched, and a
        TRUNCATE inside the window (or one the snapshot missed) drops every row. Row i has order
        `first_order` + i: chunks sharing a HIGH take consecutive orders (capture/output/landing.py)."""
        table = meta.table
        mine = [e for e in events if e.qualified_name == table and e.lsn <= high]
        window = _Window(meta.low_id, meta.dump_id, table, meta.chunk, low, None, low, mine)
        stub = Event("", "", high, "r", None, None, (), None, high_ts)
        return self._survivors(window, meta, rows, stub, readonly=True, first_order=first_order)

    def _survivors(
        self,
        window: _Window,
        meta: ChunkMeta,
        rows: list[dict[str, Any]],
        high: Event,
        readonly: bool = False,
        first_order: int = 1,
    ) -> list[Event]:
        """reconcile.py's step 3 and 4 for one chunk: the rows no window event (or, on PostgreSQL, no event
        the chunk's snapshot missed) supersedes, and the columns of superseded rows nothing carried."""
        key_columns = meta.key

        def key_of(image: dict[str, Any]) -> Row:
            return hashable(tuple(map(image.__getitem__, key_columns)))  # array keys: lists as tuples; NaN

        stream: list[StreamEvent] = []
        lsns: list[int] = []
        xids: list[int | None] = []
        truncates = [TruncateMark(e.lsn, e.schema, e.table, e.txid, e.commit_ts) for e in window.events if e.op == "t"]
        # a TRUNCATE in the window, or one before LOW its snapshot missed: no row survives (the merge's rule)
        if truncates and truncated_by(truncates, window.low_lsn, high.lsn, meta.read_view) is not None:
            self.rows_dropped += len(rows)
            return []
        for e in window.events:
            xid = int(e.txid) if e.txid and e.txid.isdigit() else None
            if e.op == "t":
                continue
            if e.before is not None and e.after is not None and key_of(e.before) != key_of(e.after):
                stream.append(StreamEvent(e.lsn, 0, "d", key_of(e.before), None, xid=xid))
                lsns.append(e.lsn)
                xids.append(xid)
            image = e.after if e.after is not None else e.before
            assert image is not None
            stream.append(StreamEvent(e.lsn, 0, e.op, key_of(image), e.after, e.missing if e.after else (), xid))
            lsns.append(e.lsn)
            xids.append(xid)
        in_window: dict[Row, list[StreamEvent]] = {}
        for i in range(bisect.bisect_right(lsns, window.low_lsn), len(stream)):
            in_window.setdefault(stream[i].key, []).append(stream[i])
        hidden: dict[Row, list[StreamEvent]] = {}
        if meta.read_view is not None:
            if not readonly and len(self._recent) == self._recent.maxlen and lsns and lsns[0] > meta.read_view.lookback:
                log.warning(
                    "output.lookback_short",
                    table=window.table,
                    chunk=meta.chunk,
                    note="raise lookback: events before LOW the chunk's snapshot missed may not be found",
                )
            for i in hidden_events(meta.read_view, window.low_lsn, lsns, xids):
                hidden.setdefault(stream[i].key, []).append(stream[i])
        schema, _, name = window.table.partition(".")
        out = []
        for position, row in enumerate(rows):
            key = key_of(row)
            missing: tuple[str, ...] = ()
            if key in in_window or key in hidden:
                self.rows_dropped += 1
                after = read_after(meta.read_view, hidden.get(key, []), in_window.get(key, []))
                base = _base_missing(row, [*hidden.get(key, ()), *in_window.get(key, ())], key_columns, after)
                if base is None:
                    continue
                missing = base
            out.append(
                Event(
                    schema,
                    name,
                    high.lsn,
                    "r",
                    None,
                    row,
                    key_columns,
                    None,
                    high.commit_ts,
                    missing,
                    first_order + position,
                    meta.dump_id,
                    meta.chunk,
                )
            )
        self.rows_emitted += len(out)
        return out
