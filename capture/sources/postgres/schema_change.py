"""DDL that changes what rows read without one row event, named when capture sees it.

pgoutput carries no DDL: capture learns of it from the Relation message sent before a table's
next change. Some of it changes every row while the log stays silent: ADD COLUMN with a DEFAULT
(stored in the catalog, or a table rewrite for a volatile one), RENAME COLUMN (the targets get a
new column, NULL in rows not changed since, and keep the old one), ALTER COLUMN TYPE (a rewrite,
`USING` may change values) and RENAME TABLE (the new name's target gets only rows changed from
then on; the old one's never changes again). Capture cannot know those rows; it names the table,
what changed and the dump that repairs it (`capture.rows_changed_without_events`). A column
added without a default is NULL in every row, as in the targets: nothing is said.
"""

from __future__ import annotations

from typing import Any

from capture.events import TableSchema
from capture.log import get_logger
from capture.sources.postgres.connection import query

log = get_logger(__name__)

# of the columns named, those holding a value in rows written before they were added
FILLED_SQL = (
    "SELECT a.attname FROM pg_attribute a WHERE a.attrelid = %s AND a.attname = ANY(%s) AND NOT a.attisdropped"
    " AND (a.atthasmissing OR EXISTS (SELECT FROM pg_attrdef d WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum))"
)


def changes(catalog: Any, oid: int, old: TableSchema, new: TableSchema) -> list[str]:
    """What changed rows without row events between two descriptions of one relation."""
    found = []
    if (old.schema, old.table) != (new.schema, new.table):
        found.append(f"renamed from {old.qualified_name}")
    before = {c.name: c.source_type for c in old.columns}
    after = {c.name: c.source_type for c in new.columns}
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


def say(source: str, catalog: Any, oid: int, old: TableSchema, new: TableSchema) -> None:
    """Log `capture.rows_changed_without_events` when `changes` finds something."""
    found = changes(catalog, oid, old, new)
    if found:
        log.warning(
            "capture.rows_changed_without_events",
            source=source,
            table=new.qualified_name,
            change="; ".join(found),
            reason="PostgreSQL logs no row for such DDL: rows not changed since keep NULL, their old values or their "
            "old table's name in the targets",
            action=f"logtide dump --source {source} --table {new.qualified_name}"
            + (f" (and drop the target of {old.qualified_name})" if old.qualified_name != new.qualified_name else ""),
        )


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
