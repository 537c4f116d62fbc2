"""ENUM and SET key columns in a chunk SELECT's bounds: by their number, as the server orders them.

MariaDB/MySQL order an ENUM by its member's position (`ENUM('z','b','a')`: z < b < a) and a SET
by its bits, and an index on one is in that order, as `ORDER BY` is; but compared with a string
(`e > 'z'`) the column is compared by its text. Keyset chunks bound with the last row's key text
then skip rows: after a chunk ending in 'z' nothing is "greater", and the dump ends there. Compared
with a number the column is compared by its number: so the bounds of such a key column are bound
as the member's position (1-based; 0 for the error value '') or the SET's bits.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pymysql

from capture.errors import DumpInputError
from capture.events import Row, TableSchema
from capture.sources.mysql.connection import query

_MEMBER = re.compile(r"'((?:[^']|'')*)'")

# key column index -> the number of each value (ENUM: position; SET: one bit a member)
Numbering = dict[int, tuple[str, dict[str, int]]]


def member_numbering(conn: pymysql.connections.Connection, table: TableSchema) -> Numbering:
    """The ENUM and SET columns of the table's key, with their members' numbers (none: {})."""
    kinds = {c.name: c.source_type for c in table.columns}
    wanted = [k for k in table.key if kinds.get(k) in ("enum", "set")]
    if not wanted:
        return {}
    rows = query(
        conn,
        "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
        (table.schema, table.table),
    )
    types = {str(name): str(column_type) for name, column_type in rows}
    found: Numbering = {}
    for at, name in enumerate(table.key):
        if name in wanted and name in types:
            members = [m.replace("''", "'") for m in _MEMBER.findall(types[name])]
            if kinds[name] == "enum":
                found[at] = ("enum", {m: n for n, m in enumerate(members, 1)})
            else:
                found[at] = ("set", {m: 1 << n for n, m in enumerate(members)})
    return found


def numbered(key: Row | Sequence[object] | None, numbering: Numbering) -> Row | None:
    """A key's values with its ENUM and SET values as their numbers (unknown text: 0, as the error value)."""
    if key is None or not numbering:
        return None if key is None else tuple(key)
    values = list(key)
    for at, (kind, numbers) in numbering.items():
        value = values[at]
        if value is None:
            continue
        if kind == "enum":
            values[at] = numbers.get(str(value), 0)
        else:
            values[at] = sum(numbers.get(m, 0) for m in str(value).split(",") if m)
    return tuple(values)


def check_members(table: TableSchema, key: Row | None, numbering: Numbering) -> None:
    """DumpInputError for a key value (a range bound) that names no member of its ENUM / SET key
    column: `numbered` would bind it as the error value '' (0), silently moving the bound."""
    for at, (kind, numbers) in numbering.items():
        value = None if key is None else key[at]
        if value is None or value == "":
            continue
        unknown = [m for m in ([str(value)] if kind == "enum" else str(value).split(",")) if m not in numbers]
        if unknown:
            raise DumpInputError(
                f"key value {value!r} is not a member of {kind.upper()} column {table.key[at]} of "
                f"{table.qualified_name} (members, in the order the server sorts them: {', '.join(map(repr, numbers))})"
            )
