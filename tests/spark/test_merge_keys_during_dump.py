"""Keys the convergence harness does not key by, changed while a dump reads them, through the merge:
extreme dates and timestamps (year 1, before 1000, the Julian gap, 1899, the epoch, 9999-12-31
23:59:59.999999) in a composite (timestamp, date, int) key, rows moved between those extremes by key
changes, deleted and inserted again between the dump's chunks; PostgreSQL's `infinity` and
`-infinity` in a value column (they land as the range's ends), MariaDB's zero dates and days a month
does not have (`2020-02-30`: they land as NULL); and text keys under an accent- and
case-insensitive collation (MariaDB `utf8mb4_uca1400_ai_ci`, PostgreSQL ICU `und-u-ks-level1`,
nondeterministic) respelt across accents and case, deleted and inserted again under another spelling
in one transaction, and inserted under a spelling the database finds equal to an existing key
(refused). Two dumps of both tables in chunks of 3 while a writer does all that, a merge after each:
each Iceberg target equals its source row for row, spelling for spelling."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest

from capture.merge.app import run_merge
from tests.integration import dumping as maria
from tests.integration.postgres import dumping as pg
from tests.integration.postgres.conftest import make_pg_capture, pg_database  # noqa: F401 - fixtures
from tests.spark.merging import differences, iceberg_state, plain, typed

pytestmark = pytest.mark.spark

MOMENTS = {
    "mariadb": [
        "0001-01-01 00:00:00", "0999-12-31 23:59:59.999999", "1000-01-01 00:00:00", "1582-10-04 23:59:59.5",
        "1582-10-15 00:00:00", "1899-12-31 23:59:59.999999", "1970-01-01 00:00:00", "2038-01-19 03:14:08",
        "9999-12-31 23:59:59.999999",
    ],
    "postgres": [
        "0001-01-01 00:00:00+00", "0999-12-31 23:59:59.999999+00", "1000-01-01 00:00:00+05:30",
        "1582-10-04 23:59:59.5+00", "1582-10-15 00:00:00+00", "1899-12-31 23:59:59.999999+00",
        "1970-01-01 00:00:00+00", "2038-01-19 03:14:08+00", "9999-12-31 23:59:59.999999+00",
    ],
}  # fmt: skip
DAYS = ["0001-01-01", "0999-12-31", "1000-01-01", "1582-10-04", "1582-10-15", "1970-01-01", "9999-12-31"]
VALUES = {  # the value column `ts`: PostgreSQL infinities land as the range's ends (README, PostgreSQL types),
    # MariaDB's zero dates and days a month does not have (sql_mode ALLOW_INVALID_DATES) as NULL
    "mariadb": [*MOMENTS["mariadb"], None, "0000-00-00 00:00:00", "2020-02-30 10:00:00", "2021-04-31 00:00:00.5"],
    "postgres": ["infinity", "-infinity", "0001-01-01 00:00:00", "9999-12-31 23:59:59.999999", None],
}
# key stems, each spelt several ways that an accent- and case-insensitive collation finds equal
SPELLINGS = [
    ["e", "é", "È", "ë", "E", "e\u0301"],
    ["a", "á", "Å", "A\u030a", "à"],
    ["o", "ö", "ô", "O"],
    ["u", "ü", "Ú", "U"],
    ["c", "ç", "C", "Ç"],
]
TABLES = {
    "mariadb": [
        "CREATE TABLE tk (d DATETIME(6) NOT NULL, dd DATE NOT NULL, n INT NOT NULL, v INT, ts DATETIME(6),"
        " PRIMARY KEY (d, dd, n))",
        "CREATE TABLE ak (k VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_uca1400_ai_ci PRIMARY KEY, v INT)",
    ],
    "postgres": [
        "CREATE COLLATION ai (provider = icu, locale = 'und-u-ks-level1', deterministic = false)",
        "CREATE TABLE tk (d timestamptz NOT NULL, dd date NOT NULL, n int NOT NULL, v int, ts timestamp,"
        " PRIMARY KEY (d, dd, n))",
        "CREATE TABLE ak (k text COLLATE ai PRIMARY KEY, v int)",
    ],
}
ROWS = 60


class _Source:
    def __init__(self, kind: str, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        if kind == "mariadb":
            self.server = request.getfixturevalue("mariadb")
            self.database = self.schema = request.getfixturevalue("database")
            self.make = lambda: request.getfixturevalue("make_capture")([f"{self.database}.*"])
        else:
            self.server = request.getfixturevalue("postgres")
            self.database, self.schema = request.getfixturevalue("pg_database"), "public"
            self.make = lambda: request.getfixturevalue("make_pg_capture")()

    def connect(self) -> Any:
        conn = self.server.connect(self.database)
        with conn.cursor() as cur:
            if self.kind == "mariadb":
                cur.execute("SET time_zone = '+00:00', sql_mode = 'ALLOW_INVALID_DATES'")  # zero and invalid days
            else:
                cur.execute("SET TimeZone = 'UTC'")
        return conn

    def is_duplicate(self, exc: BaseException) -> bool:
        return "Duplicate" in str(exc) or "duplicate key" in str(exc)

    def landed(self, capture) -> None:
        if self.kind == "mariadb":
            maria.wait_until_landed(self.server, capture)
        else:
            pg.wait_until_landed(self.server, self.database, capture)

    def state(self, table: str, key: tuple[str, ...]) -> dict:
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT * FROM {table}")
                names = [d[0] for d in cur.description]
                rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        finally:
            conn.close()
        # PyMySQL reads a date no type holds as its text: the target holds NULL
        rows = [{n: None if n == "ts" and isinstance(v, str) else plain(v) for n, v in r.items()} for r in rows]
        return {tuple(r[k] for k in key): r for r in rows}


class _Writer(threading.Thread):
    """Key changes between the extremes, deletes and inserts of `tk`; respellings of `ak`'s keys
    (UPDATE, DELETE and INSERT in one transaction, INSERT of an equal spelling: refused)."""

    def __init__(self, source: _Source, seed: int) -> None:
        super().__init__(daemon=True)
        self.source, self.rng = source, random.Random(seed)
        self.stop_event, self.error, self.statements, self.refused = threading.Event(), None, 0, 0

    def run(self) -> None:
        try:
            conn = self.source.connect()
            conn.autocommit = False
            try:
                n = ROWS * 10 + self.rng.randrange(1000) * 1000
                while not self.stop_event.is_set():
                    n += 1
                    try:
                        with conn.cursor() as cur:
                            for statement in self._transaction(n):
                                cur.execute(statement)
                                self.statements += 1
                        conn.commit()
                    except Exception as exc:
                        conn.rollback()
                        if not self.source.is_duplicate(exc):
                            raise
                        self.refused += 1
            finally:
                conn.close()
        except BaseException as exc:
            self.error = exc

    def _transaction(self, n: int) -> list[str]:
        rng, kind = self.rng, self.source.kind
        moments, values = MOMENTS[kind], VALUES[kind]
        i = rng.randrange(ROWS)
        spell = lambda j: f"{rng.choice(SPELLINGS[j % len(SPELLINGS)])}-{j}"  # noqa: E731
        ts = rng.choice(values)
        ts = "NULL" if ts is None else f"'{ts}'"
        roll = rng.random()
        if roll < 0.25:  # a key change to another extreme
            return [f"UPDATE tk SET d = '{rng.choice(moments)}', dd = '{rng.choice(DAYS)}', v = {n} WHERE n = {i}"]
        if roll < 0.35:
            return [f"UPDATE tk SET ts = {ts}, v = {n} WHERE n = {i}"]
        if roll < 0.45:
            return [f"DELETE FROM tk WHERE n = {i}"]
        if roll < 0.55:
            return [f"INSERT INTO tk VALUES ('{rng.choice(moments)}', '{rng.choice(DAYS)}', {i}, {n}, {ts})"]
        j = rng.randrange(ROWS * 3 // 2)  # a third of them: keys the table did not hold at first
        if roll < 0.7:  # respelt: the same key (where the stem is the row's), else no row
            return [f"UPDATE ak SET k = '{spell(j)}', v = {n} WHERE k = '{spell(j)}'"]
        if roll < 0.8:  # deleted and inserted again under another spelling, one transaction
            return [f"DELETE FROM ak WHERE k = '{spell(j)}'", f"INSERT INTO ak VALUES ('{spell(j)}', {n})"]
        if roll < 0.9:  # mostly refused: an equal key exists
            return [f"INSERT INTO ak VALUES ('{spell(j)}', {n})"]
        return [f"DELETE FROM ak WHERE k = '{spell(j)}'"]

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=30)
        if self.error is not None:
            raise self.error


def _populate(source: _Source) -> None:
    rng = random.Random(7)
    moments, values = MOMENTS[source.kind], VALUES[source.kind]
    tk = ", ".join(
        f"('{moments[i % len(moments)]}', '{DAYS[i % len(DAYS)]}', {i}, {i},"
        f" {'NULL' if (v := values[i % len(values)]) is None else repr(v)})"
        for i in range(ROWS)
    )
    ak = ", ".join(f"('{rng.choice(SPELLINGS[j % len(SPELLINGS)])}-{j}', {j})" for j in range(ROWS))
    conn = source.connect()
    try:
        with conn.cursor() as cur:
            for statement in [*TABLES[source.kind], f"INSERT INTO tk VALUES {tk}", f"INSERT INTO ak VALUES {ak}"]:
                cur.execute(statement)
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["mariadb", "postgres"])
def test_extreme_date_and_accent_insensitive_keys_changed_during_dumps_merge_to_the_source(
    kind, request, spark, catalogs
):
    source = _Source(kind, request)
    _populate(source)
    capture = source.make().start()
    capture.wait_running()
    config = capture.config.model_copy(
        update={"merge": catalogs["hadoop"].model_copy(update={"namespace": f"keys_{kind}"})}
    )
    keys = {"tk": ("d", "dd", "n"), "ak": ("k",)}
    for round_ in range(2):
        writer = _Writer(source, seed=round_)
        writer.start()
        try:
            for table in keys:
                maria.run_dump(capture, f"{source.schema}.{table}", 3)
        finally:
            writer.stop()
        assert writer.statements > 50 and writer.refused > 0
        source.landed(capture)
        run_merge(spark, config, "src")
        for table, key in keys.items():
            want = source.state(table, key)  # psycopg2 reads the infinities as Python's ends: as they land
            got = iceberg_state(spark, f"`logtide`.`keys_{kind}`.`{source.schema}__{table}`", key)
            assert typed(got) == typed(want), f"round {round_} {table}:\n" + differences(got, want)
