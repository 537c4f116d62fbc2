"""MariaDB's declarations of the harness's kinds, with the extremes the server documents."""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any, ClassVar

import pymysql

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
from tests.integration.dumping import wait_until_landed

_DAY0, _DAY9 = date(1000, 1, 1).toordinal(), date(9999, 12, 31).toordinal()
_TS0, _TS9 = datetime(1970, 1, 1, 0, 0, 1), datetime(2038, 1, 19, 3, 14, 7, 999999)  # TIMESTAMP's range (UTC)


def _int(ddl: str, low: int, high: int) -> SqlType:
    return SqlType(ddl, "int", (low, high, 0), lambda rng: rng.randint(low, high))


def _time(us: int) -> str:
    """TIME as text (PyMySQL spells a negative timedelta wrongly)."""
    sign, us = ("-" if us < 0 else ""), abs(us)
    seconds, micros = divmod(us, 1_000_000)
    return f"{sign}{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{micros:06d}"


def _day(rng: random.Random) -> date:
    return date.fromordinal(rng.randint(_DAY0, _DAY9))


def _moment(rng: random.Random, low: datetime, high: datetime) -> datetime:
    span = int((high - low).total_seconds())
    return low + timedelta(seconds=rng.randint(0, span), microseconds=rng.randint(0, 999_999) * (rng.random() < 0.7))


def _decimal(rng: random.Random, digits: int, scale: int) -> Decimal:
    return Decimal(rng.randint(-(10**digits) + 1, 10**digits - 1)).scaleb(-scale)


def _set_value(rng: random.Random) -> str:
    members = [m for m in "xyz" if rng.random() < 0.5]
    rng.shuffle(members)  # the server stores them in definition order
    return ",".join(members)


TEXT = (*TEXT_SAMPLES, "nul\x00inside", "\x00")
JSON_DOCS = (
    '{"a": 1.10, "b": 1e2, "c": [1E-2, -0, 100000000000000000000000001]}',
    '"\\u0000 nul"',
    "[]",
    "null",
    '{"k": "😀", "dup": 1, "dup": 2}',
)
_MAX_FLOAT = 3.4028234663852886e38

TYPES: dict[str, SqlType] = {
    "int": _int("INT", -(2**31), 2**31 - 1),
    "int8": _int("TINYINT", -128, 127),
    "uint8": _int("TINYINT UNSIGNED", 0, 255),
    "int16": _int("SMALLINT", -(2**15), 2**15 - 1),
    "uint16": _int("SMALLINT UNSIGNED", 0, 2**16 - 1),
    "int24": _int("MEDIUMINT", -(2**23), 2**23 - 1),
    "uint24": _int("MEDIUMINT UNSIGNED", 0, 2**24 - 1),
    "uint32": _int("INT UNSIGNED", 0, 2**32 - 1),
    "int64": _int("BIGINT", -(2**63), 2**63 - 1),
    "uint64": SqlType("BIGINT UNSIGNED", "int", (0, 2**64 - 1, 2**63), lambda rng: rng.randint(0, 2**64 - 1)),
    "decimal": SqlType(
        "DECIMAL(38,10)", "decimal",
        (Decimal("9999999999999999999999999999.9999999999"), Decimal("-9999999999999999999999999999.9999999999"),
         Decimal("0.0000000001"), Decimal("0E-10")),
        lambda rng: _decimal(rng, rng.randint(1, 38), 10),
    ),
    "wide_decimal": SqlType(
        "DECIMAL(65,30)", "text",
        (Decimal("9" * 35 + "." + "9" * 30), Decimal("-" + "9" * 35 + "." + "9" * 30), Decimal("1e-30")),
        lambda rng: _decimal(rng, rng.randint(1, 65), 30),
        select="CAST({} AS CHAR)",
    ),
    "float32": SqlType(
        "FLOAT", "float32", (_MAX_FLOAT, -_MAX_FLOAT, 1.1754943508222875e-38, 0.1),
        lambda rng: rng.uniform(-1e6, 1e6), select="CAST({} AS DOUBLE)",  # exact: a text FLOAT has 6 digits
    ),
    "float64": SqlType(
        "DOUBLE", "float64", (1.7976931348623157e308, -1.7976931348623157e308, 2.2250738585072014e-308, 5e-324, 0.1),
        lambda rng: rng.uniform(-1e300, 1e300) if rng.random() < 0.2 else rng.uniform(-1, 1),
    ),
    "text": SqlType("VARCHAR(255) COLLATE utf8mb4_bin", "text", TEXT, lambda rng: random_text(rng)),
    "text_ci": SqlType("VARCHAR(100) COLLATE utf8mb4_general_ci", "text", TEXT, lambda rng: random_text(rng)),
    "char": SqlType(
        "CHAR(8) COLLATE utf8mb4_bin", "text", ("", "ab  ", "😀" * 8, " x"), lambda rng: random_text(rng, 8)[:8]
    ),
    "binary": SqlType(
        "BINARY(4)", "bytes", (b"", b"\x00", b"\xff" * 4, b"a"), lambda rng: rng.randbytes(rng.randint(0, 4))
    ),
    "bytes": SqlType(
        "VARBINARY(255)", "bytes", (b"", b"\x00", b"\xff" * 255), lambda rng: rng.randbytes(rng.randint(0, 40))
    ),
    # zero dates land as NULL (README, landing zone types)
    "date": SqlType(
        "DATE", "date", (date(1000, 1, 1), date(9999, 12, 31), "0000-00-00", date(1582, 10, 10), date(1899, 12, 31)),
        _day,
    ),
    "datetime": SqlType(
        "DATETIME(6)", "datetime",
        (datetime(1000, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999), "0000-00-00 00:00:00",
         datetime(1582, 10, 10, 12, 0, 0, 500000), datetime(1899, 12, 31, 23, 59, 59, 999999)),
        lambda rng: _moment(rng, datetime(1000, 1, 1), datetime(9999, 12, 31, 23, 59, 59)),
    ),
    "timestamp": SqlType("TIMESTAMP(6) NULL", "datetime", (_TS0, _TS9), lambda rng: _moment(rng, _TS0, _TS9)),
    "time": SqlType(
        "TIME(6)", "micros",
        tuple(_time(us) for us in (838 * 3600_000_000 + 3599_000_000, -(838 * 3600_000_000 + 3599_000_000),
                                   -500_000, 24 * 3600_000_000, 0)),
        lambda rng: _time(rng.randint(-838 * 3600_000_000, 838 * 3600_000_000)),
    ),
    "year": SqlType("YEAR", "int", (1901, 2155, 0), lambda rng: rng.randint(1901, 2155)),
    "bit": SqlType("BIT(64)", "int", (0, 2**64 - 1), lambda rng: rng.randint(0, 2**64 - 1),
                   select="CAST({} AS UNSIGNED)"),
    "json": SqlType("JSON", "text", JSON_DOCS, lambda rng: rng.choice(JSON_DOCS)),
    "enum": SqlType("ENUM('a', 'B', '')", "text", ("a", "B", ""), lambda rng: rng.choice(("a", "B", ""))),
    "set": SqlType("SET('x', 'y', 'z')", "text", ("", "x,y,z", "z,x"), _set_value),
    # a '' member: the server's text leaves its ',' out where 'x' is not in the value; it lands with it
    "set_empty": SqlType(
        "SET('x', '', 'y')", "text", ("", ",", ",y", "x,", "x,,y"), lambda rng: rng.randint(0, 7),
        select="IF(({0} & 2) <> 0 AND ({0} & 1) = 0, CONCAT(',', {0}), {0})",
    ),
    "big_text": SqlType("LONGTEXT COLLATE utf8mb4_bin", "text", (), big_text),
    "big_bytes": SqlType("LONGBLOB", "bytes", (), lambda rng: rng.randbytes(rng.randint(3000, 9000))),
    "big_json": SqlType("JSON", "text", (), big_json),
    # the `types` table's key (schema.KEY_KINDS): few values in its first columns, so chunks hold runs of them
    "key_bytes": SqlType("VARBINARY(16)", "bytes", (), lambda rng: rng.choice(KEY_BYTES)),
    "key_moment": SqlType(
        "TIME(6)", "micros", (),
        lambda rng: rng.choice(("-838:59:59", "-00:00:00.000001", "-00:00:00.5", "00:00:00", "00:00:00.000001",
                                "23:59:59.999999", "24:00:00", "838:59:59")),
    ),
    "key_num": SqlType("BIGINT UNSIGNED", "int", (), lambda rng: rng.randint(0, 2**64 - 1),
                       counter=lambda n: spread(n, 0, 2**64 - 1)),
    # added and widened by the DDL workload (`--ddl`)
    "ddl_vc": SqlType("VARCHAR(40) COLLATE utf8mb4_bin", "text", DDL_TEXT, lambda rng: random_text(rng, 40)),
    "ddl_vc_wide": SqlType("VARCHAR(200) COLLATE utf8mb4_bin", "text", DDL_TEXT, lambda rng: random_text(rng, 200)),
}  # fmt: skip


class MariaDBKit(Kit):
    kind = "mariadb"
    types = TYPES
    # lossless MODIFYs capture passes (README, ALTER TABLE that rewrites rows)
    widenings: ClassVar[dict[str, str]] = {"int": "int64", "ddl_vc": "ddl_vc_wide"}
    text_ai: ClassVar[SqlType | None] = SqlType(
        "VARCHAR(100) COLLATE utf8mb4_uca1400_ai_ci", "text", TEXT, lambda rng: random_text(rng)
    )

    def retype_sql(self, table: Table, column: str, kind: str) -> str:
        return f"ALTER TABLE {self.quote(table.name)} MODIFY {self.quote(column)} {self.types[kind].ddl}"

    @property
    def schema(self) -> str:
        return self.database

    def quote(self, name: str) -> str:
        return "`" + name.replace("`", "``") + "`"

    def create(self, tables: list[Table]) -> None:
        db = self.quote(self.database)
        statements = [f"DROP DATABASE IF EXISTS {db}", f"CREATE DATABASE {db} CHARACTER SET utf8mb4"]
        for table in tables:
            columns = self.column_ddl(table)
            ident = ", ".join(self.quote(c) for c in table.ident)
            if table.key == "primary":
                columns.append(f"PRIMARY KEY ({ident})")
            elif table.key == "unique":
                columns.append(f"UNIQUE KEY ident ({ident})")
            statements.append(f"CREATE TABLE {db}.{self.quote(table.name)} ({', '.join(columns)})")
        self.server.execute(*statements)

    def drop(self) -> None:
        self.server.execute(f"DROP DATABASE IF EXISTS {self.quote(self.database)}")

    def connect(self) -> Any:
        conn = self.server.connect(self.database, autocommit=False)
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
        return conn

    def source_config(self, tables: list[Table]) -> dict[str, Any]:
        return {
            "kind": "mariadb",
            "host": "127.0.0.1",
            "port": self.server.port,
            "user": "root",
            "password": "${TEST_DB_PASSWORD:-}",
            "server_id": random.randint(1000, 2**31),
            "include": [f"{self.database}.*"],
            "exclude": [f"{self.database}.{t.name}" for t in tables if not t.captured],
        }

    def upsert(self, cur: Any, table: Table, names: list[str], row: list[Any]) -> bool:
        """REPLACE (a row of the same key is deleted, or updated in place) or INSERT ... ON DUPLICATE
        KEY UPDATE of every column, the key's too; both count 1 for a new row."""
        columns = ", ".join(self.quote(n) for n in names)
        marks = ", ".join(["%s"] * len(names))
        if random.Random(repr(row)).random() < 0.5:
            cur.execute(f"REPLACE INTO {self.quote(table.name)} ({columns}) VALUES ({marks})", row)
        else:
            sets = ", ".join(f"{self.quote(n)} = VALUES({self.quote(n)})" for n in names)
            cur.execute(
                f"INSERT INTO {self.quote(table.name)} ({columns}) VALUES ({marks}) ON DUPLICATE KEY UPDATE {sets}", row
            )
        return cur.rowcount == 1

    def is_duplicate(self, error: BaseException) -> bool:
        return isinstance(error, pymysql.err.IntegrityError) and error.args[0] == 1062

    def wait_until_landed(self, capture: Any, timeout: float = 120) -> None:
        wait_until_landed(self.server, capture, timeout)
