"""Buffers change events and commits them to the landing zone at transaction boundaries.

The commit order is fixed here, in code: (1) write every finished transaction's events as
Parquet files (temp name, fsync, rename), (2) fsync their folders, (3) write the
checkpoint whose frontier covers exactly those events. A crash between any two steps
leaves files past the old frontier, which the next start deletes and reads again.

A transaction too large for memory is spilled: its events are written as files past the
frontier before it commits, and become committed when the checkpoint after it is written.

Events arrive either as `Change` rows (MySQL/MariaDB) or already as Arrow columns
(`ColumnBatch`, PostgreSQL): a buffer keeps what it got, one piece per batch, and a file is
the concatenation of its pieces, so columns built by a reader are never turned into Python
values and back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from itertools import chain
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from capture.events import (
    LSN_ARROW_TYPE,
    MINOR_BITS,
    UTC_MICROS,
    ChangeBatch,
    ColumnBatch,
    Lsn,
    Op,
    SchemaChange,
    TableSchema,
    TransactionEnd,
    Truncate,
)
from capture.landing.checkpoint import Checkpoint
from capture.landing.files import fsync_dir, segment_name, write_parquet_atomic
from capture.landing.zone import SCHEMA_HISTORY, LandingZone, schema_version, table_folder

ENVELOPE = [
    pa.field("_lsn", LSN_ARROW_TYPE, nullable=False),
    pa.field("_op", pa.string(), nullable=False),
    pa.field("_txid", pa.string()),
    pa.field("_commit_ts", UTC_MICROS),
    pa.field("_watermark", pa.bool_(), nullable=False),
]
SCHEMA_HISTORY_SCHEMA = pa.schema(
    [
        pa.field("_lsn", LSN_ARROW_TYPE, nullable=False),
        pa.field("_txid", pa.string()),
        pa.field("_commit_ts", UTC_MICROS),
        pa.field("kind", pa.string(), nullable=False),  # "ddl", "table" or "truncate"
        pa.field("schema", pa.string()),
        pa.field("table", pa.string()),
        pa.field("statement", pa.string()),
        pa.field(
            "columns",
            # definition: the source's whole column definition (Column.definition; null where none)
            pa.list_(
                pa.struct(
                    [
                        ("name", pa.string()),
                        ("type", pa.string()),
                        ("source_type", pa.string()),
                        ("definition", pa.string()),
                    ]
                )
            ),
        ),
        pa.field("key", pa.list_(pa.string())),
        pa.field("fingerprint", pa.string()),
        pa.field("relation", pa.int64()),  # PostgreSQL: a `table` record's relation OID (TableSchema.relation),
        # or, on a `truncate` record, the relation whose DROP TABLE it lands (Truncate.relation)
    ]
)


def images(rows: list[tuple[Any, ...] | None], row_type: pa.StructType) -> pa.Array:
    if rows.count(None) == len(rows):  # before images of inserts, after images of deletes
        return pa.nulls(len(rows), row_type)
    width = row_type.num_fields
    empty = (None,) * width
    full = [row if row is not None else empty for row in rows]
    # one pass per column: much faster than zip(*rows), which builds every column tuple at once
    arrays = [pa.array(list(map(itemgetter(i), full)), type=row_type.field(i).type) for i in range(width)]
    mask = pa.array([row is None for row in rows], type=pa.bool_())
    return pa.StructArray.from_arrays(arrays, fields=list(row_type), mask=mask)


_OP_TEXT = {op: op.value for op in Op}  # a dict lookup: cheaper than the enum's `value` property
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _timestamps(values: Sequence[datetime | None]) -> pa.Array:
    """Convert once per run of the same object: the reader shares one datetime per transaction."""
    micros: list[int | None] = []
    last: datetime | None = None
    value: int | None = None
    for ts in values:
        if ts is not last:
            last, value = ts, None if ts is None else (ts - _EPOCH) // _MICROSECOND
        micros.append(value)
    return pa.array(micros, UTC_MICROS)


MISSING_FIELD = pa.field("_missing", pa.list_(pa.string()))


def events_table(table: TableSchema, rows: list[tuple[Any, ...]]) -> pa.Table:
    """Arrow table of buffered event tuples (lsn, op, txid, ts, watermark, before, after, missing).

    `_missing` (PostgreSQL: columns an update left out, see `Change.missing`) is written only
    in files where some event has missing columns; readers treat an absent column as empty."""
    lsn, op, txid, ts, wm, before, after, missing = zip(*rows, strict=True)
    arrays = [
        pa.array(lsn, LSN_ARROW_TYPE),
        pa.array(op, pa.string()),
        pa.array(txid, pa.string()),
        _timestamps(ts),
        pa.array(wm, pa.bool_()),
        images(list(before), table.row_type),
        images(list(after), table.row_type),
    ]
    fields = [*ENVELOPE, pa.field("before", table.row_type), pa.field("after", table.row_type)]
    if any(missing):
        arrays.append(pa.array([list(m) if m else None for m in missing], MISSING_FIELD.type))
        fields.append(MISSING_FIELD)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=_file_metadata(table)))


def _file_metadata(table: TableSchema) -> dict[str, str]:
    return {
        "logtide.table": table.qualified_name,
        "logtide.key": ",".join(table.key),
        "logtide.fingerprint": table.fingerprint,
    }


def _envelope(piece: pa.Table, watermark: bool) -> pa.Table:
    """A ColumnBatch's columns completed with the watermark flag, in the file layout."""
    arrays = [
        piece["_lsn"],
        piece["_op"],
        piece["_txid"],
        piece["_commit_ts"],
        pa.repeat(pa.scalar(watermark, pa.bool_()), len(piece)),
        piece["before"],
        piece["after"],
    ]
    names = [f.name for f in ENVELOPE] + ["before", "after"]
    if "_missing" in piece.column_names:
        arrays.append(piece["_missing"])
        names.append(MISSING_FIELD.name)
    return pa.Table.from_arrays(arrays, names=names)


def table_schema_record(lsn: Lsn, txid: str, ts: Any, table: TableSchema) -> tuple[Any, ...]:
    columns = [
        {"name": c.name, "type": str(c.arrow_type), "source_type": c.source_type, "definition": c.definition}
        for c in table.columns
    ]
    return (
        lsn.encode(),
        txid,
        ts,
        "table",
        table.schema,
        table.table,
        None,
        columns,
        list(table.key),
        table.fingerprint,
        table.relation,
    )


@dataclass(slots=True)
class _Piece:
    """What one add() buffered: event tuples (MySQL/MariaDB changes, schema-history records) or
    the Arrow columns of a ColumnBatch, already in the file layout."""

    count: int
    first: int  # encoded LSN of its first event
    last: int  # ... and of its last
    rows: list[tuple[Any, ...]] | None = None
    columns: pa.Table | None = None


@dataclass
class _Buffer:
    folder: str
    table: TableSchema | None  # None: the schema history
    pieces: list[_Piece] = field(default_factory=list)
    committed: int = 0  # pieces[:committed] belong to finished transactions

    def to_arrow(self, pieces: list[_Piece]) -> pa.Table:
        if self.table is None:
            rows = list(chain.from_iterable(p.rows or () for p in pieces))
            return pa.Table.from_pylist(
                [dict(zip(SCHEMA_HISTORY_SCHEMA.names, r, strict=True)) for r in rows], SCHEMA_HISTORY_SCHEMA
            )
        return _file_table(self.table, pieces)


def _file_table(table: TableSchema, pieces: list[_Piece]) -> pa.Table:
    """One file's events: runs of tuple pieces converted at once, column pieces as they are."""
    parts: list[pa.Table] = []
    rows: list[tuple[Any, ...]] = []
    for piece in pieces:
        if piece.rows is not None:
            rows.extend(piece.rows)
            continue
        if rows:
            parts.append(events_table(table, rows))
            rows = []
        parts.append(piece.columns)
    if rows:
        parts.append(events_table(table, rows))
    if len(parts) == 1 and parts[0].schema.metadata:  # built by events_table: complete
        return parts[0]
    missing = any(MISSING_FIELD.name in part.column_names for part in parts)
    fields = [*ENVELOPE, pa.field("before", table.row_type), pa.field("after", table.row_type)]
    if missing:
        fields.append(MISSING_FIELD)
    columns = []
    for f in fields:
        chunks = []
        for part in parts:
            if f.name in part.column_names:
                chunks.extend(part[f.name].chunks)
            else:  # _missing: absent where no event of the part misses a column
                chunks.append(pa.nulls(len(part), f.type))
        columns.append(pa.chunked_array(chunks, f.type))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=_file_metadata(table)))


class LogWriter:
    """Receives the log in order; writes files and the checkpoint when a flush is due."""

    def __init__(
        self,
        zone: LandingZone,
        checkpoint: Checkpoint,
        flush_interval_s: float,
        max_buffer_rows: int,
        on_commit: Callable[[Checkpoint, int], None] = lambda checkpoint, rows: None,
        epoch: int | None = None,
        guard: Callable[[], None] | None = None,
    ) -> None:
        self.zone = zone
        self.epoch = epoch  # written into every checkpoint (the fencing token)
        # raises (LeaseLostError, FencedError) when this writer may no longer commit; called before
        # files are written and again before the checkpoint
        self._guard = guard or (lambda: None)
        if not checkpoint.last_commit_known:  # written before checkpoints kept it: read the files once
            checkpoint = replace(checkpoint, last_commit_at=zone.scan_newest_commit(checkpoint.frontier))
            checkpoint = replace(checkpoint, last_commit_known=True)
        self.checkpoint = checkpoint
        self._open_commit: datetime | None = None  # newest commit time of the transaction being read
        self._finished_commit: datetime | None = None  # ... of finished, not yet committed transactions
        self._fingerprints = zone.table_fingerprints()  # folder -> last recorded schema fingerprint
        self._flush_interval = flush_interval_s
        self._max_rows = max_buffer_rows
        self._on_commit = on_commit
        self._buffers: dict[tuple[str, str], _Buffer] = {}
        self._folders: dict[tuple[str, str], str] = {}  # (schema, table) -> its folder name
        self._touched: set[tuple[str, str]] = set()
        self._rows = 0
        self._pending: TransactionEnd | None = None  # last finished, not yet committed transaction
        self._kept: dict[str, Any] = {}  # resume keys carried only when they change (TransactionEnd.keep)
        self._pending_since = 0.0
        self._flush_now = False  # a pending end asked for a commit now (TransactionEnd.flush)
        self._open_events = 0  # change events of the transaction being read
        self._finished_events = 0  # change events of finished, not yet committed transactions

    def _buffer(self, folder: str, fingerprint: str, table: TableSchema | None) -> _Buffer:
        key = (folder, fingerprint)
        buffer = self._buffers.get(key)
        if buffer is None:
            buffer = self._buffers[key] = _Buffer(folder, table)
        self._touched.add(key)
        return buffer

    def _append(self, buffer: _Buffer, row: tuple[Any, ...]) -> None:
        buffer.pieces.append(_Piece(1, row[0], row[0], rows=[row]))
        self._rows += 1

    def add(self, batch: ChangeBatch) -> None:
        if isinstance(batch, ColumnBatch):
            count = batch.events.num_rows
            if not count:
                return
            lsns = batch.events["_lsn"]
            first, last = int(lsns[0].as_py()), int(lsns[-1].as_py())
            self._saw_commit(pc.max(batch.events["_commit_ts"]).as_py())
            piece = _Piece(count, first, last, columns=_envelope(batch.events, batch.watermark))
        else:
            if not batch.changes:
                return
            txid, ts, watermark = batch.txid, batch.commit_ts, batch.watermark
            rows = [
                (c.lsn.encode(), _OP_TEXT[c.op], txid, ts, watermark, c.before, c.after, c.missing)
                for c in batch.changes
            ]
            piece = _Piece(len(rows), rows[0][0], rows[-1][0], rows=rows)
            self._saw_commit(ts)
        table = batch.table
        folder = self._folders.get((table.schema, table.table))
        if folder is None:
            folder = self._folders[(table.schema, table.table)] = table_folder(table.schema, table.table)
        version = schema_version(table.fingerprint, table.relation, table.definitions)
        if self._fingerprints.get(folder) != version:
            self._fingerprints[folder] = version
            history = self._buffer(SCHEMA_HISTORY, "", None)
            self._append(history, table_schema_record(Lsn.decode(piece.first), batch.txid, batch.commit_ts, table))
        buffer = self._buffer(folder, table.fingerprint, table)
        buffer.pieces.append(piece)
        self._rows += piece.count
        self._open_events += piece.count

    def _saw_commit(self, ts: datetime | None) -> None:
        if ts is not None:
            ts = ts.replace(tzinfo=ts.tzinfo or UTC)
            self._open_commit = ts if self._open_commit is None else max(self._open_commit, ts)

    def add_schema_change(self, change: SchemaChange) -> None:
        history = self._buffer(SCHEMA_HISTORY, "", None)
        self._append(
            history,
            (
                change.lsn.encode(),
                change.txid,
                change.commit_ts,
                "ddl",
                change.schema,
                None,
                change.statement,
                None,
                None,
                None,
                None,
            ),
        )

    def add_truncate(self, truncate: Truncate) -> None:
        """A TRUNCATE: a `truncate` record of the schema history (schema, table, its LSN), committed
        with its transaction's checkpoint like every event (never lost, never twice)."""
        history = self._buffer(SCHEMA_HISTORY, "", None)
        self._append(
            history,
            (
                truncate.lsn.encode(),
                truncate.txid,
                truncate.commit_ts,
                "truncate",
                truncate.schema,
                truncate.table,
                None,
                None,
                None,
                None,
                truncate.relation,
            ),
        )

    def end_transaction(self, end: TransactionEnd) -> None:
        for key in self._touched:
            buffer = self._buffers[key]
            buffer.committed = len(buffer.pieces)
        self._touched.clear()
        self._finished_events += self._open_events
        self._open_events = 0
        if self._open_commit is not None:
            done = self._finished_commit
            self._finished_commit = self._open_commit if done is None else max(done, self._open_commit)
            self._open_commit = None
        if self._pending is None:
            self._pending_since = time.monotonic() if end.read_at is None else end.read_at
        self._pending = end
        self._flush_now = self._flush_now or end.flush
        for key in end.keep:  # carried only when changed: kept in every checkpoint from here (`commit`)
            self._kept[key] = end.resume[key]

    def advance(self, position: Lsn, resume: dict[str, Any]) -> None:
        """The source's log ends at `position` and every transaction before it has been read
        (`Heartbeat.frontier`): commit a frontier there, as an empty transaction would, at the next
        flush. Its minor counts such moves at one position: one past the committed frontier's when
        that stands at `position` already. A read-only HIGH read at that log end takes one past the
        committed frontier's minor (capture/dump/engine.py `_place_high`), so the second move after
        it passes it; one that moves overtook before its HIGH file was written is read again. No event is
        ever landed at `position` (MariaDB starts every event group with a GTID event, which is not
        landed), so every minor there means the same events."""
        committed = self.checkpoint.frontier
        if position.major < committed.major:
            return
        minor = committed.minor + 1 if position.major == committed.major else 1
        if minor >= 1 << MINOR_BITS:
            return
        target = Lsn(position.major, minor)
        if self._pending is not None and self._pending.frontier >= target:
            return
        commit_ts = self._pending.commit_ts if self._pending is not None else datetime.now(UTC)
        self.end_transaction(TransactionEnd(target, resume, commit_ts))

    def due(self) -> bool:
        if self._rows >= self._max_rows:
            return True
        return self._pending is not None and (
            self._flush_now or time.monotonic() - self._pending_since >= self._flush_interval
        )

    def flush(self) -> None:
        """Commit finished transactions; spill the open one if the buffer is still too large."""
        self.commit()
        if self._rows >= self._max_rows:
            self._spill()

    def commit(self) -> None:
        if self._pending is None:
            return
        self._guard()
        self._write(lambda b: b.committed)
        last = self.checkpoint.last_commit_at
        if self._finished_commit is not None:
            last = self._finished_commit if last is None else max(last, self._finished_commit)
        resume = self._pending.resume
        if self._kept:
            resume = {**self._kept, **resume}
        checkpoint = Checkpoint(self._pending.frontier, resume, epoch=self.epoch, last_commit_at=last)
        self._guard()
        self.zone.write_checkpoint(checkpoint)
        self.checkpoint = checkpoint
        self._pending = None
        self._finished_commit = None
        self._flush_now = False
        events, self._finished_events = self._finished_events, 0
        self._on_commit(checkpoint, events)

    def _spill(self) -> None:
        self._guard()
        self._write(lambda b: len(b.pieces))

    def _write(self, count: Callable[[_Buffer], int]) -> None:
        folders = set()
        for key, buffer in list(self._buffers.items()):
            n = count(buffer)
            if n:
                pieces = buffer.pieces[:n]
                folder = self.zone.folder(buffer.folder)
                folder.mkdir(parents=True, exist_ok=True)
                path = folder / segment_name(pieces[0].first, pieces[-1].last)
                write_parquet_atomic(buffer.to_arrow(pieces), path, self.zone.staging)
                folders.add(folder)
                del buffer.pieces[:n]
                self._rows -= sum(p.count for p in pieces)
            buffer.committed = 0
            if not buffer.pieces:
                del self._buffers[key]
                self._touched.discard(key)
        for folder in folders:
            fsync_dir(folder)

    def abandon_open_transaction(self) -> None:
        """Drop events of the unfinished transaction (after commit()); they will be read again."""
        self._buffers.clear()
        self._touched.clear()
        self._rows = 0
        self._open_events = 0
        self._open_commit = None
        self.zone.discard_uncommitted(self.checkpoint.frontier)
        self._fingerprints = self.zone.table_fingerprints()
