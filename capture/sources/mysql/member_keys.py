"""ENUM and SET key columns in a chunk SELECT's bounds: by their number, as the server orders them.

MariaDB/MySQL order an ENUM by its member's position (`ENUM('z','b','a')`: z < b < a) and a SET
by its bits, and an index on one is in that order, as `ORDER BY` is; but compared with a string
(`e > 'z'`) the column is compared by its text. Keyset chunks bound with the last row's key text
then skip rows: after a chunk ending in 'z' nothing is "greater", and the dump ends there. Compared
with a number the column is compared by its number: so the bounds of such a key column are bound
as the member's position (1-based; 0 for the error value '') or the SET's bits.

The server's text does not always name one number: the error value (0, which a permissive sql_mode
writes for an invalid value) and a real '' member both read as ''. So the error value lands as
`types.ENUM_ERROR_VALUE`, ' ', from the log (the row gives the member's number) and from the dump (the
SELECT reads `IF(col = 0, ' ', col)`): text no member can have, as MariaDB/MySQL strip a member's
trailing spaces. Otherwise a key (error, 1) and a key ('', 1), two rows in the source, would land as
one key, and the target would hold one row for both. A chunk's next bound is the number the server
gives for its last row (`col+0`, read with the chunk); text is numbered only for bounds given by a
user (matched by the column's collation, refused when no member) and for a resumed dump's saved key.

A SET's '' member is ambiguous in the same way: the server leaves its ',' out where no member before
it is in the value, so in SET('a','','b') {''} reads '' as the empty set does and {'',b} 'b' as {b}
does. Such a column lands as its members joined by ',' ({'',b} as ',b'), {''} alone as ',' (`types.
SET_EMPTY_MEMBER_ALONE`), from the log and from the dump (`sql.select_list`), and a key list compares
such a column as it lands (`sql.keys_select`): by the server's text, 'b' would find both rows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import pymysql

from capture.errors import DumpInputError
from capture.events import Row, TableSchema
from capture.sources.mysql.connection import query
from capture.sources.mysql.types import ENUM_ERROR_VALUE

_MEMBER = re.compile(r"'((?:[^'\\]|''|\\.)*)'")
_ESCAPES = {"0": "\0", "n": "\n", "r": "\r", "Z": "\x1a"}  # as SHOW CREATE TABLE writes them


@dataclass(frozen=True)
class Members:
    """One ENUM or SET key column: its members in order and the collation they compare by."""

    name: str
    kind: str  # "enum" or "set"
    members: tuple[str, ...]
    charset: str
    collation: str


# key column index -> that column's members
Numbering = dict[int, Members]


def _unescaped(member: str) -> str:
    """A member as COLUMN_TYPE quotes it (`''`, `\\\\`, `\\n` ...) back to its text."""
    return re.sub(r"''|\\(.)", lambda m: "'" if m.group(0) == "''" else _ESCAPES.get(m.group(1), m.group(1)), member)


def member_numbering(conn: pymysql.connections.Connection, table: TableSchema) -> Numbering:
    """The ENUM and SET columns of the table's key, with their members (none: {})."""
    kinds = {c.name: c.source_type for c in table.columns}
    wanted = [k for k in table.key if kinds.get(k) in ("enum", "set")]
    if not wanted:
        return {}
    rows = query(
        conn,
        "SELECT COLUMN_NAME, COLUMN_TYPE, CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLUMNS"
        " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
        (table.schema, table.table),
    )
    types = {str(name): (str(column_type), str(cs), str(coll)) for name, column_type, cs, coll in rows}
    found: Numbering = {}
    for at, name in enumerate(table.key):
        if name in wanted and name in types:
            column_type, charset, collation = types[name]
            members = tuple(_unescaped(m) for m in _MEMBER.findall(column_type))
            found[at] = Members(name, kinds[name], members, charset, collation)
    return found


def empty_members(conn: pymysql.connections.Connection, table: TableSchema) -> dict[str, int]:
    """The table's SET columns that have a '' member, with that member's 1-based position."""
    if not any(c.source_type == "set" for c in table.columns):
        return {}
    rows = query(
        conn,
        "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS"
        " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND DATA_TYPE = 'set'",
        (table.schema, table.table),
    )
    found = {}
    for name, column_type in rows:
        members = [_unescaped(m) for m in _MEMBER.findall(str(column_type))]
        if "" in members:
            found[str(name)] = members.index("") + 1
    return found


def with_numbers(key: Row, numbering: Numbering, numbers: Sequence[int | str]) -> Row:
    """A key with its ENUM and SET values replaced by the numbers the server read for them."""
    values = list(key)
    for at, number in zip(sorted(numbering), numbers, strict=True):
        values[at] = int(number)
    return tuple(values)


def _positions(conn: pymysql.connections.Connection, column: Members, text: str) -> list[int]:
    """The 1-based positions of the members equal to `text` by the column's collation."""
    if not column.members:
        return []
    convert = f"CONVERT(%s USING {column.charset})"
    matches = ", ".join(f"{convert} COLLATE {column.collation} = {convert}" for _ in column.members)
    params = [v for m in column.members for v in (text, m)]
    row = query(conn, f"SELECT {matches}", params)[0]
    return [n for n, equal in enumerate(row, 1) if equal]


def _candidates(conn: pymysql.connections.Connection, column: Members, text: str) -> list[int] | None:
    """The numbers `text` may stand for: ' ' the ENUM error value (0), '' its '' member and the error
    value too (as a landing zone written before ' ' holds it); None: not a value."""
    if column.kind == "enum":
        if text == ENUM_ERROR_VALUE:  # before matching: under a PAD SPACE collation ' ' equals ''
            return [0]
        found = _positions(conn, column, text)
        return ([*found, 0] if text == "" else found) or None
    total = 0
    for part in text.split(",") if text else []:
        found = _positions(conn, column, part)
        if not found:
            return None
        total |= 1 << (found[0] - 1)
    return [total]


def numbered(
    conn: pymysql.connections.Connection,
    table: TableSchema,
    key: Row | Sequence[object] | None,
    numbering: Numbering,
    *,
    lowest: bool,
    given: bool,
) -> Row | None:
    """A key bound in text with its ENUM and SET values as their numbers: the lowest number the
    text may stand for (a range's start, a saved key to go on after) or the highest (a range's
    end). `given` by a user: text that is no member is refused; a saved key's is taken as 0."""
    if key is None or not numbering:
        return None if key is None else tuple(key)
    values = list(key)
    for at, column in numbering.items():
        if values[at] is None:
            continue
        found = _candidates(conn, column, str(values[at]))
        if found is None and given:
            raise DumpInputError(
                f"{table.qualified_name}: {values[at]!r} is not a member of {column.kind.upper()} column {column.name} "
                f"(members, in the order the server sorts them: {', '.join(map(repr, column.members))})"
                "; give one of them"
            )
        values[at] = 0 if found is None else (min(found) if lowest else max(found))
    return tuple(values)
