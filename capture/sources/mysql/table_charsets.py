"""A table's default charset at the time of a binlog event, not as the catalog shows it now.

An ALTER TABLE that defines a string column naming no charset (`MODIFY v VARCHAR(20)`) gives it
the table's default charset at that moment; capture judges whether that loses characters
(`column_rewrites`). Capture may read the ALTER long after it ran (stopped, behind), and the
table's default charset may have changed since (`ALTER TABLE t DEFAULT CHARSET ...`, `CONVERT TO
CHARACTER SET ...`): the table map and the landed column definitions carry column charsets, not
the table's default. So it is followed through the DDL text the reader reads (`table_charset`);
where the reader has read none that sets it, it is the catalog's, provided no DDL logged since
the event may have changed it (`unchanged_since` reads the binlog from the event to its end with
`SHOW BINLOG EVENTS`); else it is not known, and a type judged with it counts as a rewrite.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pymysql

from capture.sources.mysql.column_rewrites import Table, keeps_types, table_charset
from capture.sources.mysql.column_types import Collations
from capture.sources.mysql.connection import query
from capture.sources.mysql.statements import parse_alter

_USE = re.compile(r"use `((?:[^`]|``)*)`; (.*)", re.DOTALL)
_BATCH = 2000  # events a SHOW BINLOG EVENTS reads at once


def may_change(statement: str, schema: str, table: Table, collations: Collations | None = None) -> bool:
    """DDL that may change `table`'s default charset: an ALTER TABLE that sets it, or a statement
    that may replace the table (CREATE, DROP, RENAME, ALTER ... RENAME naming its name)."""
    stated = table_charset(statement, schema, collations)
    if stated is not None:
        return (stated[0][0].lower(), stated[0][1].lower()) == (table[0].lower(), table[1].lower())
    tokens, words, altered, _ = parse_alter(statement, schema)
    if not words or words[0] not in ("CREATE", "DROP", "RENAME", "ALTER") or keeps_types(words):
        return False
    if altered is not None and "RENAME" not in words:
        return False
    return table[1].lower() in {str(t).lower() for t in tokens}


def catalog_charset(conn: pymysql.connections.Connection, table: Table, collations: Collations) -> str | None:
    """The table's default charset as the catalog shows it now (None when it has no such table): its
    collation's (MariaDB 11 shows a full name, `utf8mb4_uca1400_ai_ci`, that COLLATION_NAME lacks)."""
    rows = query(
        conn,
        "SELECT TABLE_COLLATION FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
        table,
    )
    return collations.charset(str(rows[0][0])) if rows and rows[0][0] is not None else None


def _statements_since(conn: pymysql.connections.Connection, file: str, pos: int) -> Iterator[tuple[str, str]]:
    """(default database, statement) of every Query event logged from `file`:`pos` on."""
    number = _number(file)
    files = [str(row[0]) for row in query(conn, "SHOW BINARY LOGS") if _number(str(row[0])) >= number]
    for name in files:
        start = pos if name == file else 4
        while True:
            rows = query(conn, "SHOW BINLOG EVENTS IN %s FROM %s LIMIT %s", (name, start, _BATCH))
            for row in rows:
                if row[2] == "Query":
                    info = str(row[5] or "")
                    used = _USE.match(info)
                    yield (used.group(1).replace("``", "`"), used.group(2)) if used else ("", info)
            if len(rows) < _BATCH:
                break
            start = int(rows[-1][4])


def _number(name: str) -> int:
    return int(name.rsplit(".", 1)[-1]) if name.rsplit(".", 1)[-1].isdigit() else -1


def unchanged_since(
    conn: pymysql.connections.Connection, table: Table, file: str, pos: int, collations: Collations
) -> str | None:
    """The table's default charset at binlog position `file`:`pos`: the catalog's now, when no DDL
    logged since may have changed it; else None (not known). `collations`: the server's."""
    now = catalog_charset(conn, table, collations)
    if now is None:
        return None
    since = _statements_since(conn, file, pos)
    if any(may_change(statement, schema, table, collations) for schema, statement in since):
        return None
    return now
