"""MySQL/MariaDB as a `ChunkSource`: the watermark table and keyset chunk reads.

Rows become Arrow columns directly: DECIMAL and temporal values stay text in the driver and
are parsed by Arrow's casts, which is what makes a dump about as fast as a plain SELECT loop.

One connection, autocommit, READ COMMITTED, time_zone '+00:00': a watermark write commits
before the next statement, and each chunk SELECT is a statement of its own, so it reads a
snapshot taken after the LOW watermark committed. Plain SELECTs only: no LOCK TABLES, no
FOR UPDATE/SHARE. With `watermarks: readonly` nothing is written: LOW begins the chunk's
consistent snapshot, HIGH ends it (capture/sources/mysql/snapshot.py).
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import pyarrow as pa
import pymysql

from capture.config import SourceConfig
from capture.errors import ChunkReadAgain, DumpInputError
from capture.events import MINOR_BITS, Lsn, Row, TableSchema
from capture.sources.base import WATERMARK_SCHEMA, WATERMARK_TABLE, Watermark, check_watermark_columns
from capture.sources.key_folds import probe
from capture.sources.mysql import snapshot
from capture.sources.mysql.catalog import base_tables, describe, table_keys
from capture.sources.mysql.connection import connection_settings, query, translate
from capture.sources.mysql.member_keys import (
    Numbering,
    empty_members,
    member_numbering,
    numbered,
    with_numbers,
)
from capture.sources.mysql.sql import chunk_select, duplicate_select, key_after_select, keys_select, qualified, quote
from capture.sources.mysql.types import ENUM_ERROR_VALUE, ColumnBuilder, select_conversions
from capture.sources.table_keys import check_named_keys, duplicate_key_error

ER_DBACCESS_DENIED, ER_TABLEACCESS_DENIED = 1044, 1142
KEPT_ENDS = 4  # chunk ends remembered a table: a chunk read again goes on after the one before it
ER_TABLE_DEF_CHANGED = 1412  # a consistent snapshot reading a table re-created after it began
WATERMARK_DDL = f"""CREATE TABLE IF NOT EXISTS {qualified(WATERMARK_SCHEMA, WATERMARK_TABLE)} (
  slot VARCHAR(255) NOT NULL PRIMARY KEY COMMENT 'dump id / table: one row per dump and table',
  dump_id VARCHAR(64) NOT NULL,
  table_name VARCHAR(200) NOT NULL,
  chunk INT NOT NULL,
  kind ENUM('LOW','HIGH') NOT NULL,
  watermark_id CHAR(36) NOT NULL,
  written_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB CHARACTER SET utf8mb4 COMMENT 'Logtide DBLog watermarks'"""
WATERMARK_UPSERT = (
    f"INSERT INTO {qualified(WATERMARK_SCHEMA, WATERMARK_TABLE)}"
    " (slot, dump_id, table_name, chunk, kind, watermark_id, written_at)"
    " VALUES (%s, %s, %s, %s, %s, %s, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE"
    " dump_id = VALUES(dump_id), table_name = VALUES(table_name), chunk = VALUES(chunk),"
    " kind = VALUES(kind), watermark_id = VALUES(watermark_id), written_at = VALUES(written_at)"
)


class MySqlChunkSource:
    def __init__(self, name: str, config: SourceConfig) -> None:
        self.name = name
        self.config = config
        self._builders: dict[str, list[ColumnBuilder]] = {}
        self._numbering: dict[str, Numbering] = {}  # ENUM / SET key columns by table fingerprint (`member_keys`)
        self._sets: dict[str, dict[str, int]] = {}  # SET columns with a '' member (`member_keys.empty_members`)
        self._ends: dict[str, dict[Row, Row]] = {}  # by fingerprint: recent chunks' last keys -> with numbers
        self.readonly = config.watermarks == "readonly"
        self._position: int | None = None  # readonly: where the last watermark stands in the log
        try:
            self._conn = pymysql.connect(**connection_settings(config), autocommit=True, conv=select_conversions())
        except pymysql.MySQLError as exc:
            raise translate(exc, config) from None
        self._run("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        self._run("SET SESSION time_zone = '+00:00'")

    def _run(self, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
        try:
            return query(self._conn, sql, args)
        except pymysql.MySQLError as exc:
            raise translate(exc, self.config) from exc

    def _watermark_columns(self) -> set[str]:
        rows = self._run(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (WATERMARK_SCHEMA, WATERMARK_TABLE),
        )
        return {row[0] for row in rows}

    def setup(self) -> None:
        """Create the watermark table when it is missing; check its columns when it exists.
        Read-only: check that this server's binlog can place chunks, and write nothing."""
        self.check_keys()
        if self.readonly:
            if problems := snapshot.check_server(self._run):
                raise DumpInputError(
                    f"source {self.name!r} cannot be dumped with watermarks: readonly:\n  - " + "\n  - ".join(problems)
                )
            return
        found = self._watermark_columns()
        if not found:
            try:
                self._run(f"CREATE DATABASE IF NOT EXISTS {quote(WATERMARK_SCHEMA)}")
                self._run(WATERMARK_DDL)
            except pymysql.MySQLError as exc:
                if exc.args and exc.args[0] in (ER_DBACCESS_DENIED, ER_TABLEACCESS_DENIED):
                    raise DumpInputError(
                        f"source {self.name!r}: user {self.config.user!r} may not create the watermark table "
                        f"{WATERMARK_SCHEMA}.{WATERMARK_TABLE}: GRANT CREATE, INSERT, UPDATE ON "
                        f"{WATERMARK_SCHEMA}.* TO {self.config.user!r} (or have an admin run `logtide setup`)"
                    ) from None
                raise
            found = self._watermark_columns()
        check_watermark_columns(self.name, found)

    def tables(self) -> list[tuple[str, str]]:
        return [t for t in base_tables(self._conn) if self.config.captures(*t)]

    def check_keys(self) -> None:
        check_named_keys(self.name, self.config, lambda schema, table: table_keys(self._conn, schema, table))

    def describe(self, schema: str, table: str) -> TableSchema:
        described, builders = describe(self._conn, schema, table, self.name, self.config.named_key(schema, table))
        self._builders[described.fingerprint] = builders
        self._numbering[described.fingerprint] = member_numbering(self._conn, described)
        self._sets[described.fingerprint] = empty_members(self._conn, described)
        return described

    def _bound(self, table: TableSchema, key: Row | None, *, lowest: bool, given: bool = True) -> Row | None:
        """A chunk bound as the server compares it with the key columns (`member_keys`), by its text."""
        numbering = self._numbering.get(table.fingerprint, {})
        try:
            return numbered(self._conn, table, key, numbering, lowest=lowest, given=given)
        except pymysql.MySQLError as exc:
            raise translate(exc, self.config) from exc

    def _wide(self, table: TableSchema) -> list[str]:
        """The SET key columns of 64 members, compared by their numbers read unsigned (`sql._number`)."""
        numbering = self._numbering.get(table.fingerprint, {})
        return [table.key[at] for at, m in numbering.items() if m.kind == "set" and len(m.members) == 64]

    def check_dumpable(self, table: TableSchema, start: Row | None, stop: Row | None) -> None:
        """A key named in the configuration: refuse it when two rows in [start, stop] share it."""
        start, stop = self._bound(table, start, lowest=True), self._bound(table, stop, lowest=False)
        if self.config.named_key(table.schema, table.table) != table.key:
            return
        rows = self._run(*duplicate_select(table.schema, table.table, table.key, start, stop, self._wide(table)))
        if rows:
            value = rows[0][0] if len(table.key) == 1 else rows[0]
            raise duplicate_key_error(self.name, table.qualified_name, table.key, value)

    def estimate_rows(self, table: TableSchema) -> int:
        rows = self._run(
            "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (table.schema, table.table),
        )
        return int(rows[0][0] or 0) if rows else 0

    def write_watermark(self, mark: Watermark, table: TableSchema | None = None) -> None:
        if self.readonly:
            if mark.kind == "LOW":
                self._position = snapshot.open_snapshot(self._run).encode()
            else:
                self.finish_reads()  # done already when the engine called it: a no-op then
                self._position = snapshot.binlog_end(self._run).encode()
            return
        try:
            self._run(
                WATERMARK_UPSERT,
                (f"{mark.dump_id}/{mark.table}", mark.dump_id, mark.table, mark.chunk, mark.kind, mark.id),
            )
        except pymysql.MySQLError as exc:
            if exc.args and exc.args[0] in (ER_DBACCESS_DENIED, ER_TABLEACCESS_DENIED):
                raise DumpInputError(
                    f"source {self.name!r}: user {self.config.user!r} may not write the watermark table: "
                    f"GRANT INSERT, UPDATE ON {WATERMARK_SCHEMA}.* TO {self.config.user!r}"
                ) from None
            raise

    def _rows(self, table: TableSchema, sql: str, params: list[Any], numbers: int = 0) -> pa.StructArray:
        """The rows as Arrow; `numbers` trailing columns: the last row's ENUM / SET key numbers, kept
        as the bound to go on after it (`_bound`)."""
        try:
            rows = self._run(sql, params)
        except pymysql.err.OperationalError as exc:
            if exc.args and exc.args[0] == ER_TABLE_DEF_CHANGED:  # read-only: a TRUNCATE after the snapshot
                raise ChunkReadAgain(f"{table.qualified_name}: {exc.args[1]}") from exc
            raise
        arrays = [build(list(map(itemgetter(i), rows))) for i, build in enumerate(self._builders[table.fingerprint])]
        chunk = pa.StructArray.from_arrays(arrays, fields=list(table.row_type))
        check_landable_key(table, chunk)
        if numbers and rows:
            last = tuple(chunk.field(k)[-1].as_py() for k in table.key)
            ends = self._ends.setdefault(table.fingerprint, {})
            ends.pop(last, None)
            ends[last] = with_numbers(last, self._numbering[table.fingerprint], rows[-1][-numbers:])
            for old in list(ends)[:-KEPT_ENDS]:
                del ends[old]
        return chunk

    def select_chunk(
        self,
        table: TableSchema,
        after: Row | None,
        start: Row | None,
        stop: Row | None,
        limit: int,
        after_source: list[str] | None = None,
    ) -> pa.StructArray:
        # a chunk's last key: by the numbers read with it; a resumed dump's saved key: by its text
        known = None if after is None else self._ends.get(table.fingerprint, {}).get(tuple(after))
        after = known or self._bound(table, after, lowest=True, given=False)
        start, stop = self._bound(table, start, lowest=True), self._bound(table, stop, lowest=False)
        numbers = [table.key[at] for at in sorted(self._numbering.get(table.fingerprint, {}))]
        sql, params = chunk_select(
            table.schema, table.table, table.names, table.key, after, start, stop, limit, _floats(table), numbers,
            _enums(table), self._sets.get(table.fingerprint, {}), self._wide(table),
        )  # fmt: skip
        return self._rows(table, sql, params, len(numbers))

    def chunk_end(self) -> None:
        """Landed keys are the values (a zero date is refused: `check_landable_key`); an ENUM / SET
        key's numbers are kept in `_ends`, and found again from its text after a restart."""
        return None

    def clamped_keys(self) -> bool:
        """Every key lands as itself (a zero date in a key is refused; the ENUM error value lands as
        ' ', a SET with a '' member as its members joined: README, Keys and their order)."""
        return False

    def landed_keys(self, table: TableSchema, keys: list[Row]) -> list[Row]:
        """Keys typed by capture/dump/keys.py are the landed values already."""
        return keys

    def select_keys(self, table: TableSchema, keys: list[Row]) -> pa.StructArray:
        if not keys:
            return pa.array([], type=table.row_type)
        enums = _enums(table)
        at = [n for n, k in enumerate(table.key) if k in enums]  # the error value by its number (`types`)
        keys = [tuple(0 if n in at and v == ENUM_ERROR_VALUE else v for n, v in enumerate(k)) for k in keys]
        sets = self._sets.get(table.fingerprint, {})
        sql, params = keys_select(table.schema, table.table, table.names, table.key, keys, _floats(table), enums, sets)
        return self._rows(table, sql, params)

    def key_folds(self, table: TableSchema) -> tuple[str, ...]:
        """Per key column, the folds the server proves under the column's collation
        (capture/sources/key_folds.py: `_ci` collations fold ASCII case, PAD SPACE ones trailing
        spaces); '' for other columns (ENUM and SET keys compare by member: none)."""
        rows = self._run(
            "SELECT COLUMN_NAME, DATA_TYPE, CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLUMNS"
            " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (table.schema, table.table),
        )
        found = {r[0]: r[1:] for r in rows}
        folds = []
        for name in table.key:
            data_type, charset, collation = found.get(name, (None, None, None))
            if not charset or not collation or str(data_type).lower() in ("enum", "set"):
                folds.append("")
                continue
            typed = f"CONVERT(%s USING {charset}) COLLATE {collation}"

            def equal(a: str, b: str, typed: str = typed) -> bool | None:
                try:
                    return bool(query(self._conn, f"SELECT {typed} = {typed}", (a, b))[0][0])
                except pymysql.MySQLError:
                    return None

            folds.append(probe(equal))
        return tuple(folds)

    def key_after(self, table: TableSchema, key: Row, other: Row) -> bool:
        numbering = self._numbering.get(table.fingerprint, {})
        sql = key_after_select(table.schema, table.table, table.key, numbering)
        bounds = [*(self._bound(table, key, lowest=True) or ()), *(self._bound(table, other, lowest=False) or ())]
        return bool(self._run(sql, bounds)[0][0])

    def read_view(self) -> None:
        """Chunk reads see transactions in binlog order (preflight checks it): nothing to add."""
        return None

    def finish_reads(self) -> None:
        """Read-only: end the chunk's snapshot transaction, so that it holds the table's metadata
        lock (which an ALTER TABLE waits for) only while it reads, not while the file is written."""
        if self.readonly:
            self._run("COMMIT")  # nothing to end (a second call) is no error

    def server_identity(self) -> str | None:
        """Read-only: the server this dump reads (snapshot.server_identity); None with table watermarks."""
        return snapshot.server_identity(self._run) if self.readonly else None

    def log_position(self) -> int | None:
        """Read-only: the encoded LSN of the last watermark (LOW: the chunk's snapshot, HIGH: the
        binlog end after it); None with table watermarks."""
        return self._position if self.readonly else None

    def place_high(self, high: int, frontier: int | None) -> int:
        """The binlog end read after the chunk file, or, where capture's committed frontier already
        stands at that end, one past the frontier's minor. A heartbeat moved the frontier there (its
        minor counts heartbeat moves at one position, capture/landing/log_writer.py `advance`), and
        no event lies at that end, so any minor there names the same events. With HIGH at the bare
        end the frontier would already be past it, and the chunk read again for ever on an idle
        server; at the frontier itself, the next move (one a flush interval) would overtake it
        during the HIGH file's write now and then, and the chunk be read again (the engine's
        `_passed`). One past needs two moves for that, so the chunk closes on the second heartbeat
        commit after its HIGH."""
        if frontier is None:
            return high
        at, end = Lsn.decode(frontier), Lsn.decode(high)
        if at.major == end.major and at.minor + 1 < 1 << MINOR_BITS:
            return Lsn(end.major, at.minor + 1).encode()
        return high

    def close(self) -> None:
        self._conn.close()


def _floats(table: TableSchema) -> frozenset[str]:
    """The FLOAT columns, read as DOUBLE so that they land exactly (`sql.select_list`)."""
    return frozenset(c.name for c in table.columns if c.source_type == "float")


def _enums(table: TableSchema) -> frozenset[str]:
    """The ENUM columns, their error value read as `types.ENUM_ERROR_VALUE` (`sql.select_list`)."""
    return frozenset(c.name for c in table.columns if c.source_type == "enum")


def check_landable_key(table: TableSchema, rows: pa.StructArray) -> None:
    """Refuse a chunk with a NULL in a key column. MariaDB/MySQL key columns are NOT NULL, so it is
    a zero date (`0000-00-00`, `2020-00-00`; an sql_mode without NO_ZERO_DATE / NO_ZERO_IN_DATE
    allows them), which lands as NULL: the next chunk's `key > NULL` would return nothing and end
    a full dump there as if the table ended (whose repair then deletes the target rows past it),
    and rows with different zero dates would share one key."""
    for name in table.key:
        column = rows.field(name)
        if column.null_count:
            raise DumpInputError(
                f"{table.qualified_name}: key column {name!r} holds a zero date (a zero year, month or day, which "
                "sql_mode without NO_ZERO_DATE / NO_ZERO_IN_DATE allows) or a day its month does not have "
                "('2020-02-30', which sql_mode ALLOW_INVALID_DATES allows), which lands as NULL: the dump cannot "
                "read past it by key, and rows with different such dates would land under one key. Give those rows "
                f"real dates (UPDATE ... SET {name} = ... WHERE {name} < '0001-01-01' OR MONTH({name}) = 0 OR "
                f"DAYOFMONTH({name}) = 0 OR DAYOFMONTH({name}) > DAYOFMONTH(LAST_DAY(DATE_FORMAT({name}, "
                f"'%Y-%m-01')))), or leave {table.qualified_name} out of capture (exclude)"
            )
