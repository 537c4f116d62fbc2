"""Foreign-key cascades, which the binlog does not carry.

InnoDB runs ON DELETE / ON UPDATE CASCADE, SET NULL and SET DEFAULT inside the storage engine:
the binlog holds row events of the statement's own table (the parent) only, and a replica runs
the cascade again itself. Capture reads row events, so the child rows a cascade deletes or
changes never reach the landing zone, and a target of the child keeps rows the source deleted
(or the old foreign-key values). Capture does not diverge silently: a captured table that is the
child of a cascading foreign key (whatever the parent) is refused at startup and when DDL adds
such a key while capture runs, unless the source sets `foreign_key_cascades: accept` (then a
warning names the tables). RESTRICT and NO ACTION change no child row: they are fine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pymysql

from capture.config import SourceConfig
from capture.errors import PreflightError
from capture.log import get_logger
from capture.sources.base import WATERMARK_SCHEMA
from capture.sources.mysql.connection import query
from capture.sources.mysql.statements import without_comments
from capture.sources.policy import refuse_or_warn

log = get_logger(__name__)

NOT_CASCADING = ("RESTRICT", "NO ACTION")
# every foreign key that changes child rows; REFERENTIAL_CONSTRAINTS holds foreign keys only
CASCADING_SQL = (
    "SELECT CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME, UNIQUE_CONSTRAINT_SCHEMA, REFERENCED_TABLE_NAME,"
    " DELETE_RULE, UPDATE_RULE FROM information_schema.REFERENTIAL_CONSTRAINTS"
    " WHERE DELETE_RULE NOT IN ('RESTRICT', 'NO ACTION') OR UPDATE_RULE NOT IN ('RESTRICT', 'NO ACTION')"
    " ORDER BY CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME"
)
# DDL that may make a captured table the child of a cascading key: one naming a parent
# (REFERENCES, in CREATE TABLE or ALTER TABLE ... ADD FOREIGN KEY) or renaming a table
MAY_ADD = re.compile(r"\b(?:references|rename)\b", re.IGNORECASE)
CASCADE_RULE = re.compile(r"\bon\s+(delete|update)\s+(cascade|set\s+null|set\s+default)\b", re.IGNORECASE)
_IDENT = r"(?:`((?:[^`]|``)+)`|([\w$]+))"
_DDL_TABLE = re.compile(
    r"^\s*(?:/\*.*?\*/\s*)*(?:alter\s+(?:online\s+)?(?:ignore\s+)?table|create\s+(?:or\s+replace\s+)?"
    rf"(?:temporary\s+)?table(?:\s+if\s+not\s+exists)?)\s+{_IDENT}(?:\s*\.\s*{_IDENT})?",
    re.IGNORECASE | re.DOTALL,
)


@dataclass(frozen=True)
class CascadingKey:
    """A foreign key whose rules change child rows (`schema`.`table` is the child)."""

    schema: str
    table: str
    constraint: str
    parent_schema: str
    parent_table: str
    delete_rule: str
    update_rule: str

    @property
    def child(self) -> str:
        return f"{self.schema}.{self.table}"

    def describe(self) -> str:
        rules = [f"ON {what} {rule}" for what, rule in (("DELETE", self.delete_rule), ("UPDATE", self.update_rule))]
        cascading = ", ".join(r for r in rules if r.split(" ", 2)[2] not in NOT_CASCADING)
        parent = f"{self.parent_schema}.{self.parent_table}" if self.parent_table else "unknown"
        return f"{self.child} (constraint {self.constraint}: {cascading}, parent {parent})"


def cascading_keys(conn: pymysql.connections.Connection, config: SourceConfig) -> list[CascadingKey]:
    """The cascading foreign keys whose child table capture captures, as the catalog shows them now."""
    return [
        key
        for key in (CascadingKey(*(str(v) for v in row)) for row in query(conn, CASCADING_SQL))
        if key.schema != WATERMARK_SCHEMA and config.captures(key.schema, key.table)
    ]


def ddl_table(schema: str, statement: str) -> tuple[str, str] | None:
    """The table a CREATE TABLE or ALTER TABLE statement names (`schema`: the event's default database)."""
    match = _DDL_TABLE.match(statement)
    if match is None:
        return None
    quoted1, plain1, quoted2, plain2 = match.groups()
    first = quoted1.replace("``", "`") if quoted1 is not None else plain1
    if quoted2 is None and plain2 is None:
        return (schema, first) if schema else None
    return first, quoted2.replace("``", "`") if quoted2 is not None else plain2


def added_by_text(schema: str, statement: str) -> CascadingKey | None:
    """The cascading key a CREATE TABLE or ALTER TABLE statement's text adds, as far as the text says
    (the table, its first cascading rule), for a key the catalog no longer shows."""
    statement = without_comments(statement)
    rule = CASCADE_RULE.search(statement)
    table = ddl_table(schema, statement) if rule is not None else None
    if rule is None or table is None:
        return None
    what, action = rule.group(1).upper(), " ".join(rule.group(2).upper().split())
    delete, update = (action, "RESTRICT") if what == "DELETE" else ("RESTRICT", action)
    return CascadingKey(*table, "(not in the catalog now: dropped since)", "", "", delete, update)


def message(source: str, keys: list[CascadingKey], where: str = "") -> str:
    children = sorted({key.child for key in keys})
    lines = "\n  - ".join(key.describe() for key in keys)
    return (
        f"source {source!r}: {where or 'captured tables are'} children of foreign keys with cascading rules, whose "
        "child-row changes MariaDB/MySQL do not write to the binlog (InnoDB runs the cascade itself; a replica "
        "runs it again), so capture would never see them and the targets of these tables would keep rows the "
        f"source deleted or changed:\n  - {lines}\n"
        f"Ways out: (1) leave the child tables out of capture (exclude: [{', '.join(children)}]); "
        "(2) change the rules to RESTRICT or NO ACTION and have the application delete or update the child "
        "rows itself (its statements are logged as row events); (3) set `foreign_key_cascades: accept` on the "
        "source to capture anyway, knowing these tables diverge after each cascade (a dump of them repairs them)"
    )


def check_cascades(source: str, config: SourceConfig, keys: list[CascadingKey], where: str = "") -> None:
    """Refuse (PreflightError) captured children of cascading keys, or with `foreign_key_cascades:
    accept` log a warning naming them."""
    if not keys:
        return
    refuse_or_warn(
        config.foreign_key_cascades,
        PreflightError(message(source, keys, where)),
        log,
        "capture.foreign_key_cascades_accepted",
        source=source,
        tables=",".join(sorted({key.child for key in keys})),
        keys="; ".join(key.describe() for key in keys),
        reason="foreign_key_cascades: accept. The binlog has no row events for the child rows a cascade "
        "deletes or changes: these tables' landed rows and targets keep what the source removed or changed",
        action="a dump of these tables repairs them (as of the dump); run one after cascades, or exclude them",
    )
