"""DDL that changes what rows read without one row event: capture stops before it lands, or
(accepted) names it with the dump that repairs it.

pgoutput carries no DDL: capture learns of it from the Relation message sent before a table's
next change. Some of it changes every row while the log stays silent: ADD COLUMN with a DEFAULT
(stored in the catalog, or a table rewrite for a volatile one), RENAME COLUMN (the targets would
get a new column, NULL in rows not changed since, and keep the old one), ALTER COLUMN TYPE (a
rewrite, `USING` may change values). A column added without a default is NULL in every row, as
in the targets: it passes. Each Relation message of a captured table is compared with what capture
last landed (or accepted) under that name (`Relations`, from the schema history's `table` records
at start: so DDL made while capture was stopped is found, and a restart finds it again), or, for a
table whose rows came only from dumps so far, with the schema its newest dump chunk recorded. With
`column_rewrites: refuse` (the default) capture stops (ColumnRewriteError) before the change that
carried the message lands; `accept` warns (`capture.column_rewrite_accepted`) and goes on.

Relations are matched by OID (`TableSchema.relation`, landed with each `table` record):
- a captured name with a new OID (DROP TABLE and CREATE TABLE, or another table renamed in):
  a Truncate of the name lands before the new relation's first change, so the targets lose the
  old table's rows (as MariaDB's DROP TABLE does); the new relation's rows come from its changes
  and, for rows it held before its first logged change, a dump (`capture.table_replaced` names it);
- a known OID under another captured name (ALTER TABLE a RENAME TO b, b captured): the rename
  brings a's rows under b without row events. `table_renames: refuse` stops capture
  (TableRenameError); `accept` warns, empties both names (truncates) and goes on; a dump of b
  brings its rows. A table renamed in from a name capture never saw (not captured, not
  published) cannot be told from a new one: it is the first case;
- a known OID gone from the catalog (DROP TABLE, no row events; a table only dumped counts, by the
  OID its newest chunk recorded, also after an earlier drop of the name), or standing under a name
  not captured (ALTER TABLE t RENAME TO t_old: rows written to t_old are not captured): the catalog
  watcher (watcher.py) reads it with the WAL insert position D after the snapshot that misses it
  (every transaction that wrote the table under its captured name committed before D). Its
  truncate lands once the reader is past D: in the first transaction committed at or after D, or
  at the WAL end when all is read and the stream idles. Landed with the relation OID
  (`Truncate.relation`), so a restart knows it landed; until then a restart finds it again. A new
  table taking the name later needs no second truncate, and is captured as a new relation; the
  renamed table renamed back is such a relation too (`capture.table_replaced` names its dump).

Enum values renamed (`ALTER TYPE ... RENAME VALUE`) change every row holding them and touch no
relation: `EnumLabels` compares pg_enum between transactions and at start (with the labels the
checkpoint carries) and judges each captured table using the type as a column rewrite.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from capture.config import SourceConfig
from capture.errors import ColumnRewriteError, TableRenameError
from capture.events import TableSchema
from capture.log import get_logger
from capture.sources.policy import refuse_or_warn
from capture.sources.postgres.connection import query
from capture.sources.postgres.publication import SCHEMA_PUBLICATIONS

log = get_logger(__name__)

# of the columns named, those holding a value in rows written before they were added
FILLED_SQL = (
    "SELECT a.attname FROM pg_attribute a WHERE a.attrelid = %s AND a.attname = ANY(%s) AND NOT a.attisdropped"
    " AND (a.atthasmissing OR EXISTS (SELECT FROM pg_attrdef d WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum))"
)


Table = tuple[str, str]


# one catalog round of the watcher (watcher.py): the WAL insert position, read after the statement's
# snapshot (every transaction that wrote a relation this snapshot misses, or sees under another name,
# committed before it); of the relations named, those standing, with their name now (a relation
# named but not listed is dropped); every enum value's label (a pg_enum row keeps its OID when renamed);
# and SYNC_STAMP: what the publication sync reads changed since the last round if this text did (below)
CATALOG_SQL = (
    "SELECT pg_current_wal_insert_lsn()::text,"
    " (SELECT json_agg(json_build_array(c.oid::int8, n.nspname, c.relname, c.relispartition)) FROM pg_class c"
    "  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = ANY(%s::oid[])),"
    " (SELECT json_agg(json_build_array(e.oid::int8, e.enumlabel, e.enumtypid::int8, format_type(e.enumtypid, NULL)))"
    "  FROM pg_enum e), (SELECT concat_ws(',', {}))"
)
# A stamp of the catalog rows the publication sync (publication.TABLES_SQL, PUBLICATION_SQL) reads: per
# catalog, the rows' count and the sum of their xmin (the transaction that wrote each row version). A DDL
# that could change what the sync does writes one of them (CREATE/DROP/RENAME/ATTACH/DETACH/SET LOGGED and
# REPLICA IDENTITY update or add pg_class rows; an index's own pg_class and pg_index rows; a schema renamed;
# the publication, its tables and (PostgreSQL 15+) its schemas; the columns of REPLICA IDENTITY USING INDEX
# tables, whose NOT NULL decides their key), so an unchanged stamp means the sync would find what it found
# last time. VACUUM and ANALYZE update pg_class in place (no new xmin). The watcher still syncs in full every
# FULL_SYNC_ROUNDS.
_STAMPED = (
    "pg_class WHERE relkind IN ('r', 'p', 'i', 'I')",
    "pg_index",
    "pg_namespace",
    "pg_publication",
    "pg_publication_rel",
    "pg_attribute WHERE attnum > 0 AND attrelid IN (SELECT oid FROM pg_class WHERE relreplident = 'i')",
)
_SCHEMAS_STAMPED = "pg_publication_namespace"  # ADD TABLES IN SCHEMA: PostgreSQL 15+ (publication.IN_SCHEMA_SQL)


def _stamp(catalogs: tuple[str, ...]) -> str:
    return ", ".join(f"(SELECT count(*) || ':' || coalesce(sum(xmin::text::int8), 0) FROM {t})" for t in catalogs)


SYNC_STAMP = _stamp((*_STAMPED, _SCHEMAS_STAMPED))
_CATALOG_SQL = {True: CATALOG_SQL.format(SYNC_STAMP), False: CATALOG_SQL.format(_stamp(_STAMPED))}


def catalog_sql(version: int) -> str:
    """CATALOG_SQL for a server of `version` (server_version_num)."""
    return _CATALOG_SQL[version >= SCHEMA_PUBLICATIONS]


# the columns using an enum type (arrays and domains of it too), asked only when one of its values was renamed
ENUM_COLUMNS_SQL = (
    "SELECT DISTINCT n.nspname, c.relname, a.attname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid"
    " JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE %s IN (t.oid, t.typelem, t.typbasetype) AND c.relkind IN ('r', 'p') AND a.attnum > 0"
    " AND NOT a.attisdropped ORDER BY 1, 2, 3"
)


@dataclass
class Known:
    """A captured name as last landed or accepted: its columns (name -> source type) and relation;
    `dropped`: a truncate landed for that relation's DROP TABLE (the name holds no relation since);
    `key`: the key its events named rows by (empty where unknown: a table only dumped)."""

    columns: dict[str, str]
    relation: int | None
    dropped: bool = False
    key: tuple[str, ...] = ()


class Relations:
    """What capture last landed or accepted per captured name, and the name each relation OID had.

    `records`: the schema history's `table` records and the `truncate` records of dropped tables
    (LandingZone.relation_records); `dumped`: for a name without any, the schema its newest dump
    chunk recorded (landing.reader.dumped_schema): a table whose rows came only from dumps is
    judged against what the dump read."""

    def __init__(
        self,
        records: list[dict[str, Any]],
        dumped: Callable[[str, str], tuple[dict[str, str], int | None] | None] | None = None,
    ) -> None:
        self.by_name: dict[Table, Known] = {}
        self.by_oid: dict[int, Table] = {}
        self.dumped = dumped
        for row in records:  # in LSN order: the last record of a name wins
            name = (row["schema"], row["table"])
            if row.get("kind", "table") == "truncate":
                # a drop's truncate names the relation the name held then (`drop`), landed or only
                # dumped (no `table` record: a table only dumped, or dropped, created and dumped again)
                known = self.by_name.get(name)
                if known is None or known.relation != row["relation"]:
                    self.by_name[name] = Known({}, row["relation"], dropped=True)
                else:
                    known.dropped = True
                continue
            columns = {c["name"]: c["source_type"] for c in row["columns"] or ()}
            self._record(name, columns, row["relation"], tuple(row.get("key") or ()))

    def _record(self, name: Table, columns: dict[str, str], relation: int | None, key: tuple[str, ...] = ()) -> None:
        self.by_name[name] = Known(columns, relation, key=key)
        if relation is not None:
            self.by_oid[relation] = name

    def known(self, name: Table) -> Known | None:
        """What `name` was last landed or accepted as; for a name with no landed relation, or whose
        relation was dropped, the schema and relation its newest dump chunk read, when that is another
        relation (a table dumped after it was created again)."""
        known = self.by_name.get(name)
        if (known is None or known.dropped) and self.dumped is not None:
            baseline = self.dumped(*name)
            if baseline is not None and (known is None or baseline[1] not in (None, known.relation)):
                return Known(*baseline)
        return known

    def standing(self) -> dict[int, Table]:
        """Relation OID -> captured name, of the names that hold a relation (not dropped)."""
        return {k.relation: name for name, k in self.by_name.items() if k.relation is not None and not k.dropped}

    def drop(self, source: str, oid: int, name: Table, renamed_to: Table | None = None) -> bool:
        """Relation `oid`, found gone from the catalog (or `renamed_to` a name not captured), is dropped at
        the reader's place in the log: True (its name's truncate is to land here) unless the name holds
        another relation by now (a new table took it: its own first change emptied the name) or the drop
        has landed."""
        known = self.known(name)
        if known is None or known.relation != oid or known.dropped:
            return False
        self.by_name[name] = known
        known.dropped = True
        if self.by_oid.get(oid) == name:  # renamed back (or on to a captured name) later: a relation never seen
            del self.by_oid[oid]
        if renamed_to is not None:
            log.warning(
                "capture.table_renamed_away",
                source=source,
                table=_text(name),
                renamed_to=_text(renamed_to),
                relation=oid,
                reason=f"renamed to {_text(renamed_to)}, which is not captured: its rows are emptied in the targets of "
                f"{_text(name)} (a truncate placed after every change made under the old name); rows written to "
                f"{_text(renamed_to)} are not captured, and a table created as {_text(name)} later is captured anew",
            )
            return True
        log.warning(
            "capture.table_dropped",
            source=source,
            table=_text(name),
            relation=oid,
            reason="DROP TABLE writes no row events: its rows are emptied in the targets (a truncate placed after "
            "every change of the dropped table)",
        )
        return True

    def check(
        self,
        source: str,
        config: SourceConfig,
        catalog: Any,
        oid: int,
        new: TableSchema,
        dumped: dict[int, Table] | None = None,
    ) -> list[Table]:
        """Judge the Relation message of captured table `new` (relation `oid`): raise ColumnRewriteError
        or TableRenameError (refuse), or warn (accept); return the names to empty (truncates) before
        the relation's next change. `dumped`: relation -> the name of a table whose rows came only from
        dumps (the watcher's, CatalogWatcher.watched), so one renamed onto this name is found too."""
        name = (new.schema, new.table)
        known = self.known(name)  # rows only dumped so far: what the dump read
        moved_from = self.by_oid.get(oid)
        if moved_from is None and dumped is not None and dumped.get(oid, name) != name:
            moved_from = dumped[oid]  # on main its dumped rows stayed under the old name in the targets
        after = {c.name: c.source_type for c in new.columns}
        empty: list[Table] = []
        if moved_from is not None and moved_from != name:  # a captured table renamed onto this name
            check_rename(source, config, moved_from, name)
            empty.append(name)
            old = self.by_name.get(moved_from)
            if old is not None and old.relation == oid:  # the old name still stood for it: it is gone
                empty.append(moved_from)
                del self.by_name[moved_from]
            elif old is None:  # only dumped: its dumped rows go, and the name holds no relation since
                empty.append(moved_from)
                self.by_name[moved_from] = Known({}, oid, dropped=True)
        elif known is not None and known.relation is not None and (known.relation != oid or known.dropped):
            if not known.dropped:  # else the drop's truncate emptied the name, and nothing of it landed since
                empty.append(name)  # dropped and created again (or renamed in from a name never seen)
            log.warning(
                "capture.table_replaced",
                source=source,
                table=_text(name),
                relation=oid,
                replaces=known.relation,
                reason="a new relation under a captured name (DROP TABLE and CREATE TABLE, or a table renamed in): "
                "the old table's rows are emptied (a truncate) before the new one's first change; rows the new one "
                "held before that change are not in the log",
                action=f"if it held rows before (renamed in, or filled before it was published): logtide dump "
                f"--source {source} --table {_text(name)}",
            )
        elif known is not None:
            found = changes(catalog, oid, known.columns, after)
            if known.key and new.key and known.key != tuple(new.key):
                found.insert(0, rekeyed(known.key, tuple(new.key)))
            if found:
                check_column_rewrite(source, config, name, found)
        self._record(name, after, oid, tuple(new.key))
        return empty


def changes(catalog: Any, oid: int, before: dict[str, str], after: dict[str, str]) -> list[str]:
    """What changed rows without row events between two descriptions (name -> source type) of one
    relation."""
    found = []
    added = [name for name in after if name not in before]
    gone = [name for name in before if name not in after]
    if added and gone:  # a rename looks like a drop and an add: the column held values
        found.append(f"columns {', '.join(added)} replace {', '.join(gone)} (renamed, or dropped and added)")
    elif added:
        filled = {row[0] for row in query(catalog, FILLED_SQL, (oid, added))}
        if filled := [name for name in added if name in filled]:
            found.append(f"columns {', '.join(filled)} added with a DEFAULT")
    retyped = [f"{n} {before[n]} -> {t}" for n, t in after.items() if n in before and _rewrites(before[n], t)]
    if retyped:
        found.append(f"columns retyped ({', '.join(retyped)}; a rewrite, USING may change values)")
    return found


def rekeyed(old: tuple[str, ...], new: tuple[str, ...]) -> str:
    """The change a new primary key (replica identity) makes: the log names rows by another key from here."""
    return (
        f"key ({', '.join(old)}) is now ({', '.join(new)}) (a primary key dropped and another added: events from "
        f"here name rows by ({', '.join(new)}), the targets and the events before by ({', '.join(old)}), so "
        "rows deleted around the change can stay in the targets; for this one, dropping the targets and "
        "running a full dump is the sure way)"
    )


def check_column_rewrite(source: str, config: SourceConfig, name: Table, found: list[str]) -> None:
    """Stop capture (ColumnRewriteError), or with `column_rewrites: accept` log a warning naming the table."""
    table, change = _text(name), "; ".join(found)
    dump = f"logtide dump --source {source} --table {table}"
    refuse_or_warn(
        config.column_rewrites,
        ColumnRewriteError(
            f"source {source!r}: captured table {table} was altered in a way that gives its existing rows new "
            f"values without row events: {change} (its Relation message compared with the schema capture landed "
            "for it, so DDL made while capture was stopped counts too). PostgreSQL logs no rows for such DDL, so "
            "the targets would show NULL, old values, or a renamed column's values under the old name in every "
            "row no later change or dump carries. Nothing of the change that revealed it has landed. Ways out: "
            "(1) set `column_rewrites: accept` on the source and restart: capture warns and goes on; then dump "
            f"the table to repair its targets ({dump}); (2) leave the table out of capture (exclude). Restarted "
            "with `column_rewrites: refuse`, capture stops here again"
        ),
        log,
        "capture.column_rewrite_accepted",
        source=source,
        table=table,
        change=change,
        reason="column_rewrites: accept. PostgreSQL logs no row for such DDL: rows not changed since keep NULL "
        "or their old values in the targets",
        action=dump,
    )


def check_rename(source: str, config: SourceConfig, old: Table, new: Table) -> None:
    """Stop capture (TableRenameError) at a captured table renamed onto a captured name, or with
    `table_renames: accept` log a warning naming both."""
    dump = f"logtide dump --source {source} --table {_text(new)}"
    refuse_or_warn(
        config.table_renames,
        TableRenameError(
            f"source {source!r}: captured table {_text(old)} was renamed to {_text(new)} (its relation OID now "
            f"carries that name): the rename brings its rows under {_text(new)} without row events, so the "
            f"targets of {_text(new)} would keep the rows the old table of that name had and miss these, and "
            f"those of {_text(old)} would keep rows that moved. Nothing of the change that revealed it has "
            "landed. Ways out: (1) set `table_renames: accept` on the source and restart: capture warns, empties "
            f"{_text(old)} and {_text(new)} (truncates) and goes on; then dump {_text(new)} to bring its rows "
            f"({dump}); (2) leave these tables out of capture (exclude). Restarted with `table_renames: refuse`, "
            "capture stops here again"
        ),
        log,
        "capture.table_rename_accepted",
        source=source,
        tables=f"{_text(old)},{_text(new)}",
        reason=f"table_renames: accept. {_text(old)} was renamed to {_text(new)}: both are emptied (truncates) and "
        f"{_text(new)} misses the rows it brought",
        action=dump,
    )


def _text(name: Table) -> str:
    return f"{name[0]}.{name[1]}"


def _rewrites(old: str, new: str) -> bool:
    """Whether a type change may change stored values: another type, numeric's scale, a fractional
    seconds precision (both round), char(n)'s length (pads); not varchar(n)'s or varbit(n)'s length,
    nor numeric's precision alone (every value is kept, or the ALTER fails)."""
    if old == new:
        return False
    old_name, _, old_mod = old.partition("(")
    new_name, _, new_mod = new.partition("(")
    if old_name != new_name:
        return True
    if old_name in ("character varying", "bit varying"):
        return False
    if old_name == "numeric" and old_mod and new_mod:
        return old_mod.partition(",")[2] != new_mod.partition(",")[2]
    return True


class EnumLabels:
    """The label of every enum value, to find `ALTER TYPE ... RENAME VALUE`: every row holding the value
    reads the new label, and no row event says so. A pg_enum row keeps its OID when renamed, so a known
    OID with another label is a rename (ADD VALUE only adds OIDs); only then are the columns using the
    type looked up. The labels travel in the checkpoint's `resume` (given back at start): a rename
    made while capture was stopped is found at start, and with `column_rewrites: refuse` found again
    at every start. They ride in a transaction end's `resume` only when they changed since the last
    end that carried them, and in the reader's first end (`unsent`, `sent`), marked `keep`: the landing
    writer keeps them in every later checkpoint (TransactionEnd.keep)."""

    KEEP = ("enums",)

    def __init__(self, resumed: dict[str, str] | None) -> None:
        self.labels: dict[str, str] | None = dict(resumed) if resumed else None
        self._unsent = self.labels is not None  # a new writer (another term) learns them from the first end

    def unsent(self) -> dict[str, Any] | None:
        """The checkpoint's part when the next end is to carry it (changed, or never carried yet), else None."""
        return {"enums": self.labels or {}} if self._unsent else None

    def sent(self) -> None:
        """An end carries them."""
        self._unsent = False

    def check(
        self,
        source: str,
        config: SourceConfig,
        catalog: Any,
        captured: Callable[[str, str], bool],
        rows: list[list[Any]],
    ) -> None:
        """Compare the catalog's labels (`rows`, of CATALOG_SQL) with the last seen: ColumnRewriteError
        (refuse), or a warning (accept), per captured table with a column of a renamed value's type; then
        remember them."""
        now: dict[str, str] = {}
        renamed: dict[int, tuple[str, list[tuple[str, str]]]] = {}  # enum type -> its name, (old, new) labels
        for oid, label, type_oid, type_name in rows:
            now[str(oid)] = label
            old = (self.labels or {}).get(str(oid))
            if old is not None and old != label:
                renamed.setdefault(type_oid, (type_name, []))[1].append((old, label))
        found: dict[Table, list[str]] = {}
        for type_oid, (type_name, labels) in renamed.items():
            for schema, table, column in query(catalog, ENUM_COLUMNS_SQL, (type_oid,)):
                if captured(schema, table):
                    found.setdefault((schema, table), []).extend(
                        f"enum type {type_name} value '{old}' renamed to '{new}' (ALTER TYPE ... RENAME VALUE; "
                        f"column {column}: its rows holding '{old}' now read '{new}')"
                        for old, new in labels
                    )
        for name, changes_found in sorted(found.items()):
            check_column_rewrite(source, config, name, changes_found)
        if now != (self.labels or {}):
            self.labels = now
            self._unsent = True
