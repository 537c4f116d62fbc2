"""PostgreSQL as a `ChunkSource`: the watermark table and keyset chunk reads.

Every column is fetched as its text form (`column::text`, except the string types whose text
is their value anyway) through `COPY (SELECT ...) TO STDOUT (FORMAT csv)`: Arrow's CSV reader
splits it into one string array per column in C, and the same builders the log uses (`types`)
parse them column by column, so chunk rows and log rows are equal values and no Python object
is made per value. The connection's client encoding is UTF-8 (what Arrow reads).

One connection, autocommit: a watermark write commits before the next statement. Each chunk
is read in a transaction of its own (REPEATABLE READ, READ ONLY) begun after LOW committed,
so its snapshot is fresh; the transaction also records that snapshot
(`pg_current_snapshot()`), which tells which transactions the chunk could not see (see
README, "PostgreSQL: visibility and WAL order"). Plain SELECTs only: no LOCK TABLE, no FOR
UPDATE/SHARE.

`watermarks: readonly` (README, Read-only watermarks): nothing is written to the database. LOW is
the WAL insert position read before the chunk's snapshot is taken, HIGH the one read after the
chunk file is durable (the engine writes it to the chunk's HIGH file); the chunk's read view is
marked `readonly` (read_view.py: without a LOW row of the dump's own, every event before LOW whose
transaction the snapshot did not see is found by its xid alone). `setup` refuses a hot standby
and creates nothing; the publication is the administrator's (publication.py `_check`).

Round trips per chunk: LOW (WAL position and upsert in one statement), BEGIN + snapshot, the
COPY, COMMIT, HIGH + the catalog re-check the engine asks for next (one `describe` query, which also
reads the columns' `generation` the engine asks for after it).

The HIGH transaction first takes the ACCESS SHARE lock any SELECT takes on the chunk's table
(`SELECT ... LIMIT 0`; writers are not blocked by it): an ALTER TABLE holds its lock until it is
visible, so one whose commit is in the WAL before HIGH is visible to the re-check after HIGH.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import psycopg2
import psycopg2.errors
import psycopg2.extensions
import pyarrow as pa
import pyarrow.csv as pacsv

from capture.config import SourceConfig
from capture.errors import DumpInputError, UnusableTableError, table_not_found
from capture.events import Lsn, Row, TableSchema
from capture.log import get_logger
from capture.sources.base import WATERMARK_SCHEMA, WATERMARK_TABLE, Watermark, check_watermark_columns
from capture.sources.key_folds import probe
from capture.sources.postgres.catalog import (
    DESCRIBE_SQL,
    GENERATION_SQL,
    TypeCatalog,
    described,
    leaf_tables,
    partition_root,
    table_keys,
)
from capture.sources.postgres.connection import connect, parse_lsn, query, translate
from capture.sources.postgres.publication import Publication, SyncResult, unlogged
from capture.sources.postgres.read_view import PgSnapshot
from capture.sources.postgres.schema_change import changes
from capture.sources.postgres.sql import chunk_select, duplicate_select, key_after_select, keys_select, qualified, quote
from capture.sources.postgres.types import ClampedKeys, ColumnBuilder, array_literal
from capture.sources.table_keys import check_named_keys, duplicate_key_error

log = get_logger(__name__)

WATERMARKS = qualified(WATERMARK_SCHEMA, WATERMARK_TABLE)
WATERMARK_DDL = f"""CREATE TABLE IF NOT EXISTS {WATERMARKS} (
  slot varchar(255) NOT NULL PRIMARY KEY,
  dump_id varchar(64) NOT NULL,
  table_name varchar(200) NOT NULL,
  chunk integer NOT NULL,
  kind varchar(4) NOT NULL CHECK (kind IN ('LOW', 'HIGH')),
  watermark_id varchar(64) NOT NULL,
  written_at timestamptz NOT NULL DEFAULT clock_timestamp()
)"""
UNLOGGED_SQL = (
    "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = %s AND c.relname = %s AND c.relpersistence = 'u'"
)
WATERMARK_UPSERT = (
    f"INSERT INTO {WATERMARKS} (slot, dump_id, table_name, chunk, kind, watermark_id, written_at)"
    " VALUES (%s, %s, %s, %s, %s, %s, clock_timestamp()) ON CONFLICT (slot) DO UPDATE SET"
    " dump_id = EXCLUDED.dump_id, table_name = EXCLUDED.table_name, chunk = EXCLUDED.chunk,"
    " kind = EXCLUDED.kind, watermark_id = EXCLUDED.watermark_id, written_at = EXCLUDED.written_at"
)
# LOW: the WAL insert position read BEFORE the upsert writes (the CTE is materialised once, when the
# INSERT pulls its row, i.e. before the row is written), returned by the same statement
WATERMARK_LOW_UPSERT = (
    "WITH position AS MATERIALIZED (SELECT pg_current_wal_insert_lsn()::text AS lsn) "
    f"INSERT INTO {WATERMARKS} (slot, dump_id, table_name, chunk, kind, watermark_id, written_at)"
    " SELECT %s, %s, %s, %s, %s, %s, clock_timestamp() FROM position ON CONFLICT (slot) DO UPDATE SET"
    " dump_id = EXCLUDED.dump_id, table_name = EXCLUDED.table_name, chunk = EXCLUDED.chunk,"
    " kind = EXCLUDED.kind, watermark_id = EXCLUDED.watermark_id, written_at = EXCLUDED.written_at"
    " RETURNING (SELECT lsn FROM position)"
)
_CSV_PARSE = pacsv.ParseOptions(newlines_in_values=True, ignore_empty_lines=False)
_UNREAD: Any = object()  # `generation`: no describe since the last watermark read it


class PostgresChunkSource:
    def __init__(self, name: str, config: SourceConfig) -> None:
        self.name = name
        self.config = config
        self._builders: dict[str, tuple[list[ColumnBuilder], list[bool]]] = {}
        self._bare: dict[str, dict[str, str]] = {}  # fingerprint -> key column -> type without typmod
        self._conn = connect(config)
        self._conn.set_client_encoding("UTF8")  # COPY's bytes are read as UTF-8
        self._types = TypeCatalog(self._conn)
        # (schema, table) -> DESCRIBE_SQL's rows, read in the round trip that committed the last chunk
        self._after_chunk: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
        # (schema, table) -> the generation read with the last describe() since the last watermark (`generation`)
        self._described_generation: dict[tuple[str, str], str | None] = {}
        self.last_snapshot: str | None = None  # pg_current_snapshot() of the last chunk read
        self._publication = Publication(name, config)
        self._published: SyncResult | None = None  # the last sync: which captured tables the log covers
        self._before_low = 0  # pg_current_wal_insert_lsn() before the last LOW watermark
        self.readonly = config.watermarks == "readonly"
        self._position: int | None = None  # readonly: the encoded LSN the last watermark stands at
        self._chunk_end: list[str] | None = None  # the last chunk's last key, as text
        self._clamped = ClampedKeys(name, config.clamped_keys, DumpInputError)  # warns once per table and column
        self._clamped_rows = False  # the last SELECT's keys: one landed as another value (`clamped_keys`)

    def _run(self, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
        try:
            return query(self._conn, sql, args)
        except psycopg2.errors.InsufficientPrivilege:
            raise
        except psycopg2.Error as exc:
            raise translate(exc, self.config) from exc

    def _watermark_columns(self) -> set[str]:
        rows = self._run(
            # the catalog, not information_schema: that shows only columns the user holds a privilege on
            "SELECT a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped",
            (WATERMARK_SCHEMA, WATERMARK_TABLE),
        )
        return {row[0] for row in rows}

    def setup(self) -> None:
        """Create the watermark table when it is missing (check its columns when it exists), then
        create the capture's publication or bring it in step with the captured tables and the
        watermark table (`publication.Publication.sync`); the replication slot is created by
        capture's first start, which then reads it at once."""
        self.check_keys()
        if self.readonly:
            self._readonly_setup()
            return
        found = self._watermark_columns()
        if not found:
            try:
                self._run(f"CREATE SCHEMA IF NOT EXISTS {quote(WATERMARK_SCHEMA)}")
                self._run(WATERMARK_DDL)
            except psycopg2.errors.InsufficientPrivilege:
                raise DumpInputError(
                    f"source {self.name!r}: user {self.config.user!r} may not create the watermark table "
                    f'{WATERMARK_SCHEMA}.{WATERMARK_TABLE}: GRANT CREATE ON DATABASE "{self.config.database}" TO '
                    f'"{self.config.user}" (or have an admin run `logtide setup`)'
                ) from None
            found = self._watermark_columns()
        check_watermark_columns(self.name, found)
        published = self._sync_publication()
        if not published.covers(f"{WATERMARK_SCHEMA}.{WATERMARK_TABLE}"):
            raise DumpInputError(
                f"source {self.name!r}: {WATERMARK_SCHEMA}.{WATERMARK_TABLE} is not in publication "
                f"{self._publication.name!r}, so no watermark would reach the log: "
                + (published.problem or "see the publication.* warning above for the statement to run")
            )

    def _readonly_setup(self) -> None:
        """`watermarks: readonly`: nothing is created; the server must be a primary (README, Read-only
        watermarks: why not a hot standby) and the administrator's publication must exist."""
        if self._run("SELECT pg_is_in_recovery()")[0][0]:
            raise DumpInputError(
                f"source {self.name!r} cannot be dumped with watermarks: readonly: this server is a hot standby "
                "(pg_is_in_recovery()). PostgreSQL 15 cannot decode logically on a standby, so capture reads the "
                "primary while the chunks would be read here, and Logtide places a read-only chunk by the "
                "primary's snapshot rules (its xmin/xmax/in-progress list and WAL insert position), which a "
                "standby's snapshot does not follow (README, Read-only watermarks); point the source at the primary"
            )
        published = self._sync_publication()
        if published.problem:
            raise DumpInputError(f"source {self.name!r}: {published.problem}")

    def _sync_publication(self) -> SyncResult:
        self._published = published = self._publication.sync(self._conn)
        if published.problem:
            log.warning("setup.publication_unusable", source=self.name, problem=published.problem)
        return published

    def check_keys(self) -> None:
        named = check_named_keys(self.name, self.config, lambda schema, table: table_keys(self._conn, schema, table))
        self._publication.check_named_keys(self._conn, list(named))

    def tables(self) -> list[tuple[str, str]]:
        """The captured tables; the publication is brought in step first (a dump needs the log to
        cover its tables, and a table created since capture's last sync is not yet covered)."""
        self._after_chunk.clear()  # a new plan: describe() reads the catalog afresh
        self._sync_publication()
        # partitions, not partitioned tables: the log carries a partition's changes under its own name
        return [(s, t) for s, t, root in leaf_tables(self._conn) if self.config.captures_partition(s, t, root)]

    def check_dumpable(self, table: TableSchema, start: Row | None, stop: Row | None) -> None:
        """A table the publication does not cover (its changes are not in the log, so a chunk could
        not be reconciled), or a key named in the configuration that two rows share."""
        name = table.qualified_name
        published = self._published
        if published is not None and not published.covers(name):
            root = partition_root(self._conn, (table.schema, table.table))
            if root is not None and (published.covers(f"{root[0]}.{root[1]}") or self._publishes(table)):
                if self._run(UNLOGGED_SQL, (table.schema, table.table)):  # no WAL, so no change is decoded
                    raise UnusableTableError(name, *unlogged(table.schema, table.table))
                return self._check_named_key(table, start, stop)  # published as a partition of a published table
            reason, fix = published.left_out.get(
                name,
                (
                    f"is not in publication {self._publication.name!r} (its changes are not in the log)",
                    published.problem or "see the publication.* lines above for why it could not be added",
                ),
            )
            raise UnusableTableError(name, reason, fix)
        self._check_named_key(table, start, stop)

    def _publishes(self, table: TableSchema) -> bool:
        """Whether the publication publishes partition `table` itself (listed by name, or through its schema:
        `ADD TABLES IN SCHEMA`) while its partitioned table is not published: pg_publication_tables names
        the partitions whose changes pgoutput sends (publish_via_partition_root off, which capture checks).
        On main such a partition was skipped as 'not in publication' although its changes land."""
        return bool(
            self._run(
                "SELECT 1 FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s AND tablename = %s",
                (self._publication.name, table.schema, table.table),
            )
        )

    def _check_named_key(self, table: TableSchema, start: Row | None, stop: Row | None) -> None:
        name = table.qualified_name
        if self.config.named_key(table.schema, table.table) != table.key:
            return
        start, stop = _bindable(table, start), _bindable(table, stop)
        rows = self._run(*duplicate_select(table.schema, table.table, table.key, start, stop))
        if rows:
            raise duplicate_key_error(self.name, name, table.key, rows[0][0] if len(table.key) == 1 else rows[0])

    def describe(self, schema: str, table: str) -> TableSchema:
        """The table as the catalog has it now; right after a HIGH, as it was just after HIGH
        committed (read in that round trip: the engine's re-check for schema changes)."""
        rows = self._after_chunk.pop((schema, table), None)
        if rows is None:
            rows = self._run(DESCRIBE_SQL, (schema, table))
        if not rows:
            spelled = self._run(
                "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE lower(n.nspname) = lower(%s) AND lower(c.relname) = lower(%s) AND c.relkind IN ('r', 'p')"
                " LIMIT 2",
                (schema, table),
            )
            raise table_not_found(schema, table, f"{spelled[0][0]}.{spelled[0][1]}" if len(spelled) == 1 else None)
        named = self.config.named_key(schema, table)
        table_schema, builders, as_text = described(self._types, schema, table, rows, self.name, named)
        self._described_generation[(schema, table)] = rows[0][4]
        self._builders[table_schema.fingerprint] = (builders, as_text)
        return table_schema

    def estimate_rows(self, table: TableSchema) -> int:
        """The planner's row count for the table, without a scan: the statistics' rows per page
        times its current pages, or, where it was never analysed (pg_class.reltuples is -1), its
        pages times the rows a page holds at the width the column types suggest."""
        plan = self._run(f"EXPLAIN (FORMAT JSON) SELECT * FROM {qualified(table.schema, table.table)}")[0][0]
        return int(plan[0]["Plan"]["Plan Rows"])

    def write_watermark(self, mark: Watermark, table: TableSchema | None = None) -> None:
        args = (f"{mark.dump_id}/{mark.table}", mark.dump_id, mark.table, mark.chunk, mark.kind, mark.id)
        self._after_chunk.clear()  # only the describe() right after a HIGH may use it
        self._described_generation.clear()  # nor a generation read before this watermark
        if self.readonly:
            self._readonly_watermark(mark, table)
            return
        try:
            if mark.kind == "LOW":
                # a transaction that commits before LOW but after the position read first got its xid after
                # that position: reconciliation looks for invisible ones from there (README: visibility and
                # WAL order)
                self._before_low = parse_lsn(self._run(WATERMARK_LOW_UPSERT, args)[0][0])
            elif table is None:
                self._run(WATERMARK_UPSERT, args)
            else:
                sql = (
                    f"BEGIN; SELECT FROM {qualified(table.schema, table.table)} LIMIT 0; {WATERMARK_UPSERT}; "
                    f"COMMIT; {DESCRIBE_SQL}"
                )
                try:
                    rows = self._run(sql, (*args, table.schema, table.table))
                except Exception:
                    with contextlib.suppress(psycopg2.Error):  # a lost connection has nothing to roll back
                        query(self._conn, "ROLLBACK")
                    raise
                self._after_chunk[(table.schema, table.table)] = rows
        except psycopg2.errors.InsufficientPrivilege:
            raise DumpInputError(
                f"source {self.name!r}: user {self.config.user!r} may not write the watermark table: "
                f'GRANT USAGE ON SCHEMA {WATERMARK_SCHEMA} TO "{self.config.user}"; GRANT INSERT, UPDATE ON '
                f'{WATERMARK_SCHEMA}.{WATERMARK_TABLE} TO "{self.config.user}"'
            ) from None

    def _readonly_watermark(self, mark: Watermark, table: TableSchema | None) -> None:
        """`watermarks: readonly`: nothing is written. LOW: the WAL insert position, read before the
        chunk's snapshot is taken (`_rows` begins it in the next round trip). HIGH: the insert
        position read after the chunk file is durable, under the ACCESS SHARE lock a SELECT takes
        (as the table-watermark HIGH: an ALTER committed before it is seen by the re-check after).
        Both stand just before their WAL position, at (position - 1, 0): WAL records start at 8-byte
        aligned positions, so no event has that major, a commit record starting exactly at the
        position is in the window (LOW) or after the chunk (HIGH), and one starting before it is
        before LOW (judged by the snapshot) or in the window (HIGH)."""
        if mark.kind == "LOW" or table is None:
            position = parse_lsn(self._run("SELECT pg_current_wal_insert_lsn()::text")[0][0])
        else:
            try:
                position = parse_lsn(self._run(
                    f"BEGIN READ ONLY; SELECT FROM {qualified(table.schema, table.table)} LIMIT 0; "
                    "SELECT pg_current_wal_insert_lsn()::text"
                )[0][0])  # fmt: skip
                rows = self._run(f"COMMIT; {DESCRIBE_SQL}", (table.schema, table.table))
            except Exception:
                with contextlib.suppress(psycopg2.Error):
                    query(self._conn, "ROLLBACK")
                raise
            self._after_chunk[(table.schema, table.table)] = rows
        if mark.kind == "LOW":
            self._before_low = position - 1  # the read view's lookback: LOW itself
        self._position = Lsn(position - 1).encode()

    def _rows(
        self, table: TableSchema, sql: str, params: list[Any], key_text: bool = False, chunk: bool = False
    ) -> pa.StructArray:
        """The chunk in a transaction of its own: a snapshot taken now, after LOW committed. With
        `key_text` the select list ends with the key columns' text: checked (`ClampedKeys`), and the
        last row's kept for `chunk_end` when `chunk` (a chunk, not a list of keys)."""
        out = io.BytesIO()
        try:
            with self._conn.cursor() as cursor:
                # one round trip: the snapshot is taken as soon after LOW as the server can
                cursor.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; SELECT pg_current_snapshot()::text")
                self.last_snapshot = cursor.fetchone()[0]
                try:
                    select = cursor.mogrify(sql, params)
                    cursor.copy_expert(b"COPY (" + select + b") TO STDOUT (FORMAT csv)", out)
                except BaseException:
                    cursor.execute("ROLLBACK")
                    raise
                cursor.execute("COMMIT")
        except psycopg2.Error as exc:
            raise translate(exc, self.config) from exc
        builders = self._builders[table.fingerprint][0]
        texts = _csv_columns(out.getvalue(), len(builders) + (len(table.key) if key_text else 0))
        if key_text:
            keys, texts = texts[len(builders) :], texts[: len(builders)]
            self._clamped_rows = self._clamped.check(table, keys, table.key_indexes)
            if chunk:
                self._chunk_end = [k[-1].as_py() for k in keys] if len(keys[0]) else None
        self._clamped.check_arrays(table, texts)  # before anything of the chunk is written
        arrays = [build(text) for text, build in zip(texts, builders, strict=True)]
        return pa.StructArray.from_arrays(arrays, fields=list(table.row_type))

    def select_chunk(
        self,
        table: TableSchema,
        after: Row | None,
        start: Row | None,
        stop: Row | None,
        limit: int,
        after_source: list[str] | None = None,
    ) -> pa.StructArray:
        """The chunk, with each key column's text: the next one goes on after the last row's text
        cast to the key's types (`after_source`), not after its landed key, which may be NULL or
        clamped (README, PostgreSQL: types)."""
        as_text = self._builders[table.fingerprint][1]
        types = {c.name: c.source_type for c in table.columns}
        after, start, stop = (_bindable(table, bound) for bound in (after, start, stop))
        sql, params = chunk_select(
            table.schema, table.table, table.names, table.key, after, start, stop, limit, as_text,
            [types[k] for k in table.key], after_source,
        )  # fmt: skip
        self._chunk_end = None
        return self._rows(table, sql, params, key_text=True, chunk=True)

    def chunk_end(self) -> list[str] | None:
        """The last row of the last chunk: its key columns' text (`column::text`)."""
        return self._chunk_end

    def clamped_keys(self) -> bool:
        """Whether the last `select_chunk` or `select_keys` returned a key value that lands as
        another value (`clamped_keys: accept`; `ClampedKeys.check`)."""
        return self._clamped_rows

    def select_keys(self, table: TableSchema, keys: list[Row]) -> pa.StructArray:
        """Rows of `keys` (landed values, `landed_keys`): array values bound as their text, cast to
        the column's type (psycopg2's ARRAY[...] would be text[] for text-like elements)."""
        if not keys:
            return pa.array([], type=table.row_type)
        as_text = self._builders[table.fingerprint][1]
        types = {c.name: c for c in table.columns}
        arrays = [pa.types.is_list(types[k].arrow_type) for k in table.key]
        if any(arrays):
            bare = self._bare_types(table)  # a typmod would cut 'abcd' to the key 'abc' (varchar(3)[])
            casts = [bare[k] if a else None for k, a in zip(table.key, arrays, strict=True)]
            keys = [tuple(array_literal(v) if a else v for v, a in zip(k, arrays, strict=True)) for k in keys]
        else:
            casts = None
        sql, params = keys_select(
            table.schema, table.table, table.names, table.key, keys, as_text, key_text=True, casts=casts
        )
        return self._rows(table, sql, params, key_text=True)  # the keys' text: checked as a chunk's

    def landed_keys(self, table: TableSchema, keys: list[Row]) -> list[Row]:
        """A key list's values given as text or lists, for columns that land as lists or strings, as the
        database reads and spells them: arrays ('{1,2}', '[0:2]={1,2,3}') checked as a chunk's keys
        (`ClampedKeys`: refused before anything is written when the value would not land as
        itself) and parsed as the log parses them; other types in their output's spelling (uuid
        'A0EE...' as 'a0ee...', int4range '[1,4]' as '[1,5)', inet '10.0.0.1/32' as '10.0.0.1';
        text and citext as given). That is the landed value the chunk metadata, the merge's repair
        and `select_keys` use. Values of other columns stay as given (capture/dump/keys.py typed them)."""
        columns = {c.name: (i, c) for i, c in enumerate(table.columns)}
        builders = self._builders[table.fingerprint][0]
        out = [list(k) for k in keys]
        bare = self._bare_types(table)
        for part, name in enumerate(table.key):
            index, column = columns[name]
            given = [  # JSON lists too: their elements must be the element type's (an enum's labels)
                (n, array_literal(k[part]) if isinstance(k[part], list) else k[part])
                for n, k in enumerate(keys)
                if isinstance(k[part], (str, list))
            ]
            if not (pa.types.is_list(column.arrow_type) or pa.types.is_string(column.arrow_type)) or not given:
                continue
            cast = bare[name].replace("%", "%%")
            try:  # the type's output, as the log and a chunk give it (inet: '::1', where ::text says '::1/128')
                texts = [r[0] for r in self._run(
                    f"SELECT format('%%s', u.v::{cast}) FROM unnest(%s::text[]) WITH ORDINALITY u(v, n) ORDER BY u.n",
                    ([v for _, v in given],),
                )]  # fmt: skip
            except psycopg2.Error as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise DumpInputError(
                    f"key value for column {name!r} is not a valid {column.source_type}: {first}"
                ) from None
            text = pa.array(texts, pa.string())
            self._clamped.check(table, [text], [index])
            try:
                landed = builders[index](text).to_pylist()
            except (ValueError, pa.ArrowException) as exc:  # '{1.234}' for numeric(10,2)[]: no such key
                raise DumpInputError(
                    f"key value for column {name!r} is not a {column.source_type} value the column can hold: {exc}"
                ) from None
            for (n, _), value in zip(given, landed, strict=True):
                out[n][part] = value
        return [tuple(k) for k in out]

    def _bare_types(self, table: TableSchema) -> dict[str, str]:
        """The key columns' types without their typmod (`format_type(oid, NULL)`: `character varying`,
        `"bit"`, `numeric[]`): a cast to `varchar(3)`, `bit(4)` or `numeric(10,2)[]` would cut, pad or
        round a given value into another key ('abcd' into 'abc'), where a comparison with the column
        takes it unchanged."""
        found = self._bare.get(table.fingerprint)
        if found is None:
            found = self._bare[table.fingerprint] = dict(self._run(
                "SELECT a.attname, format_type(a.atttypid, NULL) FROM pg_attribute a WHERE a.attrelid = %s"
                " AND a.attname = ANY(%s)",
                (table.relation, list(table.key)),
            ))  # fmt: skip
        return found

    def value_changes(self, before: TableSchema, after: TableSchema) -> list[str]:
        """What gave the rows of `before` new values without row events, as capture judges a Relation message
        (schema_change.changes): columns added with a DEFAULT, renamed, retyped in a way that may change values
        (not a longer varchar); a column added without one reads NULL in every row, as chunks read before it."""
        old = {c.name: c.source_type for c in before.columns}
        new = {c.name: c.source_type for c in after.columns}
        return changes(self._conn, after.relation, old, new)

    def generation(self, table: TableSchema) -> str | None:
        """The transaction that last wrote each column's pg_attribute row: ALTER COLUMN ... TYPE rewrites it
        (with a `USING` that keeps the type name too, which no column type shows), and so does a key column's
        new collation (the chunks so far were cut in the old order); TRUNCATE, VACUUM FULL and CLUSTER do
        not (their relfilenode changes, the values do not). A JSON object of column name -> xmin: the engine
        compares the columns both generations hold, also where other columns changed in the same DDL. Read
        after HIGH, so a rewrite committed before HIGH is seen; a longer varchar, a SET DEFAULT or SET
        STORAGE counts too (the dump reads the table again, needlessly: no catalog tells them from a USING).
        The engine asks right after it described the table: the describe's round trip read it (after HIGH,
        HIGH's own), so no query runs here then; otherwise one does."""
        read = self._described_generation.pop((table.schema, table.table), _UNREAD)
        if read is not _UNREAD:
            return read
        rows = self._run(GENERATION_SQL.format(relation="%s"), (table.relation,))
        return rows[0][0] if rows else None

    def key_folds(self, table: TableSchema) -> tuple[str, ...]:
        """Per key column, the folds the database proves on it (capture/sources/key_folds.py): the probes
        cast to the column's type without its typmod, under the column's collation (citext, a
        nondeterministic ICU collation, bpchar's blanks); '' for columns that do not land as text."""
        rows = self._run(
            "SELECT a.attname, format_type(a.atttypid, NULL), CASE WHEN a.attcollation = 0 THEN NULL ELSE"
            " quote_ident(n.nspname) || '.' || quote_ident(c.collname) END FROM pg_attribute a"
            " LEFT JOIN pg_collation c ON c.oid = a.attcollation LEFT JOIN pg_namespace n ON n.oid = c.collnamespace"
            " WHERE a.attrelid = %s AND a.attname = ANY(%s)",
            (table.relation, list(table.key)),
        )
        found = {name: (type_, collation) for name, type_, collation in rows}
        arrow = {c.name: c.arrow_type for c in table.columns}
        folds = []
        for name in table.key:
            if name not in found or not pa.types.is_string(arrow[name]):
                folds.append("")
                continue
            type_, collation = found[name]
            typed = f"%s::{type_}" + (f" COLLATE {collation}" if collation else "")

            def equal(a: str, b: str, typed: str = typed) -> bool | None:
                try:
                    return query(self._conn, f"SELECT {typed} = {typed}", (a, b))[0][0]
                except psycopg2.Error:  # not a value of the type (uuid, ranges, enums): no fold
                    return None

            folds.append(probe(equal))
        return tuple(folds)

    def key_after(self, table: TableSchema, key: Row, other: Row) -> bool:
        params = [*_bindable(table, key), *_bindable(table, other)]  # type: ignore[misc]
        return bool(self._run(key_after_select(table.schema, table.table, table.key), params)[0][0])

    def read_view(self) -> PgSnapshot | None:
        """The last chunk's snapshot and the WAL position just before its LOW watermark."""
        if self.last_snapshot is None:
            return None
        return PgSnapshot.parse(self.last_snapshot, Lsn(self._before_low).encode(), self.readonly)

    def finish_reads(self) -> None:
        """Each chunk read commits its own transaction already."""

    def log_position(self) -> int | None:
        """Read-only: the encoded LSN the last watermark stands at (LOW: just before the WAL insert
        position read before the chunk's snapshot; HIGH: just before the one read after its file)."""
        return self._position if self.readonly else None

    def place_high(self, high: int, frontier: int | None) -> int:
        """Above the landed frontier too: on an idle server capture's frontier already stands just
        before the WAL end HIGH was read at (the keepalive's position), and steps past a HIGH placed
        above it at its next idle keepalive; so the window closes without a commit, and a merge
        that read the frontier before the HIGH file existed cannot have passed it (the engine's
        `_passed` check covers a frontier that moved in between)."""
        return high if frontier is None else max(high, frontier + 1)

    def server_identity(self) -> None:
        """No server check: PostgreSQL's read-only dump and capture read the same primary by config."""
        return None

    def close(self) -> None:
        self._conn.close()


def _bindable(table: TableSchema, key: Row | None) -> Row | None:
    """A key bound as a parameter: array values (lists, landed or given as JSON) as their text,
    which PostgreSQL resolves to the column's type where psycopg2's ARRAY[...] would be text[] for
    text-like elements; a range's bounds given as text stay text."""
    if key is None or not any(isinstance(v, list) for v in key):
        return key
    return tuple(array_literal(v) if isinstance(v, list) else v for v in key)


def _csv_columns(data: bytes, width: int) -> list[pa.Array]:
    """COPY's CSV -> one string array per column. CSV writes NULL as an unquoted empty field and
    an empty string as `""`, which these options tell apart."""
    if not data:
        return [pa.array([], pa.string()) for _ in range(width)]
    names = [f"c{i}" for i in range(width)]
    table = pacsv.read_csv(
        io.BytesIO(data),
        read_options=pacsv.ReadOptions(column_names=names, use_threads=False, block_size=1 << 24),
        parse_options=_CSV_PARSE,
        convert_options=pacsv.ConvertOptions(
            column_types=dict.fromkeys(names, pa.string()),
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
            null_values=[""],
        ),
    )
    return [column.combine_chunks() for column in table.columns]
