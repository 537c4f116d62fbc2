"""Partition statements that remove or move rows without row events in the binlog.

MariaDB/MySQL log `ALTER TABLE t DROP PARTITION p`, `TRUNCATE PARTITION p`, `EXCHANGE PARTITION p
WITH TABLE t2` and MariaDB's `CONVERT PARTITION p TO TABLE t2` / `CONVERT TABLE t2 TO PARTITION p`
as the statement only (a QUERY event): the rows they drop, or move between the partitioned table
and another table, have no row events, so capture would land the statement as DDL history and
the targets would keep rows the source lost (or miss rows it gained). Those rows cannot be
recovered from the log: capture stops at the statement, before anything of it lands (a restart
stops there again), unless the source sets `partition_changes: accept` (then it warns, names the
table, and goes on; a dump of the table repairs it).

What the log can reproduce is reproduced: `TRUNCATE PARTITION ALL` empties the whole table, as
TRUNCATE does, and lands as a truncate. Statements that keep every row where it was (ADD,
REORGANIZE, COALESCE, REBUILD, OPTIMIZE, ANALYZE, CHECK, REPAIR PARTITION, REMOVE PARTITIONING,
PARTITION BY) change no row and pass as DDL. A system-versioned table partitioned BY SYSTEM_TIME
keeps its current rows in its last partition, which MariaDB never drops or truncates: dropping or
truncating its history partitions changes no row capture lands (capture lands current rows only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capture.config import SourceConfig
from capture.errors import PartitionChangeError
from capture.log import get_logger
from capture.sources.mysql.connection import query
from capture.sources.mysql.statements import _name, parse_alter
from capture.sources.policy import refuse_or_warn

log = get_logger(__name__)

Table = tuple[str, str]

# ALTER [ONLINE] [IGNORE] TABLE [IF EXISTS] name


@dataclass(frozen=True)
class PartitionChange:
    """What a partition statement does to rows: `table` the partitioned table, `other` the table
    rows move to or from (EXCHANGE, CONVERT), `whole` when it empties the whole table (TRUNCATE
    PARTITION ALL: reproduced as a truncate), `what` the operation as the statement names it."""

    table: Table
    what: str
    other: Table | None = None
    whole: bool = False

    @property
    def tables(self) -> tuple[Table, ...]:
        return (self.table,) if self.other is None else (self.table, self.other)


def partition_change(statement: str, schema: str) -> PartitionChange | None:
    """The rows a logged ALTER TABLE statement drops or moves by partition (`schema`: the event's
    default database), or None when it keeps every row where it was (or is no ALTER TABLE)."""
    if "partition" not in statement.lower():  # the common case, cheaply
        return None
    tokens, words, table, i = parse_alter(statement, schema)
    if table is None:
        return None
    for n in range(i, len(words) - 1):
        word, following = words[n], words[n + 1]
        if word == "DROP" and following == "PARTITION":
            return PartitionChange(table, "DROP PARTITION")
        if word == "TRUNCATE" and following == "PARTITION":
            whole = n + 2 < len(words) and words[n + 2] == "ALL" and (n + 3 == len(words) or words[n + 3] == ";")
            return PartitionChange(table, "TRUNCATE PARTITION ALL" if whole else "TRUNCATE PARTITION", whole=whole)
        if word == "EXCHANGE" and following == "PARTITION":
            other = _after(tokens, words, n + 2, ("WITH", "TABLE"), schema)
            return PartitionChange(table, "EXCHANGE PARTITION", other)
        if word == "CONVERT" and following == "PARTITION":  # CONVERT PARTITION p TO TABLE t2
            other = _after(tokens, words, n + 2, ("TO", "TABLE"), schema)
            return PartitionChange(table, "CONVERT PARTITION", other)
        if word == "CONVERT" and following == "TABLE":  # CONVERT TABLE t2 TO PARTITION p
            other, _ = _name(tokens, n + 2, schema)
            return PartitionChange(table, "CONVERT TABLE ... TO PARTITION", other)
    return None


def _after(tokens: list, words: list[str], i: int, before: tuple[str, str], schema: str) -> Table | None:
    """The table named after the words `before` (searched from `i`)."""
    for n in range(i, len(words) - 2):
        if (words[n], words[n + 1]) == before:
            return _name(tokens, n + 2, schema)[0]
    return None


def message(source: str, change: PartitionChange, captured: list[Table], statement: str, where: str) -> str:
    names = ", ".join(f"{s}.{t}" for s, t in captured)
    if change.other is None:
        rows = f"it removes the rows of partitions of {change.table[0]}.{change.table[1]}"
    else:
        rows = (
            f"it moves rows between {change.table[0]}.{change.table[1]} and {change.other[0]}.{change.other[1]} "
            "(rows leave one table and appear in the other)"
        )
    return (
        f"source {source!r}: {change.what} at {where} ({statement[:120]!r}) changes captured tables {names} without "
        f"row events: {rows}, and MariaDB/MySQL log only the statement, so capture cannot land those rows and the "
        "targets would keep rows the source lost (or miss rows it gained). Nothing of this statement has landed. "
        "Ways out: (1) set `partition_changes: accept` on the source and restart: capture warns, lands the statement "
        f"as DDL history and goes on; then dump {names} to repair the targets (`logtide dump`); (2) leave these "
        "tables out of capture (exclude). Restarted with `partition_changes: refuse`, capture stops here again"
    )


def check_partition_change(
    source: str, config: SourceConfig, change: PartitionChange, captured: list[Table], statement: str, where: str
) -> None:
    """Stop capture (PartitionChangeError) at a statement that drops or moves rows of captured
    tables by partition, or with `partition_changes: accept` log a warning naming them."""
    names = ",".join(f"{s}.{t}" for s, t in captured)
    refuse_or_warn(
        config.partition_changes,
        PartitionChangeError(message(source, change, captured, statement, where)),
        log,
        "capture.partition_change_accepted",
        source=source,
        tables=names,
        statement=statement[:200],
        at=where,
        reason=f"partition_changes: accept. {change.what} removes or moves rows without row events in the binlog: "
        "these tables' landed rows and targets keep what the source removed (or miss what it gained)",
        action=f"dump {names} to repair them (as of the dump)",
    )


SYSTEM_TIME_SQL = (
    "SELECT 1 FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"
    " AND PARTITION_METHOD = 'SYSTEM_TIME' LIMIT 1"
)


def system_time_partitioned(conn: Any, schema: str, table: str) -> bool:
    """Whether the table is (now) partitioned BY SYSTEM_TIME: its DROP and TRUNCATE PARTITION touch
    history rows only (MariaDB refuses them on the partition of current rows)."""
    return bool(query(conn, SYSTEM_TIME_SQL, (schema, table)))
