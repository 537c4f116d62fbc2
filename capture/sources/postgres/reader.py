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
            the catalog, else the configuration's `keys`, so log and dump agree on key columns
            and their order).

Missing values: an update that leaves an out-of-line (TOASTed) value untouched does not carry
it ('u' in pgoutput). With REPLICA IDENTITY FULL the old row does carry it, and the new image
is completed from there. Otherwise the column is named in the change's `missing` (the
`_missing` column of the landing zone) and its image holds NULL there, meaning "unknown,
keep the stored value", never "NULL". A key-only old image (REPLICA IDENTITY DEFAULT, on a
key change or delete) names every non-key column as missing.

Decoding is column-wise: the messages of a run of changes of one table (up to BATCH_ROWS)
are kept as they came, then split by `pgoutput.split_tuples` into one Arrow text array per
column, typed by the same builders as chunk rows (`types`), and handed to the landing
writer as Arrow columns (`ColumnBatch`): no Python object per value on the way.

Between transactions, every PUBLICATION_SYNC_S, the reader brings the publication in step with
the captured tables (`publication.Publication.sync`): a table created since is published from
then on.

The slot's confirmed position is moved by `feedback`, which the service calls only after the
landing zone's checkpoint covering it is written (forced, STACK.md: psycopg2 is lazy).
"""

from __future__ import annotations

import contextlib
import select
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate
from struct import Struct
from threading import Event
from typing import Any

import psycopg2
import psycopg2.errors
import pyarrow as pa
import pyarrow.compute as pc

from capture.config import SourceConfig
from capture.errors import PreflightError, SourceConnectionError
from capture.events import Column, Heartbeat, LogItem, Lsn, TableSchema, TransactionEnd
from capture.landing.log_writer import ColumnBatch, column_batch
from capture.log import get_logger
from capture.sources.base import WATERMARK_SCHEMA, WATERMARK_TABLE
from capture.sources.postgres import pgoutput
from capture.sources.postgres.catalog import TypeCatalog, dump_key
from capture.sources.postgres.connection import connect, format_lsn, translate
from capture.sources.postgres.publication import PUBLICATION_SYNC_S, Publication
from capture.sources.postgres.types import ColumnBuilder, builder, column_type, is_text
from capture.sources.table_keys import log_key

log = get_logger(__name__)
_U32 = Struct(">I")

BATCH_ROWS = 10_000  # changes of one table split, typed (column by column) and handed over at once
BATCH_BYTES = 32 << 20  # ... or fewer, when their messages hold more (wide rows: bounded memory)
PROTO_VERSION = "1"
INSERT, UPDATE, DELETE = 73, 85, 68  # I U D
OLD_KEY, OLD_ROW, NEW = 75, 79, 78  # K O N


@dataclass
class _Table:
    schema: TableSchema
    builders: list[ColumnBuilder | None]  # None: a string column, the text is the value
    key_indexes: tuple[int, ...]
    identity_names: tuple[str, ...]  # columns an old key-only image carries
    key_only_missing: tuple[str, ...]  # what an old key-only image does not carry
    captured: bool
    watermark: bool


class PgOutputReader:
    """One pass over the slot from a resume LSN, until stopped or disconnected."""

    def __init__(
        self,
        name: str,
        config: SourceConfig,
        slot: str,
        publication: Publication,
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
                    options={"proto_version": PROTO_VERSION, "publication_names": self.publication.name},
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
        next_sync = time.monotonic() + PUBLICATION_SYNC_S
        begin: pgoutput.Begin | None = None
        txid = ""
        index = 0
        table: _Table | None = None
        pending: list[bytes] = []  # the messages of a run of changes of one table
        run_oid = b""  # ... and its relation oid as the messages carry it (b"": no run open)
        room = BATCH_BYTES  # ... and how many more message bytes it may hold
        while True:
            if begin is None and time.monotonic() >= next_sync:  # tables created since: publish them
                self._sync_publication()
                next_sync = time.monotonic() + PUBLICATION_SYNC_S
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
                if run_oid and room > 0 and len(pending) < BATCH_ROWS and buf.startswith(run_oid, 1):
                    pending.append(buf)  # the run goes on
                    room -= len(buf)
                    continue
                target = self._tables[_U32.unpack_from(buf, 1)[0]]
                if not target.captured:
                    continue
                if target is not table or len(pending) >= BATCH_ROWS or room <= 0:
                    if pending:
                        index = yield from self._flush(table, pending, begin, txid, index)
                        pending = []
                    table, run_oid, room = target, buf[1:5], BATCH_BYTES
                pending.append(buf)
                room -= len(buf)
            elif kind == 66:  # B
                begin = pgoutput.parse_begin(buf)
                txid, index, table, pending, run_oid = str(begin.xid), 0, None, [], b""
            elif kind == 67:  # C
                commit = pgoutput.parse_commit(buf)
                if pending:
                    index = yield from self._flush(table, pending, begin, txid, index)
                    pending = []
                table, run_oid = None, b""
                yield TransactionEnd(Lsn(commit.end_lsn), {"lsn": format_lsn(commit.end_lsn)}, begin.commit_ts)
                begin = None
                if self.stop.is_set():
                    return
            elif kind == 82:  # R
                relation = pgoutput.parse_relation(buf)
                if pending:
                    index = yield from self._flush(table, pending, begin, txid, index)
                    pending = []
                table, run_oid = None, b""  # the relation's next changes use its new description
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

    def _sync_publication(self) -> None:
        try:
            self.publication.sync(self._catalog, create=False)
        except (psycopg2.OperationalError, psycopg2.InterfaceError):
            raise  # the connection: the service reconnects
        except psycopg2.Error as exc:
            log.warning(
                "publication.sync_failed",
                source=self.name,
                publication=self.publication.name,
                error=str(exc).strip(),
                action=f"retried in {PUBLICATION_SYNC_S} s; tables created meanwhile are published later (dump them)",
            )

    def _describe(self, relation: pgoutput.Relation) -> _Table:
        schema_name, table_name = relation.schema, relation.table
        watermark = (schema_name, table_name) == (WATERMARK_SCHEMA, WATERMARK_TABLE)
        captured = watermark or (schema_name != WATERMARK_SCHEMA and self.config.captures(schema_name, table_name))
        infos = [self._types.info(c.type_oid, c.typmod) for c in relation.columns]
        source_types = self._types.format_types([(c.type_oid, c.typmod) for c in relation.columns])
        columns, builders = [], []
        for col, info, source_type in zip(relation.columns, infos, source_types, strict=True):
            arrow_type, _ = column_type(info)
            columns.append(Column(col.name, arrow_type, source_type))
            builders.append(None if is_text(arrow_type) else builder(info))
        names = tuple(c.name for c in relation.columns)
        identity = tuple(c.name for c in relation.columns if c.key)
        key: tuple[str, ...] = ()
        if captured:
            own = dump_key(self._catalog, relation.oid)
            key = log_key(own, self.config.named_key(schema_name, table_name), names)
            if not key and relation.replica_identity in ("d", "i"):
                key = identity
        described = TableSchema(schema_name, table_name, tuple(columns), key)
        key_only_missing = tuple(n for n in names if n not in identity)
        return _Table(described, builders, described.key_indexes, identity, key_only_missing, captured, watermark)

    def _flush(
        self, table: _Table | None, pending: list[bytes], begin: pgoutput.Begin | None, txid: str, index: int
    ) -> Iterator[ColumnBatch]:
        """Split, type and hand over a run of changes of one table as Arrow columns (one batch).
        Returns the next change index inside the transaction."""
        assert table is not None and begin is not None
        changes = _changes(table, pending)
        yield column_batch(table.schema, txid, begin.commit_ts, table.watermark, begin.commit_lsn, index, *changes)
        return index + len(changes[0])


def _changes(table: _Table, messages: list[bytes]) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array | None]:
    """(ops, before, after, missing) of the changes in `messages` (I/U/D of one relation).

    Every message's first tuple starts at byte 6 (kind, relation oid, 'N'/'K'/'O'); an update
    with an old image has its new tuple after it. Both are split column-wise (`split_tuples`);
    the rules of the module docstring then pick, per change, which tuple is which image."""
    count = len(messages)
    width = len(table.builders)
    octets = pgoutput.message_octets(b"".join(messages))
    starts = pa.array(list(accumulate(map(len, messages), initial=0))[:-1], pa.int64())
    kinds = pc.take(octets, starts)
    markers = pc.take(octets, pc.add(starts, 5))
    first = pgoutput.split_tuples(octets, pc.add(starts, 6), width)
    if pc.all(pc.equal(kinds, INSERT)).as_py():  # the bulk case: no old images, no missing columns
        if not pc.all(pc.equal(markers, NEW)).as_py():
            raise ValueError("pgoutput I message without a new tuple")
        after = _images(table, first.texts)
        return pa.repeat(pa.scalar("c"), count), pa.nulls(count, table.schema.row_type), after, None
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
    events: list[tuple[str, int | None, int | None, tuple[str, ...]]] = []  # op, before, after, missing
    new = count  # the images of the second tuples follow those of the first
    for i, (kind, marker) in enumerate(zip(kinds_l, markers_l, strict=True)):
        old_missing = table.key_only_missing if marker == OLD_KEY else missing_by_image.get(i, ())
        if kind == INSERT:
            events.append(("c", None, i, ()))
        elif kind == DELETE:
            events.append(("d", i, None, old_missing))
        elif marker == NEW:
            events.append(("u", None, i, missing_by_image.get(i, ())))
        else:
            if key_changed[new - count]:  # a key change: delete the old key, create the new
                events.append(("d", i, None, old_missing))
                events.append(("c", None, new, missing_by_image.get(new, ())))
            else:
                events.append(("u", i if marker == OLD_ROW else None, new, missing_by_image.get(new, ())))
            new += 1
    ops, before, after, missing = zip(*events, strict=True)
    images = _images(table, texts)
    missing_array = pa.array([list(m) if m else None for m in missing], _MISSING) if any(missing) else None
    return (
        pa.array(ops, pa.string()),
        images.take(pa.array(before, pa.int64())),
        images.take(pa.array(after, pa.int64())),
        missing_array,
    )


_MISSING = pa.list_(pa.string())


def _images(table: _Table, texts: list[pa.Array]) -> pa.StructArray:
    """Typed row images from the column texts (Arrow casts, column by column)."""
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
