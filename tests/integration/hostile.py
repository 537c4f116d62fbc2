"""Hostile MariaDB tables beyond the convergence harness's, for `test_hostile_tables` and
`tests/spark/test_merge_hostile`: generated (VIRTUAL, STORED) and invisible columns, DOUBLE and
FLOAT keys (-0.0, extremes, subnormals), VARBINARY keys up to 3,000 bytes, an accent- and
case-insensitive key (`utf8mb4_unicode_ci`) respelt by key changes, a PAD SPACE key given
trailing blanks, a table whose only key is UNIQUE NOT NULL, a composite key of emoji under
`utf8mb4_general_ci` (which compares them all equal), `uca1400_ai_ci` text, negative TIME(6),
VARBINARY with trailing zero bytes, YEAR, DECIMAL and a SET with a '' member; and a writer that
changes them."""

from __future__ import annotations

import random
import threading
from decimal import Decimal

import pymysql

from tests.integration.dumping import run_dump, wait_until_landed
from tests.spark.merging import plain

TABLES = {
    "gen": (
        "CREATE TABLE gen (id INT PRIMARY KEY, a INT, v BIGINT AS (a * 2) VIRTUAL,"
        " s VARCHAR(30) AS (CONCAT('x', a)) STORED, h INT INVISIBLE DEFAULT 7, n VARCHAR(10))",
        ("id",),
    ),
    "fkey": ("CREATE TABLE fkey (f DOUBLE PRIMARY KEY, r FLOAT NOT NULL, v INT, UNIQUE KEY (r))", ("f",)),
    "vbk": ("CREATE TABLE vbk (k VARBINARY(3000) PRIMARY KEY, v INT)", ("k",)),
    "uci": ("CREATE TABLE uci (k VARCHAR(20) COLLATE utf8mb4_unicode_ci PRIMARY KEY, v INT)", ("k",)),
    "uq": ("CREATE TABLE uq (u VARCHAR(20) COLLATE utf8mb4_general_ci NOT NULL, v INT, UNIQUE KEY (u))", ("u",)),
    "odd": (  # key columns MariaDB orders otherwise than Spark: ENUM by member, CHAR padded, DECIMAL(65,30)
        "CREATE TABLE odd (e ENUM('z','b','a','') NOT NULL, c CHAR(6) COLLATE latin1_swedish_ci NOT NULL,"
        " d DECIMAL(65,30) NOT NULL, bits BIT(64), bin BINARY(4), st SET('x','y','z'), v INT,"
        " PRIMARY KEY (e, c, d))",
        ("e", "c", "d"),
    ),
    "mix": (  # emoji under general_ci (all equal), uca1400 accents/case, utf8mb3 (ss = ß), negative TIME(6),
        # VARBINARY with trailing zero bytes, YEAR, DECIMAL with trailing zeros, TIMESTAMP(6), BIT(8), a SET
        # with a '' member, in one key
        "CREATE TABLE mix (k VARCHAR(8) COLLATE utf8mb4_general_ci NOT NULL,"
        " u VARCHAR(8) CHARACTER SET utf8mb4 COLLATE uca1400_ai_ci NOT NULL,"
        " m VARCHAR(8) CHARACTER SET utf8mb3 COLLATE utf8mb3_unicode_ci NOT NULL, t TIME(6) NOT NULL,"
        " b VARBINARY(6) NOT NULL, y YEAR NOT NULL, d DECIMAL(8,3) NOT NULL, ts TIMESTAMP(6) NOT NULL,"
        " bt BIT(8) NOT NULL, s SET('','p') NOT NULL, v INT, PRIMARY KEY (k, u, m, t, b, y, d, ts, bt, s))",
        ("k", "u", "m", "t", "b", "y", "d", "ts", "bt", "s"),
    ),
}
_EMOJI = ["\U0001f600", "\U0001f601", "\U0001d11e", "a\U0001f600", "A\U0001f601"]
_DECIMALS = ["99999999999999999999999999999999999.999999999999999999999999999999", "-0.000000000000000000000000000001"]
_WORDS = ["a", "A", "á", "Á", "ä", "b", "B ", "ss", "ß", "e\u0301", "é", "z", "Z", "ǆ", "ǅ"]


def populate(mariadb, database: str) -> None:
    rows = {
        "gen": [f"({i}, {i}, 'n{i}')" for i in range(60)],
        "fkey": [f"({v!r}, {r!r}, {i})" for i, (v, r) in enumerate(_floats())],
        "vbk": [f"(REPEAT(UNHEX('{i % 256:02x}ff00'), {i * 10 % 1000}), {i})" for i in range(1, 60)],
        "uci": [f"('{w}{i}', {i})" for i, w in enumerate(_WORDS * 3)]
        + [f"('{e}{i}', {i})" for i, e in enumerate(_EMOJI)],
        "uq": [f"('{w}-{i}', {i})" for i, w in enumerate(_WORDS * 3)],
        "odd": [
            f"('{'zba'[i % 4] if i % 4 < 3 else ''}', '{'xXåÅ'[i % 4]}{i % 5}', {_DECIMALS[i % 2]} - {i},"
            f" {2**64 - 1 - i}, UNHEX('{i:02x}'), '{'x,z' if i % 2 else ''}', {i})"
            for i in range(60)
        ],
        "mix": [_mix_row(i, i) for i in range(60)],
    }
    for table, (ddl, _) in TABLES.items():
        columns = "(id, a, n)" if table == "gen" else ""
        mariadb.execute(ddl, f"INSERT INTO {table} {columns} VALUES {', '.join(rows[table])}", database=database)


def _mix_row(i: int, v: int, word: str = "", emoji: str = "") -> str:
    return (
        f"('{emoji or _EMOJI[i % 5]}{i}', '{word or _WORDS[i % 15]}{i}', '{word or _WORDS[i % 15]}{i % 7}',"
        f" '-{i % 30}:00:00.{i:06d}', UNHEX('{i:02x}00'), {1901 + i * 4}, {i / 8},"
        f" '2021-03-28 0{i % 4}:59:59.{i:06d}', {255 - i}, {i % 4}, {v})"
    )


def _floats() -> list[tuple[float, float]]:
    doubles = [-0.0, 1.7976931348623157e308, -1.7976931348623157e308, 5e-324, 2.2250738585072014e-308, 0.1, 1 / 3]
    floats = [-0.0, 3.4028234663852886e38, -3.4028234663852886e38, 1.401298464324817e-45, 0.1, 1 / 3, 7.0]
    return [(d, f) for d, f in zip(doubles, floats, strict=True)] + [(float(i) + 0.5, i + 0.25) for i in range(40)]


class Writer(threading.Thread):
    """Updates, key changes (respelt keys among them), deletes and inserts on every table."""

    def __init__(self, mariadb, database: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.mariadb, self.database, self.rng = mariadb, database, random.Random(seed)
        self.stop_event, self.error, self.statements = threading.Event(), None, 0

    def run(self) -> None:
        try:
            with self.mariadb.connect(self.database) as conn, conn.cursor() as cur:
                n = 1000
                while not self.stop_event.is_set():
                    n += 1
                    for statement in self._statements(n):
                        try:
                            cur.execute(statement)
                        except Exception as exc:  # a duplicate key: the statement changes nothing
                            if "Duplicate" not in str(exc):
                                raise
                        self.statements += 1
        except BaseException as exc:
            self.error = exc

    def _statements(self, n: int) -> list[str]:
        rng, w = self.rng, self.rng.choice(_WORDS)
        i = rng.randrange(60)
        return [
            f"UPDATE gen SET a = a + 1, n = 'u{n}' WHERE id = {i}",
            f"UPDATE gen SET id = {n} WHERE id = {i}" if rng.random() < 0.2 else f"DELETE FROM gen WHERE id = {i}",
            f"INSERT INTO gen (id, a) VALUES ({i}, {n})",
            f"UPDATE fkey SET v = v + 1, f = -f WHERE v = {rng.randrange(47)}",
            f"UPDATE fkey SET r = r + 1 WHERE v = {rng.randrange(47)}",
            f"UPDATE vbk SET k = CONCAT(k, UNHEX('00')), v = v + 1 WHERE v = {rng.randrange(60)}",
            f"UPDATE uci SET k = '{w}{i}' WHERE k = '{rng.choice(_WORDS)}{i}'",  # respelt: same key or a new one
            f"UPDATE uci SET v = v + 1 WHERE k = '{w}{rng.randrange(45)}'",
            f"INSERT INTO uci VALUES ('{w}{n}', {n})",
            f"UPDATE uci SET k = '{rng.choice(_EMOJI)}{i % 5}', v = v + 1 WHERE k = '{_EMOJI[0]}{i % 5}'",  # all equal
            f"UPDATE uq SET u = '{w}-{i}', v = v + 1 WHERE u = '{rng.choice(_WORDS)}-{i}'",
            f"DELETE FROM uq WHERE u = '{w}-{rng.randrange(45)}'",
            f"INSERT INTO uq VALUES ('{w}-{i} ', {n})",  # a trailing blank: the same key under PAD SPACE
            f"UPDATE uq SET u = CONCAT(u, ' ') WHERE v = {rng.randrange(45)}",  # respelt by a trailing blank
            f"UPDATE uq SET u = TRIM(TRAILING ' ' FROM u) WHERE v = {rng.randrange(45)}",
            f"UPDATE odd SET e = '{rng.choice('zba')}', c = UPPER(c), bits = bits >> 1, st = 'y' WHERE v = {i}",
            f"UPDATE odd SET d = -d, c = CONCAT(c, ' '), bin = NULL WHERE v = {rng.randrange(60)}",
            f"UPDATE mix SET k = '{rng.choice(_EMOJI)}{i}', u = '{w}{i}' WHERE v = {i}",  # respelt: the same key
            f"UPDATE mix SET s = s ^ 1, t = TIMEDIFF('00:00:00', t) WHERE v = {rng.randrange(60)}",  # '' in, out
            f"UPDATE mix SET b = IF(LENGTH(b) < 6, CONCAT(b, UNHEX('00')), LEFT(b, 1)), d = d + 0.5,"
            f" y = 1901 + (y + 1) % 250, m = '{w}{i % 7}', ts = ts + INTERVAL 1 HOUR, bt = bt ^ 1 WHERE v = {i}",
            f"DELETE FROM mix WHERE v = {rng.randrange(60)}",
            f"INSERT INTO mix VALUES {_mix_row(i, i, w, rng.choice(_EMOJI))}",
        ]

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=30)
        if self.error is not None:
            raise self.error


def dump_while_writing(mariadb, database: str, make_capture, chunk_size: int, **options):
    """Write the tables' rows, start capture of the database (`options`: the source's settings),
    dump every table in chunks of `chunk_size` while a `Writer` changes them, wait until every
    change landed; the capture."""
    populate(mariadb, database)
    capture = make_capture([f"{database}.*"], **options).start()
    capture.wait_running()
    writer = Writer(mariadb, database, chunk_size)
    writer.start()
    try:
        for table in TABLES:
            run_dump(capture, f"{database}.{table}", chunk_size)
    finally:
        writer.stop()
    wait_until_landed(mariadb, capture)
    assert writer.statements > 100
    return capture


def source_state(mariadb, database: str, table: str) -> dict:
    """The table's rows as SELECT shows them, its invisible column too (the binlog and the dump carry it)."""
    with mariadb.connect(database) as conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
        columns = {  # the invisible column too; a FLOAT's exact value; BIT(64) as its number
            "gen": "*, h",
            "fkey": "f, CAST(r AS DOUBLE) AS r, v",
            "odd": "e, c, d, CAST(bits AS UNSIGNED) AS bits, bin, st, v",
            "ee": "IF(e = 0, ' ', e) AS e, i",  # the ENUM error value lands as ' ' (mysql/types.py)
            "mix": "k, u, m, t, b, y, d, ts, CAST(bt AS UNSIGNED) AS bt, IF(s & 1, CONCAT(',', s), s) AS s, v",
        }.get(table, "*")
        cur.execute("SET time_zone = '+00:00'")  # TIMESTAMP as landed (UTC); mix's s: a SET's '' member with ','
        cur.execute(f"SELECT {columns} FROM {table}")
        return {n: row for n, row in enumerate(cur.fetchall())}


def rows(state: dict) -> list[str]:
    return sorted(repr(sorted((c, _same(plain(v))) for c, v in row.items())) for row in state.values())


def _same(value: object) -> object:
    """One spelling of a number landed as Decimal (BIT(64)) or text (DECIMAL(65,30)) and read as int or Decimal."""
    if isinstance(value, Decimal | int) and not isinstance(value, bool):
        return format(Decimal(value), "f")
    return value
