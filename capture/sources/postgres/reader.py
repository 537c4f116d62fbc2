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

Transactions are held, their change messages kept as they came, and handed over in groups
(`batches.Group`): one column-wise decoded `ColumnBatch` per table and one `TransactionEnd`
for the group's last transaction. A group is handed over when its first transaction was
read `hold_s` ago (the landing writer's flush interval: it would wait that long anyway, and
counts from `TransactionEnd.read_at`, so a change lands no later than before), when it holds
BATCH_ROWS changes or transactions or BATCH_BYTES of messages, before a Relation message
redescribes a table it holds changes of, and on stop. (Not before a heartbeat: handed over
early, the group would wait in the writer for the next one.) One exception: when everything
sent is read and the group holds half of BATCH_ROWS changes or transactions (the end of a
backlog, or a source faster than 10,000 changes/s), it is handed over at once with an end
that asks the writer to commit now (`TransactionEnd.flush`): a commit of that size is
amortized, and the catch-up does not end with a wait of up to `hold_s`. At lower rates groups
never get that large within `hold_s`, so commits (and files) stay as few as before.

Between transactions, every watcher.CHECK_S, the catalog watcher (`watcher.CatalogWatcher`) brings
the publication in step with the captured tables (a table created since is published from then
on) and finds what the catalog changed without row events: tables dropped or renamed away (their
truncates land in the first transaction committed after the position it read), enum values renamed.

Keepalives (`watermarks: readonly` only): while no transaction is open and nothing is held, the
WAL end a keepalive carries (the walsender's sentPtr: the end of the last WAL record it decoded,
and every transaction committed before it has been sent ahead of the keepalive on this stream)
is handed over as a `TransactionEnd` without changes: the landed frontier moves to it, so a
read-only chunk's window closes on an idle server too (README, Read-only watermarks). A
transaction whose commit record starts at or after that position still lands after it.

The slot's confirmed position is moved by `feedback`, which the service calls only after the
landing zone's checkpoint covering it is written (forced, STACK.md: psycopg2 is lazy).
"""

from __future__ import annotations

import contextlib
import select
import time
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from struct import Struct
from threading import Event
from typing import Any

import psycopg2
import psycopg2.errors

from capture.config import SourceConfig
from capture.errors import PreflightError, SourceConnectionError, UnlandableKeyError, UnlandableValueError
from capture.events import Column, Heartbeat, LogItem, Lsn, TableSchema, TransactionEnd, Truncate
from capture.log import get_logger
from capture.sources.base import WATERMARK_SCHEMA, WATERMARK_TABLE
from capture.sources.postgres import pgoutput, schema_change
from capture.sources.postgres.batches import Group, TableInfo
from capture.sources.postgres.catalog import TypeCatalog, dump_key, partition_root
from capture.sources.postgres.connection import connect, format_lsn, query, translate
from capture.sources.postgres.publication import Publication, TableIdentity
from capture.sources.postgres.types import ClampedKeys, builder, column_type, is_text
from capture.sources.postgres.watcher import CHECK_S, CatalogWatcher
from capture.sources.table_keys import log_key

log = get_logger(__name__)
_U32 = Struct(">I")

BATCH_ROWS = 10_000  # changes (or transactions) held at most: split, typed and handed over at once
BATCH_BYTES = 32 << 20  # ... or fewer, when their messages hold more (wide rows: bounded memory)
PROTO_VERSION = "1"
PARTITIONED_SQL = "SELECT 1 FROM pg_class WHERE oid = %s AND relkind = 'p'"


@dataclass(frozen=True)
class Landed:
    """What the landing zone holds per table, as the service hands it over (sources know no landing
    zone): `records`, the schema history's `table` records and dropped tables' truncates; for
    tables only dumped, `dumped_schema` (columns and relation of the newest chunk) and
    `dumped_tables` (the same object until it changes: landing.reader.DumpedTables)."""

    records: Callable[[], list[dict[str, Any]]]
    dumped_schema: Callable[[str, str], tuple[dict[str, str], int | None] | None]
    dumped_tables: Callable[[], AbstractSet[tuple[str, str]]]


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
        hold_s: float,
        frontier: int = 0,
        landed: Landed | None = None,
        enums: dict[str, str] | None = None,
        clamped: ClampedKeys | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.slot = slot
        self.publication = publication
        self.start_lsn = start_lsn
        self.stop = stop
        self.hold_s = hold_s  # transactions are held this long at most before they are handed over
        self.sent = acknowledged  # last position sent to the server as flushed (feedback)
        self.idle_wal_end = 0  # everything before it is read (set while no transaction is open)
        # `watermarks: readonly`: an idle stream's keepalives move the landed frontier (a read-only
        # chunk's window closes when the frontier passes its HIGH; nothing of the dump's is in the log)
        self.keepalive_frontier = config.watermarks == "readonly"
        self._frontier = frontier  # the last frontier handed over (encoded): the checkpoint's at first
        self._cursor: Any = None
        self._tables: dict[int, TableInfo] = {}
        # warns once per table and column: the source's, kept across reconnects (a new reader each), for the run
        self._clamped = clamped or ClampedKeys(name, config.clamped_keys, UnlandableKeyError, UnlandableValueError)
        self.landed = landed  # what landed (schema history) and was dumped (chunks) per table: schema_change.Relations
        self._relations = schema_change.Relations([])  # set from `landed` when reading starts
        # drops, renames away, enum labels (as of the checkpoint: its `resume`), the publication
        self._watcher = CatalogWatcher(name, config, publication, self._relations, landed, enums)

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
            if self.landed is not None:
                self._relations = schema_change.Relations(self.landed.records(), self.landed.dumped_schema)
                self._watcher.relations = self._relations
            self._watcher.check(catalog, sync=False)  # DDL made while capture was stopped (preflight synced)
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
        heartbeat, hold = self.config.heartbeat_s, self.hold_s
        next_heartbeat = time.monotonic() + heartbeat
        group = Group(BATCH_ROWS, BATCH_BYTES)
        run: Any = None  # the run of the last change's table
        run_oid = b""  # ... and its relation oid as the messages carry it (b"": none)
        watcher, next_check = self._watcher, time.monotonic() + CHECK_S
        while True:
            if not group.open and time.monotonic() >= next_check:  # between transactions: the catalog
                watcher.check(self._catalog)
                next_check = time.monotonic() + CHECK_S
            message = cursor.read_message()
            if message is None:
                wait = heartbeat
                if not group.open:
                    if self.stop.is_set():
                        yield from self._ends(group.hand_over())
                        return
                    self.idle_wal_end = max(self.idle_wal_end, cursor.wal_end)
                    now = time.monotonic()
                    if group.pending and now - group.since >= hold:
                        yield from self._ends(group.hand_over())
                        run_oid = b""
                    elif group.pending and group.large:  # all read, a backlog's last group: commit it now
                        yield from self._ends(group.hand_over(flush=True))
                        run_oid = b""
                    if watcher.drops and not group.pending:  # all read: the drops seen before the WAL end land
                        end = self._idle_drops(max(cursor.wal_end, group.ended, self.start_lsn), group.ended, now)
                        if end is not None:
                            yield from end
                            continue
                    if now >= next_heartbeat:
                        next_heartbeat = now + heartbeat
                        if self.keepalive_frontier and not group.pending:
                            end = self._idle_end(max(cursor.wal_end, group.ended, self.start_lsn), now)
                            if end is not None:
                                yield end
                        cursor.send_feedback(reply=True)  # ask for a keepalive: it carries the WAL end
                        yield Heartbeat()
                        continue
                    if group.pending:
                        wait = min(wait, group.since + hold - now)
                select.select([cursor], [], [], max(0.0, min(wait, next_heartbeat - time.monotonic())))
                continue
            buf = message.payload
            kind = buf[0]
            if kind in (73, 85, 68):  # I U D
                if not (run_oid and buf.startswith(run_oid, 1)):
                    oid = _U32.unpack_from(buf, 1)[0]
                    target = self._tables[oid]
                    if not target.captured:
                        continue
                    run, run_oid = group.run(oid, target), buf[1:5]
                group.add(run, buf)
                if group.full:
                    yield from self._ends(group.hand_over())
                    run_oid = b""
            elif kind == 66:  # B
                group.begin(buf)
                if watcher.drops:  # tables dropped before this transaction committed: emptied first
                    dropped = self._due(group.transactions[-1][0])
                    if dropped:
                        yield from self._ends(group.truncate(dropped, dropped=True))
                        run_oid = b""
            elif kind == 67:  # C
                group.commit(buf)
                if group.full or time.monotonic() - group.since >= hold:
                    yield from self._ends(group.hand_over())
                    run_oid = b""
                if self.stop.is_set():
                    yield from self._ends(group.hand_over())
                    return
            elif kind == 82:  # R
                relation = pgoutput.parse_relation(buf)
                if relation.oid in group.runs:  # its held changes were made under the old description
                    yield from self._ends(group.hand_over())
                run_oid = b""
                described = self._describe(relation)
                if not described.captured and not described.watermark:  # renamed away from a captured name?
                    kept = watcher.watched().get(relation.oid)
                    if kept is not None and kept != (relation.schema, relation.table):
                        described = self._describe(replace(relation, schema=kept[0], table=kept[1]))
                if described.captured and not described.watermark:  # stops here on refused DDL
                    empty = self._relations.check(
                        self.name, self.config, self._catalog, relation.oid, described.schema, watcher.watched_now()
                    )
                    if empty and group.open:  # before the new relation's first change (schema_change.py)
                        yield from self._ends(group.truncate([TableSchema(s, t, (), ()) for s, t in empty]))
                    self._uncapture(described.schema, [oid for oid in self._tables if oid != relation.oid])
                self._tables[relation.oid] = described
            elif kind == 84:  # T: one Truncate per captured relation it lists (CASCADE included)
                truncate = pgoutput.parse_truncate(buf)
                infos = [self._tables.get(oid) for oid in truncate.relations]
                tables = [i.schema for i in infos if i is not None and i.captured and not i.watermark]
                if tables:
                    yield from self._ends(group.truncate(tables))
                    run_oid = b""
            # Y (type), O (origin), M (message): nothing to land

    def _ends(self, items: Iterator[Any]) -> Iterator[Any]:
        """`watermarks: readonly`: a transaction's end stands at (its end LSN - 1, 0), not (end LSN, 0):
        still past every change of it (a commit record is longer than 8 bytes), and it leaves the
        idle steps (`_idle_end`) room between it and a transaction that would begin at its end. The enum
        labels last judged (schema_change.EnumLabels) ride in an end only when they changed since the
        last end that carried them (or none did yet), marked `keep`: the landing writer keeps them in
        every later checkpoint. Every hand-over goes through here, truncates' too."""
        for item in items:
            if self.keepalive_frontier and isinstance(item, TransactionEnd):
                frontier = Lsn(item.frontier.major - 1)
                self._frontier = max(self._frontier, frontier.encode())
                item = replace(item, frontier=frontier, resume={**item.resume, "frontier_at": str(self._frontier)})
            if isinstance(item, TransactionEnd):
                item = self._with_enums(item)
            yield item

    def _with_enums(self, end: TransactionEnd) -> TransactionEnd:
        """`end` carrying the enum labels when they are unsent (EnumLabels.unsent)."""
        labels = self._watcher.enums
        enums = labels.unsent()
        if enums is None:
            return end
        labels.sent()
        return replace(end, resume={**end.resume, **enums}, keep=labels.KEEP)

    def _idle_end(self, wal_end: int, now: float) -> TransactionEnd | None:
        """An idle step of the frontier: everything before `wal_end` is read (no transaction open,
        nothing held; the keepalive's WAL end is the walsender's position, and every transaction
        committed before it was sent ahead of it). No WAL record starts in (wal_end - 8, wal_end)
        (records are 8-byte aligned), so (wal_end - 1, k) claims nothing about a transaction that
        would begin at wal_end, and while the server writes nothing k grows by one a heartbeat:
        the frontier passes a read-only HIGH placed above it (`PostgresChunkSource.place_high`)."""
        if self._frontier >= Lsn(wal_end).encode():  # a frontier (wal_end, 0) of an older checkpoint: no room
            return None
        step = max(Lsn(wal_end - 1).encode(), self._frontier + 1)
        self._frontier = step
        resume = {"lsn": format_lsn(wal_end), "frontier_at": str(step)}
        return self._with_enums(TransactionEnd(Lsn.decode(step), resume, datetime.now(UTC), now))

    def _idle_drops(self, wal_end: int, ended: int, now: float) -> list[Any] | None:
        """Nothing open nor held, everything before `wal_end` read: the truncates of tables dropped
        before it land at (wal_end - 1, k), where no transaction can be (`_idle_end`), with an end."""
        if not any(seen <= wal_end for _, seen, _ in self._watcher.drops.values()):
            return None
        # the frontier landed: readonly keeps it (`_ends`), else the last transaction's end (its commit's end, 0)
        frontier = self._frontier if self.keepalive_frontier else max(self._frontier, Lsn(ended).encode())
        if frontier >= Lsn(wal_end).encode():  # no room below wal_end: the next transaction lands them
            return None
        dropped = self._due(wal_end)
        if not dropped:
            return []
        first = max(Lsn(wal_end - 1).encode(), frontier + 1)
        ts = datetime.now(UTC)
        items: list[Any] = [
            Truncate(Lsn.decode(first + i), "0", ts, t.schema, t.table, t.relation) for i, t in enumerate(dropped)
        ]
        self._frontier = first + len(dropped)
        resume = {"lsn": format_lsn(wal_end), "frontier_at": str(self._frontier)}
        items.append(self._with_enums(TransactionEnd(Lsn.decode(self._frontier), resume, ts, now)))
        return items

    def _due(self, position: int) -> list[TableSchema]:
        """The watcher's drops due at `position` (`CatalogWatcher.due`). A relation renamed away keeps
        its OID: its later changes (no new Relation message comes) are no longer the name's."""
        dropped = self._watcher.due(position)
        for table in dropped:
            self._uncapture(table, [table.relation])
        return dropped

    def _uncapture(self, name: TableSchema, oids: list[int | None]) -> None:
        """Relations `oids` that are described under `name` (captured) are not captured any more: renamed
        away, their drop landed or a new relation took the name (their changes would land under it)."""
        for oid in oids:
            info = self._tables.get(oid) if oid is not None else None
            same = info is not None and info.schema.qualified_name == name.qualified_name
            if info is not None and same and info.captured and not info.watermark:
                self._tables[oid] = replace(info, captured=False)

    def _loggable(self, relation: pgoutput.Relation, identity: tuple[str, ...], key: tuple[str, ...]) -> bool:
        """False (said once) for a table whose identity index does not hold its key: its DELETEs and key
        changes would land without the old key (`publication.TableIdentity.unusable`). The publication
        sync takes it out; a publication of all tables, or one capture may not change, still sends it."""
        if relation.replica_identity != "i" or set(key) <= set(identity):
            return True
        table = TableIdentity(relation.schema, relation.table, "i", True, True, True, (), True, identity, key)
        reason, fix = table.unusable or ("", "")
        self.publication.say("publication.table_left_out", table.name, reason=reason, fix=fix)
        return False

    def _describe(self, relation: pgoutput.Relation) -> TableInfo:
        schema_name, table_name = relation.schema, relation.table
        watermark = (schema_name, table_name) == (WATERMARK_SCHEMA, WATERMARK_TABLE)
        captured = watermark or (schema_name != WATERMARK_SCHEMA and self.config.captures(schema_name, table_name))
        if not captured and schema_name != WATERMARK_SCHEMA:  # a partition of a captured partitioned table?
            root = partition_root(self._catalog, relation.oid)
            captured = root is not None and self.config.captures_partition(schema_name, table_name, root)
        if captured and not watermark and query(self._catalog, PARTITIONED_SQL, (relation.oid,)):
            raise PreflightError(  # the publication was switched to publish via the partition root
                f"source {self.name!r}: publication {self.publication.name!r} sends the changes of partitioned table "
                f"{schema_name}.{table_name} under its own name (publish_via_partition_root was set while capture "
                "ran), while dumps and capture land each partition as a table of its own: nothing of it has landed. "
                f'Fix: ALTER PUBLICATION "{self.publication.name}" SET (publish_via_partition_root = false), then '
                f"restart capture and dump the partitions of {schema_name}.{table_name} (their changes since the "
                "switch are not in the log)"
            )
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
            captured = watermark or self._loggable(relation, identity, key)
        described = TableSchema(schema_name, table_name, tuple(columns), key, relation=relation.oid)
        key_only_missing = tuple(n for n in names if n not in identity)
        return TableInfo(
            described, builders, described.key_indexes, identity, key_only_missing, captured, watermark, self._clamped
        )
