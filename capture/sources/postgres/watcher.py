"""The reader's catalog watcher: what the catalog changes without a row event, polled between
transactions every CHECK_S (and once at start, before streaming).

One round: ONE statement (schema_change.catalog_sql) that reads the captured relations still standing
with their names, every enum label, a stamp of the catalog rows the publication sync reads
(schema_change.SYNC_STAMP), and the WAL insert position D after that statement's snapshot; then, when
that stamp changed since the last sync (or the last sync left something undone, or FULL_SYNC_ROUNDS
passed), the publication brought in step with the captured tables (`Publication.sync`: a table created
since is published from then on). Everything the round decides lands at or after D:
- a captured relation gone (DROP TABLE), or renamed to a name not captured (it keeps its OID:
  capture never sees it under the old name again): its name's truncate lands in the first
  transaction committed at or after D (every change made under the old name committed before D),
  or at the WAL end when all is read and the stream idles (`due`, the reader's `_idle_drops`);
- an enum value renamed: judged at once (schema_change.EnumLabels), before the next transaction.

The relations watched: those capture landed under a captured name (schema_change.Relations), and
of tables whose rows came only from dumps, the relation their newest chunk read. The landing
zone's list of dumped tables (`Landed.dumped_tables`) is the same object until a dump folder
changes (landing.reader.DumpedTables; a chunk written touches its dump folder, so a dump resumed
into the folder it had, after its table was dropped and created again, makes a new list too); only a
new list is looked through again (and, each round, the names found without a chunk yet).

A relation renamed away and back before a round sees it: the watcher never sees the other name, and
the reader lands the changes made under it as the captured name's (`watched`, reader's Relation
messages), so nothing is lost. Seen by a round, the rename away lands its truncate as above, and
from there on the relation's changes are not captured under the old name (renamed back later: a
relation never seen, emptied and its dump named, schema_change.Relations.check).
"""

from __future__ import annotations

from typing import Any

import psycopg2

from capture.config import SourceConfig
from capture.errors import PreflightError
from capture.events import TableSchema
from capture.log import get_logger
from capture.sources.base import WATERMARK_SCHEMA
from capture.sources.postgres import schema_change
from capture.sources.postgres.catalog import partition_root
from capture.sources.postgres.connection import parse_lsn, query
from capture.sources.postgres.publication import PUBLICATION_SYNC_S, Publication

log = get_logger(__name__)

CHECK_S = PUBLICATION_SYNC_S
FULL_SYNC_ROUNDS = 30  # a sync this often whatever the stamp says (about a minute)
Table = tuple[str, str]


class CatalogWatcher:
    """Drops, renames away, enum labels and the publication, in one round per CHECK_S."""

    def __init__(
        self,
        source: str,
        config: SourceConfig,
        publication: Publication,
        relations: schema_change.Relations,
        landed: Any,
        enums: dict[str, str] | None,
    ) -> None:
        self.source = source
        self.config = config
        self.publication = publication
        self.relations = relations
        self.landed = landed  # reader.Landed, or None
        self.enums = schema_change.EnumLabels(enums)  # as of the checkpoint (its `resume`)
        # relation -> its captured name, the WAL position D seen, the name it was renamed to (None: dropped)
        self.drops: dict[int, tuple[Table, int, Table | None]] = {}
        self._dumped: dict[Table, int] = {}  # tables only dumped (or dumped since their drop): the relation read
        self._listing: Any = None  # the last list of dumped tables looked through
        self._unread: set[Table] = set()  # dumped tables whose newest chunk's relation is to be read
        self._synced: str | None = None  # the stamp read before the last sync that settled (None: sync)
        self._rounds = 0  # since that sync

    def check(self, catalog: Any, sync: bool = True) -> None:
        """One round (`sync`: with the publication's)."""
        standing = self._standing()
        statement = schema_change.catalog_sql(catalog.server_version)
        position, present, labels, stamp = query(catalog, statement, (list(standing),))[0]
        self._rounds += 1
        if sync and (stamp != self._synced or self.publication.unsettled or self._rounds >= FULL_SYNC_ROUNDS):
            self._synced, self._rounds = None, 0
            if self._sync_publication(catalog) and not self.publication.unsettled:
                self._synced = stamp  # the sync read the catalog after the stamp: a change since makes another
        seen = parse_lsn(position)
        now = {oid: ((schema, table), partition) for oid, schema, table, partition in present or ()}
        for oid, name in standing.items():
            if oid not in now:
                self.drops[oid] = (name, seen, None)
            elif now[oid][0] != name and not self._captured(catalog, oid, *now[oid]):
                self.drops[oid] = (name, seen, now[oid][0])
        self.enums.check(self.source, self.config, catalog, self.config.captures, labels or [])

    def due(self, position: int) -> list[TableSchema]:
        """The captured tables whose drop (or rename away) was seen at a WAL position before `position`
        (a transaction's commit LSN, or the WAL end when everything before it is read): every change
        of theirs is read by then. Their names, unless taken by a new relation already."""
        found = [oid for oid, (_, seen, _) in self.drops.items() if seen <= position]
        due = []
        for oid in found:
            name, _, renamed_to = self.drops.pop(oid)
            if self.relations.drop(self.source, oid, name, renamed_to):
                due.append(TableSchema(name[0], name[1], (), (), relation=oid))
            elif self._dumped.get(name) == oid:  # not the name's relation any more: read its chunks again
                del self._dumped[name]
                self._unread.add(name)
        return due

    def _standing(self) -> dict[int, Table]:
        """Relation -> captured name, of the relations to watch (not those whose drop is pending)."""
        if self.landed is not None:
            self._look_through_dumps()
        return {oid: name for oid, name in self.watched().items() if oid not in self.drops}

    def watched(self) -> dict[int, Table]:
        """Relation -> the captured name it stands for: landed under it, or its rows only dumped; a drop
        or rename away seen but not landed yet included (changes read before its position are the name's)."""
        standing = {oid: n for oid, n in self.relations.standing().items() if n[0] != WATERMARK_SCHEMA}
        for name, oid in self._dumped.items():
            known = self.relations.by_name.get(name)
            if known is None or (known.dropped and known.relation != oid):
                standing.setdefault(oid, name)
        return standing

    def watched_now(self) -> dict[int, Table]:
        """`watched`, with the dumps written since the last round looked through first: a Relation message
        may come right after a dump's chunks, before the next round (schema_change.Relations.check)."""
        if self.landed is not None:
            self._look_through_dumps()
        return self.watched()

    def _look_through_dumps(self) -> None:
        """The relation the newest chunk of each table only dumped read: of a new list of dumped tables,
        the names not looked at yet and those whose relation was dropped (dumped again since?); and
        names whose watched relation turned out not to be theirs any more (`due`). A name without a chunk
        yet is looked at again each round until one lands."""
        listing = self.landed.dumped_tables()
        if listing is not self._listing:
            self._listing = listing
            for name in listing:
                known = self.relations.by_name.get(name)
                if (known is None and name not in self._dumped) or (known is not None and known.dropped):
                    self._unread.add(name)
        for name in list(self._unread):
            baseline = self.landed.dumped_schema(*name)
            if baseline is None:  # its folder made, no chunk renamed in yet (no folder changes when one is)
                continue
            if baseline[1] is not None:
                self._dumped[name] = baseline[1]
            self._unread.discard(name)

    def _captured(self, catalog: Any, oid: int, name: Table, partition: bool) -> bool:
        """Whether relation `oid`, now called `name`, is still captured (renamed onto a captured name:
        the Relation message before its next change tells, schema_change.Relations.check)."""
        if self.config.captures(*name):
            return True
        return partition and self.config.captures_partition(*name, partition_root(catalog, oid))

    def _sync_publication(self, catalog: Any) -> bool:
        """Whether the sync ran through."""
        try:
            result = self.publication.sync(catalog, create=False)
            if result.problem is not None:  # changed while capture runs (publish_via_partition_root, ...)
                raise PreflightError(f"source {self.source!r}: {result.problem}")
            return True
        except (psycopg2.OperationalError, psycopg2.InterfaceError):
            raise  # the connection: the service reconnects
        except psycopg2.Error as exc:
            log.warning(
                "publication.sync_failed",
                source=self.source,
                publication=self.publication.name,
                error=str(exc).strip(),
                action=f"retried in {CHECK_S} s; tables created meanwhile are published later (dump them)",
            )
            return False
