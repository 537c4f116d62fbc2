"""The capture's publication: the captured tables whose updates PostgreSQL can publish, plus the
watermark table, kept in step as tables come and go (Debezium's
`publication.autocreate.mode=filtered`).

Why not FOR ALL TABLES: PostgreSQL refuses every UPDATE and DELETE on a table that is in a
publication of updates and deletes and has no replica identity ("cannot update table ...
because it does not have a replica identity and publishes updates"). A publication of all
tables would make installing capture break the application's writes to every keyless table.

A table is publishable when its replica identity identifies rows: REPLICA IDENTITY FULL,
DEFAULT with a primary key, or USING INDEX. A captured table that is not is left out (taken out
again if its identity was dropped since) and named, once per process, with the statement that
fixes it; so is one whose changes the log would carry without saying which rows they changed
(`TableIdentity.unusable`: UNLOGGED, or an identity index that does not hold the key), also
under a publication of all tables or an administrator's, where dumps refuse it. Logtide never
changes a table's replica identity itself. A publication made FOR ALL TABLES (by hand, or by
an older Logtide) is used as it is, and its tables without a replica identity are named, with
the statements that replace it by one of the captured tables.

`Publication.sync` runs at capture's start (preflight), in `logtide setup`, when a dump plans
(`ChunkSource.tables`) and sets up, and every PUBLICATION_SYNC_S while capture streams (the
reader's catalog watcher, between transactions: watcher.py). A table created while capture runs
is therefore published within about that time; rows written to it before then are not in the
log, and a dump of the table covers them. Adding a table takes the lock ALTER PUBLICATION takes
(SHARE UPDATE EXCLUSIVE: it waits for DDL and VACUUM, not for reads and writes), for at most
LOCK_TIMEOUT; a table it could not lock is added at the next sync.

With `watermarks: readonly` nothing is created or changed (`Publication._check`): an administrator
creates the publication; a captured table it lacks is named with the statement that adds it, and
neither capture nor dumps cover it until then.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg2
import psycopg2.errors
from psycopg2 import sql

from capture.config import SourceConfig
from capture.log import get_logger
from capture.sources.base import WATERMARK_SCHEMA, WATERMARK_TABLE
from capture.sources.postgres.connection import query
from capture.sources.table_keys import keys_error

log = get_logger(__name__)

PUBLICATION_SYNC_S = 2.0
LOCK_TIMEOUT = "2s"

PUBLICATION_SQL = (
    "SELECT oid, puballtables, pubinsert, pubupdate, pubdelete, pubtruncate,"
    " coalesce((to_jsonb(p) ->> 'pubviaroot')::boolean, false)"  # PostgreSQL 13+
    " FROM pg_publication p WHERE pubname = %s"
)
# every base table of the database: its replica identity, and whether the publication lists it
TABLES_SQL = (
    "SELECT n.nspname, c.relname, c.relreplident,"
    # a DEFERRABLE primary key is no replica identity for PostgreSQL (nor a key for Logtide: catalog.own_key)
    " EXISTS (SELECT FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary AND i.indimmediate),"
    " EXISTS (SELECT FROM pg_index i WHERE i.indrelid = c.oid AND i.indisreplident AND i.indisvalid),"
    " EXISTS (SELECT FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid"
    "  WHERE r.prrelid = c.oid AND p.pubname = %s),"
    " CASE WHEN c.relkind = 'p' THEN ARRAY(SELECT json_build_array(pn.nspname, pc.relname)::text"
    "  FROM pg_partition_tree(c.oid) pt JOIN pg_class pc ON pc.oid = pt.relid"
    "  JOIN pg_namespace pn ON pn.oid = pc.relnamespace WHERE pt.isleaf) ELSE '{}' END,"
    " c.relpersistence = 'p',"
    # REPLICA IDENTITY USING INDEX: the identity index's columns, and the table's key (catalog.dump_key's
    # rule: the primary key, else the first UNIQUE index on NOT NULL columns), to see that one holds the other
    " CASE WHEN c.relreplident = 'i' THEN ARRAY(SELECT a.attname FROM pg_index i"
    "  CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)"
    "  JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
    "  WHERE i.indrelid = c.oid AND i.indisreplident ORDER BY k.n) END,"
    " CASE WHEN c.relreplident = 'i' THEN (SELECT array_agg(a.attname ORDER BY k.n) FROM pg_index i"
    "  CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)"
    "  JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
    "  WHERE i.indrelid = c.oid AND i.indisunique AND i.indisvalid AND i.indimmediate AND i.indpred IS NULL"
    "  AND i.indexprs IS NULL GROUP BY i.indisprimary, i.indexrelid HAVING bool_and(a.attnotnull)"
    " ORDER BY i.indisprimary DESC, i.indexrelid LIMIT 1) END,"
    # a partitioned table's leaf partitions: whether the publication lists them by name, whether they are
    # logged (PostgreSQL lists no UNLOGGED table): `Publication._list_partitions`
    " CASE WHEN c.relkind = 'p' THEN ARRAY(SELECT json_build_array(pn.nspname, pc.relname,"
    "  EXISTS (SELECT FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid"
    "  WHERE r.prrelid = pt.relid AND p.pubname = %s), pc.relpersistence = 'p')::text"
    "  FROM pg_partition_tree(c.oid) pt JOIN pg_class pc ON pc.oid = pt.relid"
    "  JOIN pg_namespace pn ON pn.oid = pc.relnamespace WHERE pt.isleaf) ELSE '{}' END,"
    " IN_SCHEMA"  # whether the publication holds the table's schema: IN_SCHEMA_SQL (tables_sql)
    " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition"
    " AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%%'"
    " ORDER BY 1, 2"
)
# PostgreSQL 15+: ALTER PUBLICATION ... ADD TABLES IN SCHEMA publishes a schema's tables with no
# pg_publication_rel row of theirs
IN_SCHEMA_SQL = (
    "EXISTS (SELECT FROM pg_publication_namespace pn JOIN pg_publication p ON p.oid = pn.pnpubid"
    " WHERE pn.pnnspid = c.relnamespace AND p.pubname = %s)"
)
SCHEMA_PUBLICATIONS = 150000  # server_version_num of the first release with them


def tables_sql(version: int) -> str:
    """TABLES_SQL for a server of `version` (server_version_num); its parameters: the publication's
    name, twice (three times from PostgreSQL 15 on)."""
    return TABLES_SQL.replace("IN_SCHEMA", IN_SCHEMA_SQL if version >= SCHEMA_PUBLICATIONS else "false", 1)


@dataclass(frozen=True)
class TableIdentity:
    schema: str
    table: str
    identity: str  # relreplident: d(efault) f(ull) i(ndex) n(othing)
    primary_key: bool
    identity_index: bool
    listed: bool  # in the publication's table list
    partitions: tuple[str, ...] = ()  # a partitioned table's leaf partitions, JSON [schema, table]
    logged: bool = True  # not UNLOGGED: PostgreSQL writes WAL for its changes
    identity_columns: tuple[str, ...] = ()  # REPLICA IDENTITY USING INDEX: the index's columns
    key: tuple[str, ...] = ()  # with USING INDEX: the table's key (catalog.dump_key)
    in_schema: bool = False  # its schema is in the publication (TABLES IN SCHEMA): published, not `listed`
    leaves: tuple[str, ...] = ()  # `partitions` as JSON [schema, table, listed by name, logged]

    @property
    def in_publication(self) -> bool:
        """PostgreSQL publishes its changes: listed, or its schema is in the publication."""
        return self.listed or self.in_schema

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.table}"

    @property
    def publishable(self) -> bool:
        """PostgreSQL accepts its UPDATEs and DELETEs when it is published."""
        return (
            self.identity == "f"
            or (self.identity == "d" and self.primary_key)
            or (self.identity == "i" and self.identity_index)
        )

    @property
    def unusable(self) -> tuple[str, str] | None:
        """(reason, fix) when PostgreSQL would publish the table but its log would not say which
        rows changed: an UNLOGGED table (no WAL, so nothing is decoded: a dump's rows would never
        change again), or an identity index without the key (a DELETE carries the index's columns
        only, an UPDATE of the key that leaves them alone carries no old key: the old key would stay
        in the target). Such a table is left out like one without a replica identity."""
        quoted = f'"{_text(self.schema)}"."{_text(self.table)}"'
        if not self.logged:
            return unlogged(self.schema, self.table)
        if self.identity == "i" and self.identity_columns and not set(self.key) <= set(self.identity_columns):
            return (
                f"has REPLICA IDENTITY USING INDEX ({', '.join(self.identity_columns)}), which does not hold its key "
                f"({', '.join(self.key)}): PostgreSQL logs a DELETE with the index's columns only, and an UPDATE of "
                "the key that leaves them alone without the old key, so the target would keep rows the source "
                "deleted or moved; it is left out of the publication and neither capture nor dumps cover it",
                (
                    f"ALTER TABLE {quoted} REPLICA IDENTITY DEFAULT (its primary key), or REPLICA IDENTITY FULL"
                    if self.primary_key
                    else f"ALTER TABLE {quoted} REPLICA IDENTITY FULL, or USING INDEX the UNIQUE index of "
                    f"({', '.join(self.key)}) (the table's key: its first UNIQUE index on NOT NULL columns)"
                )
                + "; then dump it",
            )
        return None

    def fix(self) -> str:
        return (
            f"{identity_statement(self.schema, self.table)} (or add a primary key, or REPLICA IDENTITY USING INDEX "
            "on a UNIQUE index of NOT NULL columns)"
        )


def unlogged(schema: str, table: str) -> tuple[str, str]:
    """(reason, fix) of an UNLOGGED table (a partition too: published with its partitioned table)."""
    return (
        "is UNLOGGED: PostgreSQL writes no WAL for its changes, so the log cannot carry them (a dumped row "
        "would never change again); it is left out of the publication and neither capture nor dumps cover it",
        f'ALTER TABLE "{_text(schema)}"."{_text(table)}" SET LOGGED, then dump it (or exclude it)',
    )


def identity_statement(schema: str, table: str) -> str:
    return f'ALTER TABLE "{_text(schema)}"."{_text(table)}" REPLICA IDENTITY FULL'


def _text(name: str) -> str:
    return name.replace('"', '""')


@dataclass
class SyncResult:
    """What the publication covers after a sync."""

    exists: bool = False
    all_tables: bool = False
    published: set[str] = field(default_factory=set)  # db.table: captured tables whose changes are in the log
    left_out: dict[str, tuple[str, str]] = field(default_factory=dict)  # db.table -> (reason, fix)
    problem: str | None = None  # why capture cannot use the publication (it is missing, publishes too little)

    def covers(self, name: str) -> bool:
        return name not in self.left_out and (self.all_tables or name in self.published)


class Publication:
    """One source's publication; remembers what it has said, so each warning is logged once."""

    def __init__(self, source: str, config: SourceConfig) -> None:
        self.source = source
        self.config = config
        self.name = config.publication_name(source)
        self._said: set[tuple[str, str]] = set()
        self._covered: set[str] | None = None  # captured partitions and published tables at the last sync
        self._partitions: set[str] = set()  # ... the partitions alone
        # table, reason, dump to run (, unpublished): its target lacks rows no log carries
        # (landing.unconverged.record); set for capture's own publication only
        self.needs_dump: Callable[..., None] | None = None
        # what the last sync covered, kept across runs (landing.unconverged.covered, remember_covered): the
        # first sync of a run compares with the last run's, to find what changed while capture was stopped
        self.recall: Callable[[], tuple[set[str], set[str]] | None] | None = None
        self.remember: Callable[[set[str], set[str]], None] | None = None
        self._recorded: set[str] = set()  # recorded by the running sync
        self.unsettled = False  # the last sync left a change undone (a lock, a grant): the next one must run

    def _needs_dump(self, table: str, reason: str, action: str, unpublished: bool = False) -> None:
        self._recorded.add(table)
        if self.needs_dump is not None:
            if unpublished:
                self.needs_dump(table, reason, action, unpublished=True)
            else:
                self.needs_dump(table, reason, action)

    def _captured(self, t: TableIdentity) -> bool:
        if (t.schema, t.table) == (WATERMARK_SCHEMA, WATERMARK_TABLE):
            return True
        if t.schema == WATERMARK_SCHEMA:
            return False
        # a partitioned table's changes are published as its partitions': it is published when it
        # or one of its partitions is captured (the reader lands the captured partitions only)
        return self.config.captures(t.schema, t.table) or any(
            self.config.captures(*json.loads(p)) for p in t.partitions
        )

    def say(self, event: str, table: str, **fields: Any) -> bool:
        """Log `event` for `table` once (per run): whether it was logged now."""
        if (event, table) in self._said:
            return False
        self._said.add((event, table))
        log.warning(event, source=self.source, publication=self.name, table=table, **fields)
        return True

    def identities(self, conn: Any) -> list[TableIdentity]:
        """Every base table of the database with its replica identity and publication listing."""
        version = conn.server_version
        args = (self.name,) * (3 if version >= SCHEMA_PUBLICATIONS else 2)
        return [
            TableIdentity(
                *row[:6], tuple(row[6]), bool(row[7]), tuple(row[8] or ()), tuple(row[9] or ()), row[11], tuple(row[10])
            )
            for row in query(conn, tables_sql(version), args)
        ]

    def check_named_keys(self, conn: Any, named: list[str]) -> None:
        """ConfigError for tables with a key named in the configuration whose updates PostgreSQL
        cannot publish (no replica identity): the key would be of no use."""
        by_name = {t.name: t for t in self.identities(conn)}
        problems = [
            f"sources.{self.source}.keys names a key for {name}, whose UPDATEs and DELETEs PostgreSQL cannot "
            f"publish (REPLICA IDENTITY {_IDENTITY[t.identity]}, no primary key): {t.fix()}"
            for name in named
            if (t := by_name.get(name)) is not None and not t.publishable
        ]
        if problems:
            raise keys_error(self.source, problems)

    def sync(self, conn: Any, create: bool = True) -> SyncResult:
        """Bring the publication in step with the captured tables: create it when missing (with
        `create`), add the publishable captured tables it lacks, take out those it should not
        hold (a FOR ALL TABLES publication is left alone). Returns what it covers; a table it
        could not change is named, not fatal."""
        if self._covered is None and self.recall is not None and (last := self.recall()) is not None:
            self._covered, self._partitions = last
        self._recorded = set()
        tables = self.identities(conn)
        captured = [t for t in tables if self._captured(t)]
        result = self._sync(conn, create, tables, captured)
        self._coverage_changed(result, captured)
        return result

    def _sync(self, conn: Any, create: bool, tables: list[TableIdentity], captured: list[TableIdentity]) -> SyncResult:
        result = SyncResult()
        self.unsettled = False
        wanted = [t for t in captured if t.publishable and t.unusable is None]
        self._partitions_detached(tables, captured)
        for t in captured:  # on every path: a publication of all tables, or an administrator's, too
            if (unusable := t.unusable) is not None:
                result.left_out[t.name] = unusable
                self.say("publication.table_left_out", t.name, reason=unusable[0], fix=unusable[1])
        rows = query(conn, PUBLICATION_SQL, (self.name,))
        if self.config.watermarks == "readonly":
            return self._check(conn, rows, captured, wanted, result)
        if not rows and not create:
            result.problem = f"publication {self.name!r} does not exist: run `logtide setup --source {self.source}`"
        elif not rows:
            result.problem = self._create(conn, wanted)
            result.exists = result.problem is None
            result.published = {t.name for t in wanted} if result.exists else set()
        else:
            result.exists = True
            all_tables = self._check_publish(rows[0], result)
            if all_tables:
                result.all_tables = True
                self._said_all_tables(conn, tables, wanted)
                return result
            result.published = self._alter_all(conn, tables, wanted)
        for t in captured:
            if not t.publishable and t.name not in result.published and t.name not in result.left_out:
                reason = (
                    f"has REPLICA IDENTITY {_IDENTITY[t.identity]} and no primary key: published, its UPDATEs and "
                    "DELETEs would fail in the application, so it is left out of the publication and neither "
                    "capture nor dumps cover it"
                )
                result.left_out[t.name] = (reason, t.fix())
                self.say("publication.table_left_out", t.name, reason=reason, fix=t.fix())
        return result

    def _captured_partitions(self, captured: list[TableIdentity]) -> dict[str, str]:
        """The captured partitions of the captured partitioned tables: partition -> partitioned table."""
        return {
            f"{schema}.{table}": t.name
            for t in captured
            for schema, table in map(json.loads, t.partitions)
            if self.config.captures_partition(schema, table, (t.schema, t.table))
        }

    def _partitions_detached(self, tables: list[TableIdentity], captured: list[TableIdentity]) -> None:
        """A partition captured through its partitioned table only, and detached since the last sync, is no
        longer captured: named (its target stops following it)."""
        if self._covered is None:
            return
        partitions = set(self._captured_partitions(captured))
        standing = {t.name for t in tables}
        for name in sorted(self._partitions - partitions):
            schema, _, table = name.partition(".")
            if name in standing and not self.config.captures(schema, table):
                log.warning(
                    "publication.partition_detached",
                    source=self.source,
                    publication=self.name,
                    table=name,
                    reason="detached from the captured partitioned table, and `include` names only that table: "
                    "it is no longer captured, its target keeps the rows it had and follows it no more",
                    action=f"to keep capturing it, add {name} to `include`, restart, and dump it; else "
                    "disregard (or drop) its target",
                )

    def _coverage_changed(self, result: SyncResult, captured: list[TableIdentity]) -> None:
        """What the publication covers that it did not at the last sync (this run's, or with `recall` the
        last run's: changed while capture was stopped) holds rows no log carries, named with the dump that
        brings them: a partition attached to (or created in) a captured partitioned table is published with
        it, without ALTER PUBLICATION (ATTACH PARTITION writes no row events), unless it was a published
        captured table before; a table added to the publication (by `logtide setup`, a dump, an
        administrator) unless this sync added it (`_alter` named it). A new table under a publication of all
        tables is published from its creation: not named. Nothing is compared, nor kept, when the
        publication is unusable (`problem`)."""
        if result.problem is not None:
            return
        partitions = self._captured_partitions(captured)
        tables = {t.name for t in captured if result.covers(t.name)}
        covered = tables | {p for p, parent in partitions.items() if parent in tables}
        if self._covered is not None:
            for name in sorted(covered - self._covered - self._recorded):
                if tuple(name.split(".", 1)) == (WATERMARK_SCHEMA, WATERMARK_TABLE):
                    continue
                action = f"logtide dump --source {self.source} --table {name}"
                if name in partitions:
                    reason = (
                        "a new partition of a published partitioned table (ATTACH PARTITION, or PARTITION OF): "
                        "its rows written before its first change in the log are not in the log"
                    )
                    event = "publication.partition_added"
                elif result.all_tables:
                    continue
                else:
                    reason = "added to the publication since the last sync: its rows written before are not in the log"
                    event = "publication.table_added"
                log.warning(event, source=self.source, publication=self.name, table=name, reason=reason, action=action)
                self._needs_dump(name, reason, action)
        if self.remember is not None and (covered, set(partitions)) != (self._covered, self._partitions):
            self.remember(covered, set(partitions))
        self._covered, self._partitions = covered, set(partitions)

    def _check_publish(self, row: tuple[Any, ...], result: SyncResult) -> bool:
        """What an existing publication publishes: inserts, updates and deletes or a problem; a
        missing TRUNCATE only warns (capture runs, but a TRUNCATE would leave its rows in the
        targets). Returns whether it is FOR ALL TABLES."""
        _oid, all_tables, insert, update, delete, truncate, via_root = row
        fix = f"ALTER PUBLICATION \"{_text(self.name)}\" SET (publish = 'insert, update, delete, truncate')"
        if not (insert and update and delete):
            result.problem = f"publication {self.name!r} does not publish inserts, updates and deletes: {fix}"
        elif via_root:
            result.problem = (
                f"publication {self.name!r} publishes via the partition root: a partition's changes would come "
                "under its partitioned table's name while dumps read the partitions, and PostgreSQL does not send "
                "a TRUNCATE of one partition at all (targets would keep its rows): "
                f'ALTER PUBLICATION "{_text(self.name)}" SET (publish_via_partition_root = false)'
            )
        elif not truncate:
            self.say(
                "publication.truncate_not_published",
                "*",
                problem="TRUNCATE of a captured table is not in the log: targets would keep its rows",
                fix=fix,
            )
        return bool(all_tables)

    def _check(
        self,
        conn: Any,
        rows: list[tuple[Any, ...]],
        captured: list[TableIdentity],
        wanted: list[TableIdentity],
        result: SyncResult,
    ) -> SyncResult:
        """`watermarks: readonly`: the publication is an administrator's, never created or changed
        here; what it covers, and the captured tables it lacks with the statement that adds them."""
        statement = sql.SQL("CREATE PUBLICATION {}").format(sql.Identifier(self.name))
        wanted = [t for t in wanted if (t.schema, t.table) != (WATERMARK_SCHEMA, WATERMARK_TABLE)]
        if wanted:
            statement += sql.SQL(" FOR TABLE ") + _table_list(wanted)
        if not rows:
            result.problem = (
                f"publication {self.name!r} does not exist, and with watermarks: readonly Logtide creates nothing: "
                f"as the owner of the captured tables (or a superuser) run {statement.as_string(conn)}"
            )
            return result
        result.exists = True
        if self._check_publish(rows[0], result):
            result.all_tables = True
            return result
        result.published = {t.name for t in captured if t.in_publication and t.unusable is None}
        for t in captured:
            if t.in_publication or (t.schema, t.table) == (WATERMARK_SCHEMA, WATERMARK_TABLE) or t.unusable is not None:
                continue
            add = sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
                sql.Identifier(self.name), sql.Identifier(t.schema, t.table)
            )
            reason = f"is not in publication {self.name!r} (watermarks: readonly: Logtide does not change it)"
            fix = f"as the table's owner run: {add.as_string(conn)}" if t.publishable else t.fix()
            # its changes until it is (back) in the publication are in no log
            fix += f"; then logtide dump --source {self.source} --table {t.name}"
            result.left_out[t.name] = (reason, fix)
            if self.say("publication.table_not_published", t.name, reason=reason, fix=fix):
                self._needs_dump(t.name, reason, fix, unpublished=True)
        return result

    def _alter_all(self, conn: Any, tables: list[TableIdentity], wanted: list[TableIdentity]) -> set[str]:
        """Add the wanted tables the publication lacks, drop those it holds and should not; the
        captured tables it holds afterwards."""
        published, wanted_names = set(), {t.name for t in wanted}
        for t in wanted:  # also one its schema publishes (TABLES IN SCHEMA): it stays published without it
            if t.listed or self._alter(conn, "ADD", t) or t.in_schema:
                published.add(t.name)
        self._list_partitions(conn, tables, published)
        for t in tables:
            if (
                t.listed
                and t.name not in wanted_names
                and not self._alter(conn, "DROP", t)
                and self._captured(t)
                and t.unusable is None
            ):
                published.add(t.name)  # still listed: its changes still come
        for t in tables:  # published with its schema: no DROP TABLE takes it out
            if t.in_schema and not t.publishable:
                self.say(
                    "publication.schema_without_identity",
                    t.name,
                    reason=f"publication {self.name} holds schema {t.schema} (TABLES IN SCHEMA): UPDATE and DELETE "
                    "on this table fail in the application (no replica identity)",
                    fix=f'{t.fix()}; or ALTER PUBLICATION "{_text(self.name)}" DROP TABLES IN SCHEMA '
                    f'"{_text(t.schema)}" (capture adds the captured tables back one by one)',
                )
        return published

    def _said_all_tables(self, conn: Any, tables: list[TableIdentity], wanted: list[TableIdentity]) -> None:
        """A FOR ALL TABLES publication is left as it is; its tables without a replica identity are
        named, with the statements that replace it by one of the captured tables."""
        name = sql.Identifier(self.name)
        create = sql.SQL("CREATE PUBLICATION {}").format(name)
        if wanted:
            create += sql.SQL(" FOR TABLE ") + _table_list(wanted)
        replace = sql.SQL("BEGIN; DROP PUBLICATION {}; {}; COMMIT").format(name, create).as_string(conn)
        for t in tables:  # every table of the database is published, captured or not
            if not t.publishable:
                self.say(
                    "publication.all_tables_without_identity",
                    t.name,
                    reason=f"publication {self.name} is FOR ALL TABLES: UPDATE and DELETE on this table fail in the "
                    "application (no replica identity)",
                    fix=f"{t.fix()}; or publish only the captured tables (capture may keep running): {replace}",
                )

    def _partitions_by_name(self, t: TableIdentity) -> list[TableIdentity]:
        """The leaf partitions of partitioned table `t` that `include` names themselves: they stay captured
        when detached, so the publication lists them by name too (`_list_partitions`)."""
        return [
            TableIdentity(schema, table, "d", True, True, listed)
            for schema, table, listed, logged in map(json.loads, t.leaves)
            if logged and self.config.captures(schema, table)
        ]

    def _list_partitions(self, conn: Any, tables: list[TableIdentity], published: set[str]) -> None:
        """List by name, besides their published partitioned table, the partitions captured by their own
        name; take out the other partitions listed. Why: pgoutput decides whether a change is published
        with the catalog as of that change. A partition published through its partitioned table only is
        in no publication from its DETACH on until a sync adds it by name, so its changes in between
        were not in the log (its target missed them; the sync that added it listed it not converged).
        Listed by name it stays published through the DETACH. Listing a partition changes nothing else:
        PostgreSQL publishes its changes once, under its own name, either way."""
        for t in tables:
            if not t.partitions:
                continue
            keep = self._partitions_by_name(t) if t.name in published else []
            for p in keep:
                if not p.listed:
                    self._alter(conn, "ADD", p, partition_of=t.name)
            names = {p.name for p in keep}
            for schema, table, listed, _logged in map(json.loads, t.leaves):
                if listed and f"{schema}.{table}" not in names:
                    self._alter(conn, "DROP", TableIdentity(schema, table, "d", True, True, True), partition_of=t.name)

    def _create(self, conn: Any, tables: list[TableIdentity]) -> str | None:
        statement = sql.SQL("CREATE PUBLICATION {}").format(sql.Identifier(self.name))
        tables = tables + [p for t in tables for p in self._partitions_by_name(t)]  # `_list_partitions`
        if tables:
            statement += sql.SQL(" FOR TABLE ") + _table_list(tables)
        try:
            _execute(conn, statement)
        except psycopg2.errors.InsufficientPrivilege:
            return (
                f"publication {self.name!r} does not exist and user {self.config.user!r} may not create it: as the "
                f"owner of the captured tables (or a superuser) run {statement.as_string(conn)}"
            )
        log.info("publication.created", source=self.source, publication=self.name, tables=_names(tables))
        return None

    def _alter(self, conn: Any, action: str, t: TableIdentity, partition_of: str | None = None) -> bool:
        """ADD or DROP one table (one at a time: a table the user may not change stops nothing
        else); False when it could not. A partition of `partition_of` (published, or not, with it:
        `_list_partitions`) is listed or unlisted without a word of rows missing: its changes were in
        the log through its partitioned table."""
        statement = sql.SQL("ALTER PUBLICATION {} {} TABLE {}").format(
            sql.Identifier(self.name), sql.SQL(action), sql.Identifier(t.schema, t.table)
        )
        try:
            _transaction(conn, sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(LOCK_TIMEOUT)), statement)
        except psycopg2.errors.InsufficientPrivilege:
            self.say(
                "publication.not_changed",
                t.name,
                reason=f"user {self.config.user!r} may not {action} it (it must own the table and the publication)",
                fix=f"as the table's owner run: {statement.as_string(conn)}",
            )
            self.unsettled = True
            return False
        except (psycopg2.errors.LockNotAvailable, psycopg2.errors.UndefinedTable) as exc:
            log.info("publication.retry_later", source=self.source, table=t.name, error=str(exc).strip())
            self.unsettled = True
            return False
        if partition_of is not None:
            log.info(
                "publication.partition_listed" if action == "ADD" else "publication.partition_unlisted",
                source=self.source,
                publication=self.name,
                table=t.name,
                partitioned_table=partition_of,
            )
        elif action == "ADD":  # a new table, or one left out until now: what it held is in no log
            reason, dump = (
                "its rows written before now are not in the log",
                f"logtide dump --source {self.source} --table {t.name}",
            )
            log.warning(
                "publication.table_added",
                source=self.source,
                publication=self.name,
                table=t.name,
                reason=reason,
                action=dump,
            )
            if (t.schema, t.table) != (WATERMARK_SCHEMA, WATERMARK_TABLE):  # Logtide's own: nothing to dump
                self._needs_dump(t.name, f"added to the publication: {reason}", dump)
        else:
            log.info("publication.table_removed", source=self.source, publication=self.name, table=t.name)
        return True


_IDENTITY = {"d": "DEFAULT", "f": "FULL", "i": "USING INDEX", "n": "NOTHING"}


def _table_list(tables: list[TableIdentity]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Identifier(t.schema, t.table) for t in tables)


def _names(tables: list[TableIdentity]) -> str:
    return ",".join(t.name for t in tables)


def _execute(conn: Any, statement: sql.Composable) -> None:
    with conn.cursor() as cursor:
        cursor.execute(statement)


def _transaction(conn: Any, *statements: sql.Composable) -> None:
    """The statements in one transaction of an autocommit connection, rolled back on an error."""
    try:
        _execute(conn, sql.SQL("BEGIN; {}; COMMIT").format(sql.SQL("; ").join(statements)))
    except psycopg2.Error:
        with contextlib.suppress(psycopg2.Error):
            query(conn, "ROLLBACK")
        raise
