"""Table metadata from information_schema: columns with their Arrow types, and the dump key.

The key is the primary key, else the first UNIQUE index whose columns are all NOT NULL, else
the one the configuration names (`capture.sources.table_keys`); a table with none cannot be
dumped in chunks and is refused. Whether the key orders as Spark orders its landed values
is decided here too (`exact_order`).

A MariaDB system-versioned table is its current rows, as `SELECT *` shows them: its SYSTEM_TIME
period columns (`AS ROW START` / `AS ROW END`, whatever their names; the implicit `row_start` and
`row_end` are not in information_schema at all) are left out of its columns, and of its keys,
where MariaDB appends the row end to the primary key and to every UNIQUE index.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pymysql

from capture.errors import table_not_found
from capture.events import Column, TableSchema
from capture.sources.mysql.connection import query
from capture.sources.mysql.types import MAX_ARROW_DECIMAL, ColumnBuilder, column_from_catalog
from capture.sources.table_keys import TableKeys, no_key, table_key

# a column that is not a system-versioning period column (MySQL has the column, never these values)
NOT_PERIOD = "COALESCE(GENERATION_EXPRESSION, '') NOT IN ('ROW START', 'ROW END')"
COLUMNS_SQL = (
    "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_OCTET_LENGTH, NUMERIC_PRECISION, NUMERIC_SCALE,"
    " DATETIME_PRECISION, IS_NULLABLE, CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLUMNS"
    " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND " + NOT_PERIOD + " ORDER BY ORDINAL_POSITION"
)
INDEXES_SQL = (
    "SELECT s.INDEX_NAME, s.COLUMN_NAME, s.SUB_PART FROM information_schema.STATISTICS s"
    " WHERE s.TABLE_SCHEMA = %s AND s.TABLE_NAME = %s AND s.NON_UNIQUE = 0"
    " ORDER BY s.INDEX_NAME = 'PRIMARY' DESC, s.INDEX_NAME, s.SEQ_IN_INDEX"
)
NOT_NULL_SQL = (
    "SELECT COLUMN_NAME, IS_NULLABLE = 'NO' FROM information_schema.COLUMNS"
    " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND " + NOT_PERIOD + " ORDER BY ORDINAL_POSITION"
)
PRECISION_SQL = (
    "SELECT COLUMN_NAME, DATETIME_PRECISION FROM information_schema.COLUMNS"
    " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND DATETIME_PRECISION > 0"
)
DATA_TYPES_SQL = (
    "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"
)
# the SYSTEM_TIME period of a MariaDB table: (table type, start column, end column); explicit
# period columns are generated ALWAYS AS ROW START / ROW END, implicit ones are not listed
PERIOD_SQL = (
    "SELECT t.TABLE_TYPE, MAX(IF(c.GENERATION_EXPRESSION = 'ROW START', c.COLUMN_NAME, NULL)),"
    " MAX(IF(c.GENERATION_EXPRESSION = 'ROW END', c.COLUMN_NAME, NULL))"
    " FROM information_schema.TABLES t LEFT JOIN information_schema.COLUMNS c"
    " ON c.TABLE_SCHEMA = t.TABLE_SCHEMA AND c.TABLE_NAME = t.TABLE_NAME"
    " WHERE t.TABLE_SCHEMA = %s AND t.TABLE_NAME = %s GROUP BY t.TABLE_TYPE"
)
# tables versioned by transaction ids, whose writes MariaDB logs as statements
TRX_VERSIONED_SQL = (
    "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.COLUMNS"
    " WHERE GENERATION_EXPRESSION = 'ROW START' AND DATA_TYPE = 'bigint' ORDER BY TABLE_SCHEMA, TABLE_NAME"
)
COLUMN_NAMES_SQL = "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"
TABLES_SQL = (
    "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES"
    " WHERE TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED')"
    " AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys', 'logtide')"
    " ORDER BY TABLE_SCHEMA, TABLE_NAME"
)


def spelled_otherwise(conn: pymysql.connections.Connection, schema: str, table: str) -> str | None:
    """`db.table` of the one base table whose name differs from `schema.table` in letter case only."""
    rows = query(
        conn,
        "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE LOWER(TABLE_SCHEMA) = LOWER(%s)"
        " AND LOWER(TABLE_NAME) = LOWER(%s) AND TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED') LIMIT 2",
        (schema, table),
    )
    return f"{rows[0][0]}.{rows[0][1]}" if len(rows) == 1 else None


def describe(
    conn: pymysql.connections.Connection, schema: str, table: str, source: str, named: tuple[str, ...] | None
) -> tuple[TableSchema, list[ColumnBuilder]]:
    """Schema of `schema.table` and a builder per column for SELECT values (`named`: the key the
    configuration names for it); DumpInputError if it does not exist, UnusableTableError if no key."""
    rows = query(conn, COLUMNS_SQL, (schema, table))
    if not rows:
        raise table_not_found(schema, table, spelled_otherwise(conn, schema, table))
    names = (
        "COLUMN_NAME",
        "DATA_TYPE",
        "COLUMN_TYPE",
        "CHARACTER_OCTET_LENGTH",
        "NUMERIC_PRECISION",
        "NUMERIC_SCALE",
        "DATETIME_PRECISION",
        "IS_NULLABLE",
        "CHARACTER_SET_NAME",
        "COLLATION_NAME",
    )
    infos = [dict(zip(names, row, strict=True)) for row in rows]
    columns, builders = [], []
    for info in infos:
        arrow_type, source_type, build = column_from_catalog(info)
        columns.append(Column(info["COLUMN_NAME"], arrow_type, source_type))
        builders.append(build)
    not_null = {i["COLUMN_NAME"]: i["IS_NULLABLE"] == "NO" for i in infos}
    name = f"{schema}.{table}"
    key = table_key(source, name, TableKeys(not_null, own_key(conn, schema, table, not_null)), named)
    if not key:
        raise no_key(source, name, " (without prefixes)")
    by_name = {i["COLUMN_NAME"]: i for i in infos}
    exact = all(exact_order(by_name[k]) for k in key)
    whole = "\x1f".join(
        "\x1e".join(
            str(i[n]) for n in ("COLUMN_NAME", "COLUMN_TYPE", "CHARACTER_SET_NAME", "COLLATION_NAME", "IS_NULLABLE")
        )
        for i in infos
    )
    catalog = hashlib.sha1(whole.encode()).hexdigest()[:16]
    return TableSchema(schema, table, tuple(columns), key, exact_key_order=exact, catalog=catalog), builders


# Types whose order in MariaDB is the order Spark gives their landed values: numbers (DECIMAL up
# to 38 digits: wider lands as text), DATE/DATETIME/TIMESTAMP/TIME/YEAR, BIT, and the binary
# strings, compared byte by byte without padding (BINARY(n) lands padded to n, as stored).
# Not FLOAT/DOUBLE (a FLOAT is compared as a double), ENUM/SET (member order), CHAR (padded in
# storage, trimmed when read), GEOMETRY.
_EXACT_TYPES = {
    "tinyint", "smallint", "mediumint", "int", "bigint", "date", "datetime", "timestamp", "time", "year", "bit",
    "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob",
}  # fmt: skip
_TEXT_TYPES = {"varchar", "tinytext", "text", "mediumtext", "longtext"}
# character sets whose binary collation orders by code point, which is the order of UTF-8 bytes
# (Spark's); latin1 is cp1252 in MariaDB, and UTF-16 orders surrogates apart
_CODE_POINT_CHARSETS = {"utf8mb4", "utf8mb3", "utf8", "ascii"}


def exact_order(info: dict[str, Any]) -> bool:
    """Whether MariaDB orders and compares this (key) column exactly as Spark orders its landed
    values. Text only under a NO PAD binary collation (`utf8mb4_nopad_bin`): every other one,
    `utf8mb4_bin` included, is PAD SPACE ('a' = 'a ', and 'a\t' < 'a') or linguistic."""
    data_type = info["DATA_TYPE"].lower()
    if data_type == "decimal":
        return int(info["NUMERIC_PRECISION"]) <= MAX_ARROW_DECIMAL
    if data_type in _TEXT_TYPES:
        charset, collation = (info["CHARACTER_SET_NAME"] or "").lower(), (info["COLLATION_NAME"] or "").lower()
        return charset in _CODE_POINT_CHARSETS and collation == f"{charset}_nopad_bin"
    return data_type in _EXACT_TYPES


def own_key(
    conn: pymysql.connections.Connection, schema: str, table: str, not_null: dict[str, bool]
) -> tuple[str, ...]:
    """The primary key, else the first UNIQUE index on NOT NULL columns without prefixes; () if none."""
    indexes: dict[str, list[Any]] = {}
    for index_name, column, sub_part in query(conn, INDEXES_SQL, (schema, table)):
        if column in not_null:  # not a period column (a versioned table's keys end with its row end)
            indexes.setdefault(index_name, []).append((column, sub_part))
    for parts in indexes.values():
        if all(sub_part is None and not_null[column] for column, sub_part in parts):
            return tuple(column for column, _ in parts)
    return ()


def table_keys(conn: pymysql.connections.Connection, schema: str, table: str) -> TableKeys | None:
    """Nullability of the columns and the table's own key; None if there is no such table."""
    not_null = {column: bool(flag) for column, flag in query(conn, NOT_NULL_SQL, (schema, table))}
    return TableKeys(not_null, own_key(conn, schema, table, not_null)) if not_null else None


def base_tables(conn: pymysql.connections.Connection) -> list[tuple[str, str]]:
    return [(schema, table) for schema, table in query(conn, TABLES_SQL)]


def fractional_columns(conn: pymysql.connections.Connection, schema: str, table: str) -> set[str]:
    """The table's DATETIME, TIME and TIMESTAMP columns with fractional seconds."""
    return {row[0] for row in query(conn, PRECISION_SQL, (schema, table))}


def data_types(conn: pymysql.connections.Connection, schema: str, table: str) -> dict[str, str]:
    """Column name -> DATA_TYPE ('binary', 'inet6', 'uuid', ...)."""
    return {name: str(kind).lower() for name, kind in query(conn, DATA_TYPES_SQL, (schema, table))}


def system_period(conn: pymysql.connections.Connection, schema: str, table: str) -> tuple[str, str] | None:
    """The (row start, row end) columns of a system-versioned table; None for any other table."""
    found = query(conn, PERIOD_SQL, (schema, table))
    if not found or found[0][0] != "SYSTEM VERSIONED":
        return None
    _, start, end = found[0]
    return (start, end) if start and end else ("row_start", "row_end")


def column_names(conn: pymysql.connections.Connection, schema: str, table: str) -> set[str]:
    """The columns information_schema lists for the table (never a versioned table's implicit
    row_start and row_end)."""
    return {row[0] for row in query(conn, COLUMN_NAMES_SQL, (schema, table))}


def trx_versioned_tables(conn: pymysql.connections.Connection) -> list[tuple[str, str]]:
    """Tables with transaction-precise system versioning (row start and end are transaction ids)."""
    return [(schema, table) for schema, table in query(conn, TRX_VERSIONED_SQL)]
