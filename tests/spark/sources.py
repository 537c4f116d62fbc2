"""What the end-to-end merge test needs to know about a source database, one adapter per kind:
its private server and capture fixtures, the tables (DDL, history, target types), the random
workload on them, catching up with the log, and the source rows as the Iceberg target holds them."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import psycopg2.extras
import pytest

from capture.config import LogtideConfig, MergeConfig
from capture.landing.chunks import read_chunk_meta
from capture.landing.reader import chunk_files
from capture.sources.base import WATERMARK_SCHEMA, WATERMARK_TABLE
from tests.integration import dumping as maria
from tests.integration.postgres import dumping as pg
from tests.spark.merging import LEDGER, LEDGER_ROWS, LEDGER_TYPES, plain, source_state


@dataclass
class Table:
    name: str
    key: tuple[str, ...]
    types: dict[str, str]  # column -> its type in the Iceberg target
    workload: dict[str, Any] = field(default_factory=dict)  # Workload options (key column, key values)


@dataclass
class Source:
    """A fresh database on the session's private server, and a capture configured for it."""

    kind: str
    server: Any
    database: str
    schema: str  # the landing zone's and the merge's first name part: MariaDB's database, PostgreSQL's schema
    make_capture: Any
    tables: list[Table]
    rows: int = 2000  # in the first table before capture starts: history only the dump has
    pauses: tuple[int, int] = (10, 30)  # chunks of the first table after which the dump pauses for a merge
    watermarks: str = "table"  # the source's `watermarks`: table, or readonly

    def create(self) -> None:
        raise NotImplementedError

    def capture(self, **landing: Any) -> Any:
        raise NotImplementedError

    def workload(self, table: Table, first_free_id: int, seed: int) -> maria.Workload:
        raise NotImplementedError

    def wait_until_landed(self, capture: Any) -> None:
        raise NotImplementedError

    def state(self, table: Table) -> dict[tuple, dict[str, Any]]:
        raise NotImplementedError

    def check_log(self, capture: Any) -> None:
        """What the source's log must have shown for the test to mean what it says."""

    def merge_config(self, config: LogtideConfig, merge: MergeConfig, namespace: str) -> LogtideConfig:
        return config.model_copy(update={"merge": merge.model_copy(update={"namespace": namespace})})


class MariaDBSource(Source):
    def create(self) -> None:
        self.server.execute(LEDGER, LEDGER_ROWS.format(rows=self.rows), database=self.database)

    def capture(self, **landing: Any) -> Any:
        return self.make_capture([f"{self.database}.*"], landing=landing, watermarks=self.watermarks)

    def workload(self, table: Table, first_free_id: int, seed: int) -> maria.Workload:
        return maria.Workload(self.server, self.database, table.name, first_free_id, seed, **table.workload)

    def wait_until_landed(self, capture: Any) -> None:
        maria.wait_until_landed(self.server, capture)

    def state(self, table: Table) -> dict[tuple, dict[str, Any]]:
        return source_state(self.server, self.database, table.name, table.key)

    def check_log(self, capture: Any) -> None:
        """Read-only watermarks: no watermark row landed, every chunk carries its log position."""
        if self.watermarks == "readonly":
            assert capture.zone.read_table(WATERMARK_SCHEMA, WATERMARK_TABLE) is None
            metas = [read_chunk_meta(p) for t in self.tables for p in chunk_files(capture.zone, self.schema, t.name)]
            assert metas and all(m.low_lsn is not None for m in metas)


# -- PostgreSQL ----------------------------------------------------------------------------------

# `ledger` has the types; its `doc` is stored out of line (STORAGE EXTERNAL, > 2 kB) and the
# workload's updates leave it alone, so update events do not carry it (REPLICA IDENTITY DEFAULT:
# `_missing`) and the merge must keep the stored value. Key changes under DEFAULT of history rows
# the dump has not read yet would leave such a value unknown (README, PostgreSQL): they run on
# `tokens` (uuid key, REPLICA IDENTITY FULL, also with a TOASTed `doc`, completed from the old
# image) and `pairs` (composite key, text under ICU).
PG_SETUP = [
    "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
    """CREATE TABLE ledger (
      id int PRIMARY KEY, v int, note text COLLATE "en-x-icu",
      amount numeric(12,3) DEFAULT 1.5,
      wide numeric(50,20) DEFAULT '-123456789012345678901234567890.12345678901234567890',
      free numeric DEFAULT '1e-40',
      ts timestamp DEFAULT localtimestamp, tz timestamptz DEFAULT now(),
      d date DEFAULT '2024-02-29', t time DEFAULT '23:59:59.999999',
      iv interval DEFAULT '-1 year 2 mons -3 days 04:05:06.000007',
      b bytea DEFAULT '\\x00ff10', u uuid DEFAULT gen_random_uuid(), ok boolean DEFAULT true,
      f double precision DEFAULT 0.1, big bigint DEFAULT -9223372036854775808, small smallint DEFAULT -5,
      j jsonb DEFAULT '{"b": 1, "a": [true, null, 1.50]}',
      ai int[] DEFAULT '{1,NULL,-3}', at text[] DEFAULT ARRAY['a b', NULL, '', 'c"d\\e'],
      an numeric(10,2)[] DEFAULT '{1.50,NULL}', e mood DEFAULT 'happy',
      doc text DEFAULT repeat(md5(random()::text), 100)
    )""",
    "ALTER TABLE ledger ALTER COLUMN doc SET STORAGE EXTERNAL",
    """CREATE TABLE pairs (
      region text COLLATE "en-x-icu" DEFAULT 'eu', id int, v int, note text, PRIMARY KEY (region, id)
    )""",
    "CREATE TABLE tokens (u uuid PRIMARY KEY, v int, note text, doc text DEFAULT repeat(md5(random()::text), 90))",
    "ALTER TABLE tokens ALTER COLUMN doc SET STORAGE EXTERNAL",
    "ALTER TABLE tokens REPLICA IDENTITY FULL",
]
PG_ROWS = [
    """INSERT INTO ledger (id, v, note, amount, wide, free, ts, tz, d, t, iv, b, u, ok, f, big, small, j, ai, at,
                          an, e, doc)
    SELECT i, i % 100, CASE WHEN i % 17 = 0 THEN NULL ELSE 'row ' || i || (ARRAY['', ' Ü', ' é', 'ß'])[i % 4 + 1] END,
      i / 7.0, CASE WHEN i % 11 = 0 THEN NULL ELSE i * 1000000000000000000000.0 + i / 3.0 END,
      CASE i % 5 WHEN 0 THEN 'NaN' WHEN 1 THEN NULL ELSE i / 3.0 END,
      timestamp '2020-01-01' + i * interval '1.000001 second',
      CASE WHEN i % 13 = 0 THEN NULL ELSE timestamptz '2021-06-01 00:00+05:30' + i * interval '1 minute' END,
      date '1999-12-31' + i, time '00:00' + i * interval '97.000001 seconds',
      CASE WHEN i % 9 = 0 THEN NULL ELSE (i % 7 - 3) * interval '1 year 1 mon 2 days 03:04:05.000006' END,
      CASE WHEN i % 8 = 0 THEN NULL ELSE decode(lpad(to_hex(i), 8, '0'), 'hex') END,
      md5(i::text)::uuid, CASE i % 3 WHEN 0 THEN NULL ELSE i % 2 = 0 END, i / 3.0::float8,
      -9223372036854775808 + i, i % 128 - 64,
      CASE WHEN i % 10 = 0 THEN NULL ELSE jsonb_build_object('i', i, 'tags', jsonb_build_array('x', i % 3, NULL)) END,
      ARRAY[i, NULL, -i], ARRAY['a' || i, NULL, ''], ARRAY[i / 4.0, NULL]::numeric(10,2)[],
      (ARRAY['sad', 'ok', 'happy'])[i % 3 + 1]::mood,
      CASE WHEN i % 3 = 0 THEN NULL ELSE repeat(md5(i::text), 100) END
    FROM generate_series(1, {rows}) i""",
    """INSERT INTO pairs SELECT (ARRAY['eu', 'EU', 'us', 'Ü', 'é', 'e'])[i % 6 + 1], i, i * 10, 'p' || i
    FROM generate_series(1, {small}) i""",
    "INSERT INTO tokens SELECT md5(i::text)::uuid, i, 't' || i FROM generate_series(1, {small}) i",
]
PG_LEDGER_TYPES = {
    "id": "int", "v": "int", "note": "string", "amount": "decimal(12,3)", "wide": "string", "free": "string",
    "ts": "timestamp_ntz", "tz": "timestamp", "d": "date", "t": "bigint", "iv": "bigint", "b": "binary",
    "u": "string", "ok": "boolean", "f": "double", "big": "bigint", "small": "int", "j": "string",
    "ai": "array<int>", "at": "array<string>", "an": "array<decimal(10,2)>", "e": "string", "doc": "string",
}  # fmt: skip
# interval as the landing zone counts it (a month is 30 days, as PostgreSQL compares intervals), in
# microseconds, computed by the server from the fields: psycopg2 would count a year as 365 days
_INTERVAL_US = (
    "(((EXTRACT(YEAR FROM {c}) * 360 + EXTRACT(MONTH FROM {c}) * 30 + EXTRACT(DAY FROM {c})) * 86400"
    " + EXTRACT(HOUR FROM {c}) * 3600 + EXTRACT(MINUTE FROM {c}) * 60) * 1000000"
    " + EXTRACT(MICROSECONDS FROM {c}))::bigint"
)


def token(n: int) -> str:
    """The uuid key `md5(n::text)::uuid` gives on the server: random order, deterministic."""
    return str(uuid.UUID(hashlib.md5(str(n).encode()).hexdigest()))


class PostgresSource(Source):
    def create(self) -> None:
        statements = [s.format(rows=self.rows, small=self.rows // 6) for s in PG_ROWS]
        if self.watermarks == "readonly":  # nothing is created by Logtide: an administrator publishes the tables
            statements.append(f"CREATE PUBLICATION logtide_src FOR TABLE {', '.join(t.name for t in self.tables)}")
        self.server.execute(*PG_SETUP, *statements, database=self.database)

    def capture(self, **landing: Any) -> Any:
        return self.make_capture(landing=landing, watermarks=self.watermarks)

    def workload(self, table: Table, first_free_id: int, seed: int) -> maria.Workload:
        return pg.Workload(self.server, self.database, table.name, first_free_id, seed, **table.workload)

    def wait_until_landed(self, capture: Any) -> None:
        pg.wait_until_landed(self.server, self.database, capture)

    def check_log(self, capture: Any) -> None:
        """`doc` is out of line, and updates of `ledger` left it out (`_missing`) while `tokens`, under
        REPLICA IDENTITY FULL, had it completed from the old image."""
        for table in ("ledger", "tokens"):
            (toasted,) = self.server.query(
                "SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE oid = %s::regclass",
                (table,),
                database=self.database,
            )[0]
            assert toasted > 100_000, f"{table}.doc is not stored out of line"
        ledger = capture.zone.read_table(self.schema, "ledger").to_pylist()
        assert sum("doc" in (e.get("_missing") or ()) for e in ledger if e["_op"] == "u") > 10
        tokens = capture.zone.read_table(self.schema, "tokens").to_pylist()
        updated = [e for e in tokens if e["_op"] == "u" and e["before"] is not None]
        assert updated and all(e["after"]["doc"] is not None and not e.get("_missing") for e in updated)
        if self.watermarks == "readonly":  # no watermark row, no watermark table; each chunk its snapshot
            assert capture.zone.read_table(WATERMARK_SCHEMA, WATERMARK_TABLE) is None
            assert not self.server.query(
                f"SELECT 1 FROM pg_namespace WHERE nspname = '{WATERMARK_SCHEMA}'", database=self.database
            )
            metas = [read_chunk_meta(p) for t in self.tables for p in chunk_files(capture.zone, self.schema, t.name)]
            assert metas and all(m.low_lsn is not None and m.read_view.readonly for m in metas)

    def state(self, table: Table) -> dict[tuple, dict[str, Any]]:
        """SELECT of every column as the target holds it (see the README's PostgreSQL types): jsonb as the
        server's text, interval and time as microseconds, numeric beyond 38 digits as exact text."""
        conn = self.server.connect(self.database)
        try:
            psycopg2.extras.register_default_jsonb(conn, loads=lambda text: text)
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
                    " WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                    (table.name,),
                )
                columns = cur.fetchall()
                select = [_INTERVAL_US.format(c=f'"{c}"') if t == "interval" else f'"{c}"' for c, t in columns]
                cur.execute(f'SELECT {", ".join(select)} FROM "{table.name}"')
                rows = [dict(zip([c for c, _ in columns], r, strict=True)) for r in cur.fetchall()]
        finally:
            conn.close()
        state = {}
        for row in rows:
            row = {c: _as_target(v, table.types[c]) for c, v in row.items()}
            state[tuple(row[k] for k in table.key)] = row
        return state


def _as_target(value: Any, target: str) -> Any:
    if isinstance(value, Decimal) and target == "string":
        return format(value, "f")  # numeric without precision, or beyond 38 digits: exact text
    return plain(value)


PG_TABLES = [
    Table("ledger", ("id",), PG_LEDGER_TYPES, {"key_changes": False}),
    Table("pairs", ("region", "id"), {"region": "string", "id": "int", "v": "int", "note": "string"}),
    Table(
        "tokens", ("u",), {"u": "string", "v": "int", "note": "string", "doc": "string"},
        {"key": "u", "key_value": token},
    ),
]  # fmt: skip
MARIADB_TABLES = [Table("ledger", ("id",), LEDGER_TYPES)]


def open_source(request: pytest.FixtureRequest, kind: str) -> Source:
    """The adapter for `kind`, its fixtures taken from pytest (only that server starts)."""
    if kind in ("mariadb", "mariadb_readonly"):
        return MariaDBSource(
            kind,
            request.getfixturevalue("mariadb"),
            database := request.getfixturevalue("database"),
            database,
            request.getfixturevalue("make_capture"),
            MARIADB_TABLES,
            watermarks="readonly" if kind == "mariadb_readonly" else "table",
        )
    return PostgresSource(
        kind,
        request.getfixturevalue("postgres"),
        request.getfixturevalue("pg_database"),
        "public",
        request.getfixturevalue("make_pg_capture"),
        PG_TABLES,
        rows=1000,  # three tables to merge: fewer rows keep the test's time near MariaDB's
        pauses=(8, 18),
        watermarks="readonly" if kind == "postgres_readonly" else "table",
    )
