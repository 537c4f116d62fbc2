"""Change messages held between reading and hand-over, and their column-wise decoding.

Per transaction, the reader does next to nothing: a Begin or Commit is unpacked into three
integers, a change message is appended to its table's run. Transactions are held in a
`Group` and handed over together (`Group.hand_over`): each table's run of changes, across
all the group's transactions, is split, typed (`decode`) and handed to the landing writer as
one `ColumnBatch`, whose rows carry their own transaction's LSN, xid and commit time; then
one `TransactionEnd` for the group's last transaction. So the Arrow work is paid per group,
not per transaction: a single-row transaction costs what its three messages cost to read.

LSN of a change: (commit LSN of its transaction, index of the change inside it), the index
counting events: an update that changes the key becomes a delete and a create (two
indexes). Only an update carrying an old image can do that, so the indexes are the
messages' places in their transaction unless the group holds such an update; then they
are counted again after decoding (`_minors`).

Decoding is column-wise: the messages of a run are split by `pgoutput.split_tuples` into one
Arrow text array per column and typed by the same builders as chunk rows (`types`): no
Python object per value on the way.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import accumulate
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from capture.events import (
    LSN_ARROW_TYPE,
    MINOR_BITS,
    UTC_MICROS,
    ColumnBatch,
    Lsn,
    TableSchema,
    TransactionEnd,
    Truncate,
    column_batch,
)
from capture.sources.postgres import pgoutput
from capture.sources.postgres.connection import format_lsn
from capture.sources.postgres.types import ClampedKeys, ColumnBuilder

INSERT, UPDATE, DELETE = 73, 85, 68  # I U D
OLD_KEY, OLD_ROW, NEW = 75, 79, 78  # K O N
_MISSING = pa.list_(pa.string())
_MAJOR_TYPE = pa.decimal128(20, 0)  # a commit LSN; x 2^32, + an index: LSN_ARROW_TYPE's range
_MINOR_SPAN = pa.scalar(Decimal(1 << MINOR_BITS), pa.decimal128(11, 0))
_INDEX_TYPE = pa.decimal128(19, 0)
_UNIX_FROM_PG_US = int((pgoutput.PG_EPOCH.timestamp()) * 1_000_000)


@dataclass
class TableInfo:
    """What decoding needs to know of a relation (from its Relation message and the catalog)."""

    schema: TableSchema
    builders: list[ColumnBuilder | None]  # None: a string column, the text is the value
    key_indexes: tuple[int, ...]
    identity_names: tuple[str, ...]  # columns an old key-only image carries
    key_only_missing: tuple[str, ...]  # what an old key-only image does not carry
    captured: bool
    watermark: bool
    clamped_keys: ClampedKeys  # the source's `clamped_keys` setting, over this table's key values


class Decoded(NamedTuple):
    """A run's events: op, images, missing columns, and `origin`: each event's message (None
    when every message is exactly one event, in order)."""

    ops: pa.Array
    before: pa.Array
    after: pa.Array
    missing: pa.Array | None
    origin: list[int] | None


@dataclass(slots=True)
class _Run:
    """Change messages of one table as they came, with each one's transaction (its number in
    the group) and place among that transaction's changes."""

    table: TableInfo
    messages: list[bytes] = field(default_factory=list)
    txns: list[int] = field(default_factory=list)
    places: list[int] = field(default_factory=list)


class Group:
    """Transactions read and not yet handed over (see the module docstring)."""

    def __init__(self, max_changes: int, max_bytes: int) -> None:
        self.max_changes, self.max_bytes = max_changes, max_bytes
        self._reset()
        self.open = False  # inside a transaction (Begin read, Commit not yet)
        self.place = 0  # changes of the open transaction so far
        self.since = 0.0  # monotonic time the group's first transaction began
        self.ended = 0  # end LSN of the last transaction read to its Commit (never goes back)

    def _reset(self) -> None:
        self.transactions: list[tuple[int, int, int]] = []  # commit LSN, commit time (µs, PG epoch), xid
        self.carried = 0  # events that splits added to the first transaction before the group (it was open)
        self.runs: dict[int, _Run] = {}  # relation oid -> its run, in the order of their first change
        self.held = 0  # change messages held
        self.bytes = 0
        self.splits = False  # some held update carries an old image (it may be a key change)
        self.open_held = False  # some held change belongs to the open transaction
        self.end: tuple[int, int] | None = None  # end LSN, commit µs of the last finished transaction

    @property
    def pending(self) -> bool:
        """Something to hand over: changes, or finished transactions (their commit moves the frontier)."""
        return bool(self.runs) or self.end is not None

    @property
    def full(self) -> bool:
        """Holding max_changes changes or transactions, or max_bytes of messages: memory is bounded."""
        return (
            self.held >= self.max_changes or self.bytes >= self.max_bytes or len(self.transactions) >= self.max_changes
        )

    def begin(self, buf: bytes) -> None:
        if not self.runs and self.end is None:
            self.since = time.monotonic()
        self.transactions.append(pgoutput.begin_fields(buf))
        self.open, self.place = True, 0

    def run(self, oid: int, table: TableInfo) -> _Run:
        run = self.runs.get(oid)
        if run is None:
            run = self.runs[oid] = _Run(table)
        return run

    def add(self, run: _Run, buf: bytes) -> None:
        run.messages.append(buf)
        run.txns.append(len(self.transactions) - 1)
        run.places.append(self.place)
        self.place += 1
        self.held += 1
        self.bytes += len(buf)
        self.open_held = True
        if buf[0] == UPDATE and buf[5] != NEW:
            self.splits = True

    def commit(self, buf: bytes) -> None:
        self.end = pgoutput.commit_fields(buf)
        self.ended = max(self.ended, self.end[0])
        self.open = self.open_held = False

    @property
    def large(self) -> bool:
        """Holding half of max_changes changes or transactions: worth a commit of its own."""
        half = self.max_changes // 2
        return self.held >= half or len(self.transactions) >= half

    def hand_over(self, flush: bool = False) -> Iterator[ColumnBatch | TransactionEnd]:
        """The held changes as one ColumnBatch per table, then the last finished transaction's
        end, unless the open transaction's changes went with them (its own end covers them);
        `flush`: the end asks the writer to commit now (`TransactionEnd.flush`)."""
        runs = [(run, decode(run.table, run.messages)) for run in self.runs.values()]
        minors, extra = self._minors(runs) if self.splits else (None, self.carried)
        if runs:
            lsns, micros, xids = zip(*self.transactions, strict=True)
            bases = pc.multiply(pa.array(lsns, pa.uint64()).cast(_MAJOR_TYPE), _MINOR_SPAN)
            txids = pa.array(xids, pa.int64()).cast(pa.string())
            times = pc.add(pa.array(micros, pa.int64()), _UNIX_FROM_PG_US).cast(UTC_MICROS)
        for i, (run, decoded) in enumerate(runs):
            txns = run.txns if decoded.origin is None else [run.txns[o] for o in decoded.origin]
            places = run.places if minors is None else minors[i]
            picked = pa.array(txns, pa.int32())
            lsn = pc.add(pc.take(bases, picked), pa.array(places, pa.int64()).cast(_INDEX_TYPE))
            _, first_micros, first_xid = self.transactions[txns[0]]
            yield column_batch(
                run.table.schema,
                str(first_xid),
                pgoutput.timestamp(first_micros),
                run.table.watermark,
                lsn.cast(LSN_ARROW_TYPE),
                pc.take(txids, picked),
                pc.take(times, picked),
                *decoded[:4],
            )
        end = None if self.open_held else self.end
        carried = self.transactions[-1] if self.open else None
        self._reset()
        if carried is not None:  # the open transaction stays, as the group's first
            self.transactions, self.carried, self.splits = [carried], extra, extra > 0
        if end is not None:
            yield TransactionEnd(
                Lsn(end[0]), {"lsn": format_lsn(end[0])}, pgoutput.timestamp(end[1]), self.since, flush
            )
        self.since = time.monotonic()

    def truncate(
        self, tables: list[TableSchema], dropped: bool = False
    ) -> Iterator[ColumnBatch | TransactionEnd | Truncate]:
        """A Truncate message of the open transaction: the changes held before it are handed over
        (they come first in the log), then one `Truncate` per table, each taking the next index
        inside the transaction (after every event before it, both halves of key changes counted).
        `dropped`: the tables were dropped, each Truncate names its `relation` (Truncate.relation)."""
        yield from self.hand_over()
        commit_lsn, micros, xid = self.transactions[-1]
        first = self.place + self.carried
        for i, table in enumerate(tables):
            ts = pgoutput.timestamp(micros)
            relation = table.relation if dropped else None
            yield Truncate(Lsn(commit_lsn, first + i), str(xid), ts, table.schema, table.table, relation)
        self.place += len(tables)

    def _minors(self, runs: list[tuple[_Run, Decoded]]) -> tuple[list[list[int]], int]:
        """Per run, each event's index inside its transaction, counting both events of a key
        change (the messages walked in their order: transaction, place); and the events that
        splits added to the last transaction in all (kept if it is open)."""
        counts = []
        for run, decoded in runs:
            per_message = [1] * len(run.messages)
            if decoded.origin is not None:
                per_message = [0] * len(run.messages)
                for o in decoded.origin:
                    per_message[o] += 1
            counts.append(per_message)
        order = sorted(
            (run.txns[p], run.places[p], r, p) for r, (run, _) in enumerate(runs) for p in range(len(run.txns))
        )
        extra = [0] * len(self.transactions)
        extra[0] = self.carried
        first_index = [[0] * len(run.messages) for run, _ in runs]
        for txn, place, r, p in order:
            first_index[r][p] = place + extra[txn]
            extra[txn] += counts[r][p] - 1
        minors = []
        for r, (_run, decoded) in enumerate(runs):
            if decoded.origin is None:
                minors.append(first_index[r])
                continue
            events, previous = [], -1
            for o in decoded.origin:
                events.append(first_index[r][o] + (o == previous))
                previous = o
            minors.append(events)
        return minors, extra[-1]


def decode(table: TableInfo, messages: list[bytes]) -> Decoded:
    """The events of `messages` (I/U/D of one relation).

    Every message's first tuple starts at byte 6 (kind, relation oid, 'N'/'K'/'O'); an update
    with an old image has its new tuple after it. Both are split column-wise (`split_tuples`);
    the rules of the reader's module docstring then pick, per change, which tuple is which image."""
    count = len(messages)
    width = len(table.builders)
    octets = pgoutput.message_octets(b"".join(messages))
    starts = pa.array(list(accumulate(map(len, messages), initial=0))[:-1], pa.int64())
    kinds = pc.take(octets, starts)
    markers = pc.take(octets, pc.add(starts, 5))
    first = pgoutput.split_tuples(octets, pc.add(starts, 6), width)
    if pc.all(pc.equal(markers, NEW)).as_py():  # inserts and updates without old images: the bulk case
        if not pc.all(pc.or_(pc.equal(kinds, INSERT), pc.equal(kinds, UPDATE))).as_py():
            raise ValueError("pgoutput D message without an old tuple")
        ops = pc.if_else(pc.equal(kinds, INSERT), pa.scalar("c"), pa.scalar("u"))
        missing = _missing(table.schema.names, first.unchanged)
        missing_array = (
            pa.array([list(missing.get(i, ())) or None for i in range(count)], _MISSING) if missing else None
        )
        return Decoded(ops, pa.nulls(count, table.schema.row_type), _images(table, first.texts), missing_array, None)
    kinds_l, markers_l = kinds.to_pylist(), markers.to_pylist()
    for kind, marker in zip(kinds_l, markers_l, strict=True):
        if kind != DELETE and marker != NEW and not (kind == UPDATE and marker in (OLD_KEY, OLD_ROW)):
            raise ValueError(f"pgoutput {chr(kind)} message without a new tuple")
    texts, unchanged = first.texts, first.unchanged
    with_old = [i for i, (k, m) in enumerate(zip(kinds_l, markers_l, strict=True)) if k == UPDATE and m != NEW]
    key_changed: list[bool] = []
    if with_old:
        picked = pa.array(with_old, pa.int64())
        ends = pc.take(first.ends, picked)
        if not pc.all(pc.equal(pc.take(octets, ends), NEW)).as_py():
            raise ValueError("pgoutput U message without a new tuple")
        second = pgoutput.split_tuples(octets, pc.add(ends, 1), width)
        full_old = pc.equal(pc.take(markers, picked), OLD_ROW)
        new_texts, new_unchanged = [], []
        for i in range(width):
            old_text, text, marked = pc.take(texts[i], picked), second.texts[i], second.unchanged[i]
            if marked is not None:  # REPLICA IDENTITY FULL: the old row has what the new one leaves out
                fill = pc.and_(marked, full_old)
                text = pc.if_else(fill, old_text, text)
                old_marked = pc.take(unchanged[i], picked) if unchanged[i] is not None else None
                marked = pc.and_not(marked, fill) if old_marked is None else pc.if_else(fill, old_marked, marked)
                marked = marked if pc.any(marked).as_py() else None
            new_texts.append(text)
            new_unchanged.append(marked)
        changed = pa.repeat(pa.scalar(False), len(with_old))
        for i in table.key_indexes:
            old_text, text = pc.take(texts[i], picked), new_texts[i]
            differ = pc.fill_null(
                pc.or_kleene(pc.not_equal(old_text, text), pc.xor(pc.is_null(old_text), pc.is_null(text))), False
            )
            if new_unchanged[i] is not None:
                differ = pc.and_not(differ, new_unchanged[i])
            changed = pc.or_(changed, differ)
        key_changed = changed.to_pylist()
        texts = [pa.concat_arrays([a, b]) for a, b in zip(texts, new_texts, strict=True)]
        unchanged = [_concat_masks(a, b, count, len(with_old)) for a, b in zip(unchanged, new_unchanged, strict=True)]
    missing_by_image = _missing(table.schema.names, unchanged)
    # per event: op, before image, after image, missing columns, message
    events: list[tuple[str, int | None, int | None, tuple[str, ...], int]] = []
    new = count  # the images of the second tuples follow those of the first
    for i, (kind, marker) in enumerate(zip(kinds_l, markers_l, strict=True)):
        old_missing = table.key_only_missing if marker == OLD_KEY else missing_by_image.get(i, ())
        if kind == INSERT:
            events.append(("c", None, i, (), i))
        elif kind == DELETE:
            events.append(("d", i, None, old_missing, i))
        elif marker == NEW:
            events.append(("u", None, i, missing_by_image.get(i, ()), i))
        else:
            if key_changed[new - count]:  # a key change: delete the old key, create the new
                events.append(("d", i, None, old_missing, i))
                events.append(("c", None, new, missing_by_image.get(new, ()), i))
            else:
                events.append(("u", i if marker == OLD_ROW else None, new, missing_by_image.get(new, ()), i))
            new += 1
    ops, before, after, missing, origin = zip(*events, strict=True)
    images = _images(table, texts)
    missing_array = pa.array([list(m) if m else None for m in missing], _MISSING) if any(missing) else None
    return Decoded(
        pa.array(ops, pa.string()),
        images.take(pa.array(before, pa.int64())),
        images.take(pa.array(after, pa.int64())),
        missing_array,
        list(origin) if len(events) != count else None,
    )


def _images(table: TableInfo, texts: list[pa.Array]) -> pa.StructArray:
    """Typed row images from the column texts (Arrow casts, column by column). A captured table's
    date or timestamp key value that would land as another value stops capture, unless the source
    sets `clamped_keys: accept` (`ClampedKeys`); a multi-dimensional array in any column stops it
    (`ClampedKeys.check_arrays`), before anything of the group is handed over."""
    if table.captured:
        table.clamped_keys.check(table.schema, [texts[i] for i in table.key_indexes], table.key_indexes)
        table.clamped_keys.check_arrays(table.schema, texts)
    arrays = [text if build is None else build(text) for text, build in zip(texts, table.builders, strict=True)]
    return pa.StructArray.from_arrays(arrays, fields=list(table.schema.row_type))


def _concat_masks(first: pa.Array | None, second: pa.Array | None, n_first: int, n_second: int) -> pa.Array | None:
    if first is None and second is None:
        return None
    return pa.concat_arrays(
        [
            first if first is not None else pa.repeat(pa.scalar(False), n_first),
            second if second is not None else pa.repeat(pa.scalar(False), n_second),
        ]
    )


def _missing(names: tuple[str, ...], unchanged: list[pa.Array | None]) -> dict[int, tuple[str, ...]]:
    """Image number -> the columns it does not carry (unchanged TOASTed values), in column order."""
    found: dict[int, list[str]] = {}
    for name, marked in zip(names, unchanged, strict=True):
        if marked is not None:
            for image in pc.indices_nonzero(marked).to_pylist():
                found.setdefault(image, []).append(name)
    return {image: tuple(columns) for image, columns in found.items()}
