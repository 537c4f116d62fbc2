"""Turns the pgoutput stream of a logical replication slot into Logtide's log items.

PostgreSQL decodes transactions in commit order and sends each one whole at its commit:
Begin (its commit LSN, commit time, xid), Relation messages when a table is first seen or
changed, the row changes, Commit (its end LSN). Hence:

  LSN       (commit LSN of the transaction, index of the change inside it): changes of a
            transaction share the major, transactions are ordered by it, and a replay gives
            the same LSNs. STACK.md: a change's own WAL position is NOT its order.
  frontier  (end LSN of the commit, 0): the resume point; START_REPLICATION there skips every
            transaction committed before it, so nothing landed is read again.
  schema    from the Relation message (column types through the catalog, the dump key from
            the catalog so log and dump agree on key columns and their order).

Missing values: an update that leaves an out-of-line (TOASTed) value untouched does not carry
it ('u' in pgoutput). With REPLICA IDENTITY FULL the old row does carry it, and the new image
is completed from there. Otherwise the column is named in the change's `missing` (the
`_missing` column of the landing zone) and its image holds NULL there, meaning "unknown,
keep the stored value", never "NULL". A key-only old image (REPLICA IDENTITY DEFAULT, on a
key change or delete) names every non-key column as missing.

The slot's confirmed position is moved by `feedback`, which the service calls only after the
landing zone's checkpoint covering it is written (forced, STACK.md: psycopg2 is lazy).
"""

from __future__ import annotations

import contextlib
import select
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import itemgetter
from threading import Event
from typing import Any, NamedTuple

import psycopg2
import psycopg2.errors
import pyarrow as pa

from capture.config import SourceConfig
from capture.errors import PreflightError, SourceConnectionError
from capture.events import Change, ChangeBatch, Column, Heartbeat, LogItem, Lsn, Op, TableSchema, TransactionEnd
from capture.log import get_logger
from capture.sources.base import WATERMARK_SCHEMA, WATERMARK_TABLE
from capture.sources.postgres import pgoutput
from capture.sources.postgres.catalog import TypeCatalog, dump_key
from capture.sources.postgres.connection import connect, format_lsn, translate
from capture.sources.postgres.types import ColumnBuilder, builder, column_type, is_text

log = get_logger(__name__)

BATCH_ROWS = 2000  # changes of one table converted (column by column) and handed over at once
PROTO_VERSION = "1"
UNCHANGED = pgoutput.UNCHANGED


ValuesConverter = Callable[[list[Any]], list[Any]]


@dataclass
class _Table:
    schema: TableSchema
    converters: list[ValuesConverter | None]  # None: a string column, the text is the value
    key_indexes: tuple[int, ...]
    identity_names: tuple[str, ...]  # columns an old key-only image carries
    captured: bool
    watermark: bool


class _Pending(NamedTuple):
    op: Op
    before: list[Any] | None
    after: list[Any] | None
    missing: tuple[str, ...]


def _converter(build: ColumnBuilder, arrow_type: pa.DataType) -> ValuesConverter:
    """Texts -> the values the landing zone's writer builds its Arrow column from. Temporal
    columns stay integers (their Arrow storage: days or microseconds), which `pa.array` takes
    for those types as it takes datetimes, without making a Python datetime per value."""
    if pa.types.is_temporal(arrow_type):
        storage = pa.int32() if pa.types.is_date32(arrow_type) else pa.int64()
        return lambda values: build(values).cast(storage).to_pylist()
    return lambda values: build(values).to_pylist()


class PgOutputReader:
    """One pass over the slot from a resume LSN, until stopped or disconnected."""

    def __init__(
        self,
        name: str,
        config: SourceConfig,
        slot: str,
        publication: str,
        start_lsn: int,
        stop: Event,
        acknowledged: int,
    ) -> None:
        self.name = name
        self.config = config
        self.slot = slot
        self.publication = publication
        self.start_lsn = start_lsn
        self.stop = stop
        self.sent = acknowledged  # last position sent to the server as flushed (feedback)
        self.idle_wal_end = 0  # everything before it is read (set while no transaction is open)
        self._cursor: Any = None
        self._tables: dict[int, _Table] = {}

    # -- feedback (called by the service, same thread, between items) -------------------------

    def feedback(self, lsn: int) -> None:
        if self._cursor is not None and lsn > self.sent:
            try:
                self._cursor.send_feedback(write_lsn=lsn, flush_lsn=lsn, force=True)
                self.sent = lsn
            except psycopg2.Error:
                pass  # the stream is gone: the next start begins at the checkpoint anyway

    # -- reading ---------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[LogItem]:
        conn = connect(self.config, replication=True)
        catalog = connect(self.config)
        try:
            self._catalog = catalog
            self._types = TypeCatalog(catalog)
            cursor = conn.cursor()
            try:
                cursor.start_replication(
                    slot_name=self.slot,
                    decode=False,
                    start_lsn=self.start_lsn,
                    options={"proto_version": PROTO_VERSION, "publication_names": self.publication},
                )
            except psycopg2.errors.UndefinedObject as exc:
                raise PreflightError(f"source {self.name!r}: {str(exc).strip()}") from None
            except psycopg2.errors.ObjectInUse as exc:  # a walsender of a killed instance still exits
                raise SourceConnectionError(f"source {self.name!r}: {str(exc).strip()}") from None
            self._cursor = cursor
            cursor.send_feedback(write_lsn=self.sent, flush_lsn=self.sent, force=True)
            yield from self._items(cursor)
        except psycopg2.Error as exc:
            raise translate(exc, self.config) from None
        finally:
            self._cursor = None
            for connection in (conn, catalog):
                with contextlib.suppress(psycopg2.Error):
                    connection.close()

    def _items(self, cursor: Any) -> Iterator[LogItem]:
        heartbeat = self.config.heartbeat_s
        next_heartbeat = time.monotonic() + heartbeat
        begin: pgoutput.Begin | None = None
        txid = ""
        index = 0
        table: _Table | None = None
        pending: list[_Pending] = []
        while True:
            message = cursor.read_message()
            if message is None:
                if begin is None:
                    if self.stop.is_set():
                        return
                    self.idle_wal_end = max(self.idle_wal_end, cursor.wal_end)
                    now = time.monotonic()
                    if now >= next_heartbeat:
                        next_heartbeat = now + heartbeat
                        cursor.send_feedback(reply=True)  # ask for a keepalive: it carries the WAL end
                        yield Heartbeat()
                        continue
                select.select([cursor], [], [], max(0.0, min(heartbeat, next_heartbeat - time.monotonic())))
                continue
            buf = message.payload
            kind = buf[0]
            if kind in (73, 85, 68):  # I U D
                change = pgoutput.parse_change(buf)
                target = self._tables[change.relation]
                if not target.captured:
                    continue
                if target is not table or len(pending) >= BATCH_ROWS:
                    if pending:
                        index = yield from self._flush(table, pending, begin, txid, index)
                        pending = []
                    table = target
                self._pend(target, change, pending)
            elif kind == 66:  # B
                begin = pgoutput.parse_begin(buf)
                txid, index, table, pending = str(begin.xid), 0, None, []
            elif kind == 67:  # C
                commit = pgoutput.parse_commit(buf)
                if pending:
                    index = yield from self._flush(table, pending, begin, txid, index)
                    pending = []
                table = None
                yield TransactionEnd(Lsn(commit.end_lsn), {"lsn": format_lsn(commit.end_lsn)}, begin.commit_ts)
                begin = None
                if self.stop.is_set():
                    return
            elif kind == 82:  # R
                relation = pgoutput.parse_relation(buf)
                if pending:
                    index = yield from self._flush(table, pending, begin, txid, index)
                    pending = []
                    table = None
                self._tables[relation.oid] = self._describe(relation)
            elif kind == 84:  # T
                truncate = pgoutput.parse_truncate(buf)
                names = [self._tables[oid].schema.qualified_name for oid in truncate.relations if oid in self._tables]
                log.warning(
                    "capture.truncate_skipped",
                    source=self.name,
                    tables=",".join(names),
                    xid=txid,
                    action="TRUNCATE is not a row change and is not landed; dump these tables to repair targets",
                )
            # Y (type), O (origin), M (message): nothing to land

    def _describe(self, relation: pgoutput.Relation) -> _Table:
        schema_name, table_name = relation.schema, relation.table
        watermark = (schema_name, table_name) == (WATERMARK_SCHEMA, WATERMARK_TABLE)
        captured = watermark or (schema_name != WATERMARK_SCHEMA and self.config.captures(schema_name, table_name))
        infos = [self._types.info(c.type_oid, c.typmod) for c in relation.columns]
        source_types = self._types.format_types([(c.type_oid, c.typmod) for c in relation.columns])
        columns, converters = [], []
        for col, info, source_type in zip(relation.columns, infos, source_types, strict=True):
            arrow_type, _ = column_type(info)
            columns.append(Column(col.name, arrow_type, source_type))
            converters.append(None if is_text(arrow_type) else _converter(builder(info), arrow_type))
        names = [c.name for c in relation.columns]
        identity = tuple(c.name for c in relation.columns if c.key)
        key = dump_key(self._catalog, relation.oid) if captured else ()
        if not key or any(k not in names for k in key):
            key = identity if relation.replica_identity in ("d", "i") else ()
        described = TableSchema(schema_name, table_name, tuple(columns), key)
        return _Table(described, converters, described.key_indexes, identity, captured, watermark)

    def _pend(self, table: _Table, change: pgoutput.RowChange, pending: list[_Pending]) -> None:
        names = table.schema.names
        old, new = change.old, change.new
        before_missing: tuple[str, ...] = ()
        if old is not None and change.old_kind == "K":
            before_missing = tuple(n for n in names if n not in table.identity_names)
        if change.kind == "I":
            pending.append(_Pending(Op.CREATE, None, new, ()))
            return
        if change.kind == "D":
            pending.append(_Pending(Op.DELETE, old, None, before_missing))
            return
        assert new is not None
        if UNCHANGED in new and old is not None and change.old_kind == "O":
            new = [o if v is UNCHANGED else v for v, o in zip(new, old, strict=True)]
        after_missing = tuple(n for n, v in zip(names, new, strict=True) if v is UNCHANGED)
        if old is not None and any(old[i] != new[i] and new[i] is not UNCHANGED for i in table.key_indexes):
            pending.append(_Pending(Op.DELETE, old, None, before_missing))
            pending.append(_Pending(Op.CREATE, None, new, after_missing))
            return
        before = old if change.old_kind == "O" else None
        pending.append(_Pending(Op.UPDATE, before, new, after_missing))

    def _flush(
        self, table: _Table | None, pending: list[_Pending], begin: pgoutput.Begin | None, txid: str, index: int
    ) -> Iterator[ChangeBatch]:
        """Convert the texts of a run of changes column by column; yield them as one batch.
        Returns the next change index inside the transaction."""
        assert table is not None and begin is not None
        images: list[list[Any]] = []
        dirty = False  # some image holds UNCHANGED markers
        for p in pending:
            if p.before is not None:
                images.append(p.before)
            if p.after is not None:
                images.append(p.after)
            if p.missing:
                dirty = True
        columns = []
        for i, convert in enumerate(table.converters):
            values = list(map(itemgetter(i), images))
            if dirty:
                values = [None if v is UNCHANGED else v for v in values]
            columns.append(values if convert is None else convert(values))
        rows = iter(list(zip(*columns, strict=True)))
        major = begin.commit_lsn
        changes = []
        for p in pending:
            before = next(rows) if p.before is not None else None
            after = next(rows) if p.after is not None else None
            changes.append(Change(Lsn(major, index), p.op, before, after, p.missing))
            index += 1
        yield ChangeBatch(table.schema, txid, begin.commit_ts, table.watermark, changes)
        return index
