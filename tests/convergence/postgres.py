"""PostgreSQL's declarations of the harness's kinds, with the extremes Logtide's targets can hold.

Left out on purpose, since issue 10 is deciding their behaviour or the README documents them as
NULL: `infinity` dates and timestamps, BC dates, years past 9999, `time '24:00:00'`, NaN in a
`numeric(p,s)`. Text holds no NUL here (PostgreSQL refuses it); bytea and json's `\\u0000` do.
"""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, ClassVar

import psycopg2.errors
import psycopg2.extras

from capture.sources.postgres.connection import parse_lsn
from tests.convergence.kit import Kit
from tests.convergence.schema import (
    DDL_TEXT,
    KEY_BYTES,
    TEXT_SAMPLES,
    SqlType,
    Table,
    big_json,
    big_text,
    random_text,
    spread,
)
from tests.integration.postgres.conftest import _drop as drop_database
from tests.servers import wait_for

# a month counts 30 days, as PostgreSQL compares intervals and the landing zone stores them
INTERVAL_US = (
    "(((EXTRACT(YEAR FROM {0}) * 360 + EXTRACT(MONTH FROM {0}) * 30 + EXTRACT(DAY FROM {0})) * 86400"
    " + EXTRACT(HOUR FROM {0}) * 3600 + EXTRACT(MINUTE FROM {0}) * 60) * 1000000"
    " + EXTRACT(MICROSECONDS FROM {0}))::bigint"
)
COLLATION = "ci"  # nondeterministic ICU collation: case-insensitive, accent-sensitive
_DAY0, _DAY9 = date(1, 1, 1).toordinal(), date(9999, 12, 31).toordinal()
_NAN, _INF = float("nan"), float("inf")


def _int(ddl: str, bits: int) -> SqlType:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return SqlType(ddl, "int", (low, high, 0), lambda rng: rng.randint(low, high))


def _moment(rng: random.Random) -> datetime:
    day = date.fromordinal(rng.randint(_DAY0, _DAY9))
    return datetime(day.year, day.month, day.day) + timedelta(microseconds=rng.randint(0, 86_400_000_000 - 1))


def _decimal(rng: random.Random, digits: int, scale: int) -> Decimal:
    return Decimal(rng.randint(-(10**digits) + 1, 10**digits - 1)).scaleb(-scale)


def _interval(rng: random.Random) -> str:
    return (
        f"{rng.randint(-500, 500)} years {rng.randint(-11, 11)} mons {rng.randint(-40, 40)} days "
        f"{rng.randint(-900, 900)}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 999999):06d}"
    )


def _array(items: list[str]) -> str:
    return "{" + ",".join(items) + "}"


def _text_array(rng: random.Random) -> str:
    def item() -> str:
        text = random_text(rng, 10)
        return "NULL" if rng.random() < 0.1 else '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return _array([item() for _ in range(rng.randint(0, 4))])


TEXT = TEXT_SAMPLES
JSON_DOCS = (
    '{"a": 1.10, "b": 1e2, "c": [1E-2, -0, 100000000000000000000000001]}',
    '{"nul": "\\u0000"}',
    " [ 1 ,\t2 ] ",
    '{"dup": 1, "dup": 2}',
    "null",
)
JSONB_DOCS = ('{"a": 1.10, "b": 1e2, "c": [1E-2, -0, 100000000000000000000000001]}', '{"k": "😀"}', "[]", "null")
MOMENTS = (datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999), datetime(1582, 10, 10, 12, 0, 0, 1),
           datetime(1899, 12, 31, 23, 59, 59, 999999))  # fmt: skip

KEY_MOMENTS = (datetime(1, 1, 1), datetime(1582, 10, 4, 23, 59, 59, 999999), datetime(1582, 10, 15),
               datetime(1969, 12, 31, 23, 59, 59, 999999), datetime(1970, 1, 1),
               datetime(9999, 12, 31, 23, 59, 59, 999999))  # fmt: skip

TYPES: dict[str, SqlType] = {
    "int": _int("integer", 32),
    "int16": _int("smallint", 16),
    "int64": _int("bigint", 64),
    "decimal": SqlType(
        "numeric(38,10)", "decimal",
        (Decimal("9999999999999999999999999999.9999999999"), Decimal("-9999999999999999999999999999.9999999999"),
         Decimal("0.0000000001"), Decimal("0E-10")),
        lambda rng: _decimal(rng, rng.randint(1, 38), 10),
    ),
    "wide_decimal": SqlType(
        "numeric(60,30)", "text", (Decimal("9" * 30 + "." + "9" * 30), Decimal("-1e-30")),
        lambda rng: _decimal(rng, rng.randint(1, 60), 30), select="{}::text",
    ),
    "free_numeric": SqlType(
        "numeric", "text", (Decimal("1e-40"), Decimal("1" + "0" * 80), Decimal("1.10"), Decimal("-0.000")),
        lambda rng: _decimal(rng, rng.randint(1, 50), rng.randint(0, 45)), select="{}::text",
    ),
    "float32": SqlType(
        "real", "float32", (_NAN, _INF, -_INF, 3.4028234663852886e38, -3.4028234663852886e38, 1.401298464324817e-45,
                            -0.0, 0.1),
        lambda rng: rng.uniform(-1e6, 1e6),
    ),
    "float64": SqlType(
        "double precision", "float64", (_NAN, _INF, -_INF, 1.7976931348623157e308, 5e-324, -0.0, 0.1),
        lambda rng: rng.uniform(-1e300, 1e300) if rng.random() < 0.2 else rng.uniform(-1, 1),
    ),
    "text": SqlType("text", "text", TEXT, lambda rng: random_text(rng)),
    "text_ci": SqlType(f'text COLLATE "{COLLATION}"', "text", TEXT, lambda rng: random_text(rng)),
    "char": SqlType("char(8)", "text", ("", "ab  ", "😀" * 8, " x"), lambda rng: random_text(rng, 8)[:8]),
    "bytes": SqlType("bytea", "bytes", (b"", b"\x00", b"\xff" * 300), lambda rng: rng.randbytes(rng.randint(0, 40))),
    "date": SqlType(
        "date", "date",
        (date(1, 1, 1), date(9999, 12, 31), date(1582, 10, 4), date(1582, 10, 15), date(1899, 12, 31)),
        lambda rng: date.fromordinal(rng.randint(_DAY0, _DAY9)),
    ),
    "datetime": SqlType("timestamp", "datetime", MOMENTS, _moment),
    "timestamp": SqlType(
        "timestamptz", "datetime", tuple(m.replace(tzinfo=UTC) for m in MOMENTS),
        lambda rng: _moment(rng).replace(tzinfo=UTC),
    ),
    "time": SqlType(
        "time", "micros", (time(0), time(23, 59, 59, 999999)),
        lambda rng: time(rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59), rng.randint(0, 999999)),
    ),
    # TIME beyond 24 hours is an interval here
    "interval": SqlType(
        "interval", "micros",
        ("838:59:59", "-838:59:59.999999", "1000 years", "-1000 years -11 mons -29 days -23:59:59.999999",
         "00:00:00.000001"),
        _interval, select=INTERVAL_US,
    ),
    "json": SqlType("json", "text", JSON_DOCS, lambda rng: rng.choice(JSON_DOCS), select="{}::text"),
    "jsonb": SqlType("jsonb", "text", JSONB_DOCS, lambda rng: rng.choice(JSONB_DOCS), select="{}::text"),
    "bool": SqlType("boolean", "exact", (True, False), lambda rng: rng.random() < 0.5),
    "uuid": SqlType(
        "uuid", "text", ("00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff"),
        lambda rng: rng.randbytes(16).hex(), select="{}::text",
    ),
    "int_array": SqlType(
        "integer[]", "exact", ("{}", "{NULL}", "{-2147483648,NULL,2147483647}"),
        lambda rng: _array([str(rng.randint(-99, 99)) for _ in range(rng.randint(0, 5))]),
    ),
    "text_array": SqlType(
        "text[]", "exact", ("{}", '{"",NULL,"a b","q\\"uote","back\\\\slash","{x}","NULL"}'), _text_array
    ),
    "big_text": SqlType("text", "text", (), big_text, external=True),
    "big_bytes": SqlType("bytea", "bytes", (), lambda rng: rng.randbytes(rng.randint(3000, 9000)), external=True),
    "big_json": SqlType("jsonb", "text", (), big_json, select="{}::text", external=True),
    # the `types` table's key (schema.KEY_KINDS): few values in its first columns, so chunks hold runs of them
    "key_bytes": SqlType("bytea", "bytes", (), lambda rng: rng.choice(KEY_BYTES)),
    "key_moment": SqlType(
        "timestamptz", "datetime", (), lambda rng: rng.choice(KEY_MOMENTS).replace(tzinfo=UTC)
    ),
    "key_num": SqlType("bigint", "int", (), lambda rng: rng.randint(-(2**63), 2**63 - 1),
                       counter=lambda n: spread(n, -(2**63), 2**63 - 1)),
    # added and widened by the DDL workload (`--ddl`)
    "ddl_vc": SqlType("varchar(40)", "text", DDL_TEXT, lambda rng: random_text(rng, 40)),
    "ddl_vc_wide": SqlType("varchar(200)", "text", DDL_TEXT, lambda rng: random_text(rng, 200)),
}  # fmt: skip


class PostgresKit(Kit):
    kind = "postgres"
    types = TYPES
    # a longer varchar only: capture stops at integer -> bigint, a rewrite, unless `column_rewrites:
    # accept` (README, PostgreSQL, Schema)
    widenings: ClassVar[dict[str, str]] = {"ddl_vc": "ddl_vc_wide"}
    text_ai: ClassVar[SqlType | None] = TYPES["text_ci"]  # the same collation, created at ICU level 1 (create)
    rewrites: ClassVar[dict[str, str]] = {"int": "int64"}

    def retype_sql(self, table: Table, column: str, kind: str) -> str:
        return f"ALTER TABLE {self.quote(table.name)} ALTER COLUMN {self.quote(column)} TYPE {self.types[kind].ddl}"

    @property
    def schema(self) -> str:
        return "public"

    def quote(self, name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    def create(self, tables: list[Table]) -> None:
        drop_database(self.server, self.database)
        self.server.execute(f"CREATE DATABASE {self.quote(self.database)}")
        level = 1 if self.collation == "ai" else 2  # 1: accents ignored too
        statements = [
            f"CREATE COLLATION {COLLATION} (provider = icu, locale = 'und-u-ks-level{level}', deterministic = false)"
        ]
        for table in tables:
            name = self.quote(table.name)
            columns = self.column_ddl(table)
            ident = ", ".join(self.quote(c) for c in table.ident)
            if table.key == "primary":
                columns.append(f"PRIMARY KEY ({ident})")
            elif table.key == "unique":
                columns.append(f"CONSTRAINT {self.quote(table.name + '_ident')} UNIQUE ({ident})")
            statements.append(f"CREATE TABLE {name} ({', '.join(columns)})")
            statements += [
                f"ALTER TABLE {name} ALTER COLUMN {self.quote(c.name)} SET STORAGE EXTERNAL"
                for c in table.columns
                if self.types[c.kind].external
            ]
            # what PostgreSQL needs to publish updates and deletes of a table without a primary key,
            # as a user sets it up; the uncaptured keyless table is left as applications leave theirs
            if table.key == "unique":
                statements.append(
                    f"ALTER TABLE {name} REPLICA IDENTITY USING INDEX {self.quote(table.name + '_ident')}"
                )
            elif table.key in ("none", "config") and table.captured:
                statements.append(f"ALTER TABLE {name} REPLICA IDENTITY FULL")
        self.server.execute(*statements, database=self.database)

    def drop(self) -> None:
        drop_database(self.server, self.database)

    def administer(self, tables: list[Table], source: str) -> None:
        """`watermarks: readonly` creates nothing: the publication of the captured tables is the
        administrator's (README, Read-only watermarks)."""
        names = ", ".join(self.quote(t.name) for t in tables if t.captured)
        self.server.execute(
            f"CREATE PUBLICATION {self.quote('logtide_' + source)} FOR TABLE {names}", database=self.database
        )

    def connect(self) -> Any:
        conn = self.server.connect(self.database, autocommit=False)
        with conn.cursor() as cur:
            cur.execute("SET TimeZone = 'UTC'")
        conn.commit()
        return conn

    def source_config(self, tables: list[Table]) -> dict[str, Any]:
        return {
            "kind": "postgresql",
            "host": "127.0.0.1",
            "port": self.server.port,
            "user": "postgres",
            "password": "${TEST_DB_PASSWORD:-}",
            "database": self.database,
            "include": ["public.*"],
            "exclude": [f"public.{t.name}" for t in tables if not t.captured],
        }

    def insert_many(self, conn: Any, insert: str, rows: list[tuple[Any, ...]]) -> None:
        with conn.cursor() as cur:
            psycopg2.extras.execute_values(cur, insert + "%s", rows, page_size=200)

    def upsert(self, cur: Any, table: Table, names: list[str], row: list[Any]) -> bool:
        """INSERT ... ON CONFLICT (key) DO UPDATE of every column, the key's too (its new spelling)."""
        columns = ", ".join(self.quote(n) for n in names)
        sets = ", ".join(f"{self.quote(n)} = EXCLUDED.{self.quote(n)}" for n in names)
        cur.execute(
            f"INSERT INTO {self.quote(table.name)} ({columns}) VALUES ({', '.join(['%s'] * len(names))})"
            f" ON CONFLICT ({', '.join(self.quote(c) for c in table.ident)}) DO UPDATE SET {sets}"
            " RETURNING xmax = 0",  # a new row has no xmax
            row,
        )
        return bool(cur.fetchone()[0])

    def is_duplicate(self, error: BaseException) -> bool:
        return isinstance(error, psycopg2.errors.UniqueViolation)

    def wait_until_landed(self, capture: Any, timeout: float = 120) -> None:
        """Commit a row to `nokey` (captured, never compared) and wait until capture's frontier passes
        its commit: everything committed before it has landed."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("INSERT INTO nokey (a, note) VALUES (NULL, 'landed marker')")
                cur.execute("SELECT pg_current_wal_insert_lsn()::text")
                before_commit = parse_lsn(cur.fetchone()[0])
            conn.commit()
        finally:
            conn.close()
        wait_for(lambda: capture.zone.checkpoint().frontier.major > before_commit, timeout, 0.1, "capture")
