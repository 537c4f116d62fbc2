"""Extreme dates and timestamps through capture, dump and the Spark merge on real servers: every
value the source types allow reaches the Iceberg target exactly (Spark must not rebase the
landing zone's proleptic Gregorian values), through the log and through chunks, in a table keyed
by a DATE (PostgreSQL: by timestamptz and date), whose repair deletes work too; what Iceberg
cannot hold (PostgreSQL infinity, BC, years past 9999) and MariaDB's zero dates land as the
README's type tables say. And a merge that Spark fails ends with one error line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime
from typing import Any

import pyarrow as pa
import pytest

from capture.dump.control import DumpSettings
from capture.dump.engine import DumpRequest
from capture.events import Change, Column, Lsn, Op, TableSchema
from capture.merge.app import run_merge
from tests.conftest import ROOT
from tests.integration import dumping as maria
from tests.integration.dumping import open_engine
from tests.integration.postgres import dumping as pg
from tests.integration.postgres.conftest import make_pg_capture, pg_database  # noqa: F401 - fixtures
from tests.spark.landing import Landing
from tests.spark.merging import changelog_replay, differences, iceberg_state, typed

pytestmark = pytest.mark.spark

EPOCH = datetime(1970, 1, 1)
LOWEST, HIGHEST = datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999)

# MariaDB: DATE/DATETIME 1000-01-01 .. 9999-12-31 (and what the server stores below 1000),
# TIMESTAMP 1970-01-01 00:00:01 .. 2038-01-19 03:14:07.999999 UTC; zero and partial zero dates
MARIA_TABLE = """CREATE TABLE days (
  d DATE PRIMARY KEY, dt DATETIME(6), dt0 DATETIME, ts TIMESTAMP(6) NULL DEFAULT NULL,
  z DATE, zt DATETIME, zs TIMESTAMP NULL DEFAULT NULL, note VARCHAR(20)
)"""
MARIA_CHUNK_ROWS = """INSERT INTO days VALUES
  ('0001-01-01', '0001-01-01 00:00:00', NULL, NULL, '0000-05-10', '0000-00-00 00:00:00', NULL, 'year one'),
  ('1000-01-01', '1000-01-01 00:00:00', '1000-01-01 00:00:00', '1970-01-01 00:00:01', '0000-00-00',
   '2020-00-15 00:00:00', '0000-00-00 00:00:00', 'minimum'),
  ('1582-10-10', '1582-10-10 12:34:56.789012', '1582-10-04 23:59:59', '2038-01-19 03:14:07.999999', '2020-00-00',
   '2020-05-00 10:00:00', NULL, 'julian gap'),
  ('1899-12-31', '1899-12-31 23:59:59.999999', '1900-01-01 00:00:00', '1999-12-31 23:59:59', '1000-01-01',
   NULL, '1970-01-01 00:00:01', 'before 1900'),
  ('9999-12-31', '9999-12-31 23:59:59.999999', '9999-12-31 23:59:59', NULL, '9999-12-31',
   '9999-12-31 23:59:59', '2038-01-19 03:14:07', 'maximum')"""
MARIA_LOG = [
    """INSERT INTO days VALUES
  ('1000-01-02', '1000-01-02 03:04:05.000006', '0999-12-31 23:59:59', '1970-01-01 00:00:01.000001', '2020-02-00',
   '0000-00-00 00:00:00', '0000-00-00 00:00:00', 'log'),
  ('1582-10-05', '1582-10-14 00:00:00.000001', '1582-10-15 00:00:00', '2038-01-19 03:14:07.999999', '0000-00-00',
   '1582-10-05 00:00:00', NULL, 'log gap'),
  ('9999-12-30', '9999-12-31 23:59:59.999999', '9999-12-31 23:59:59', '2038-01-19 03:14:07', '9999-12-31',
   '2020-00-00 00:00:00', '1970-01-01 00:00:01', 'log max')""",
    "UPDATE days SET dt = '9999-12-31 23:59:59.999999', z = '0000-00-00', note = 'updated' WHERE d = '1000-01-01'",
    "DELETE FROM days WHERE d = '1899-12-31'",
]
MARIA_LATER = [  # after the dump: the target takes these values from the log
    "UPDATE days SET dt0 = '1000-01-01 00:00:00', zt = '2021-00-00 00:00:00', ts = '1970-01-01 00:00:01',"
    " zs = '0000-00-00 00:00:00' WHERE d = '9999-12-30'",
    """INSERT INTO days VALUES
  ('1000-01-05', '1000-01-01 00:00:00', '9999-12-31 23:59:59', '2038-01-19 03:14:07.999999', '0000-00-00',
   '2020-05-00 00:00:00', '0000-00-00 00:00:00', 'late'),
  ('1500-06-15', '1500-06-15 06:15:00.5', '0001-01-01 00:00:00', NULL, '0000-05-10', NULL, NULL, 'late')""",
]
MARIA_TIMESTAMPS = {"ts", "zs"}  # TIMESTAMP columns: a zero value lands as epoch 0


def _maria_expected(column: str, value: Any) -> Any:
    """SELECT's value as the target must hold it (README: zero and partial zero dates land as NULL,
    a zero TIMESTAMP as 1970-01-01 00:00:00 UTC). PyMySQL returns invalid dates as their text."""
    if isinstance(value, str) and column != "note":
        return EPOCH if column in MARIA_TIMESTAMPS else None
    return value


def _maria_state(mariadb, database: str) -> dict:
    state = maria.table_state(mariadb, database, "days", ("d",))
    return {k: {c: _maria_expected(c, v) for c, v in row.items()} for k, row in state.items()}


# PostgreSQL: date and timestamp(tz) 0001-01-01 .. 9999-12-31, exactly
# keyed by (timestamptz, date): chunk bounds and the MERGE's key filter carry both types
PG_TABLE = """CREATE TABLE days (
  d date NOT NULL, ts timestamp, tz timestamptz NOT NULL, ts0 timestamp(0), note text, PRIMARY KEY (tz, d)
)"""
PG_CHUNK_ROWS = """INSERT INTO days VALUES
  ('0001-01-01', '0001-01-01 00:00:00', '0001-01-01 00:00:00+00', '0001-01-01 00:00:01', 'minimum'),
  ('1000-01-01', '1000-01-01 00:00:00.000001', '1000-01-01 12:00:00+05:30', '1000-01-01 00:00:00', 'year 1000'),
  ('1582-10-10', '1582-10-10 12:34:56.789012', '1582-10-04 23:59:59.5+00', '1582-10-15 00:00:00', 'julian gap'),
  ('1899-12-31', '1899-12-31 23:59:59.999999', '1899-12-31 23:59:59.999999+00', '1900-01-01 00:00:00', 'pre 1900'),
  ('9999-12-31', '9999-12-31 23:59:59.999999', '9999-12-31 23:59:59.999999+00', '9999-12-31 23:59:59', 'maximum')"""
PG_LOG = [
    """INSERT INTO days VALUES
  ('0001-01-02', '0001-01-01 00:00:00.000001', '0001-01-01 01:00:00+01', '0001-01-01 00:00:00', 'log min'),
  ('1582-10-05', '1582-10-14 00:00:00.000001', '1582-10-15 00:00:00+00', '1582-10-05 00:00:00', 'log gap'),
  ('9999-12-30', '9999-12-31 23:59:59.999999', '9999-12-31 23:59:59.999999+00', '9999-12-31 23:59:59', 'log max')""",
    # a key change too
    "UPDATE days SET ts = '9999-12-31 23:59:59.999999', tz = '0001-01-01 00:00:00+00' WHERE d = '1000-01-01'",
    "DELETE FROM days WHERE d = '1899-12-31'",
]
PG_LATER = [  # after the dump: the target takes these values from the log
    "UPDATE days SET ts0 = '1000-01-01 00:00:00', ts = '0001-01-01 00:00:00' WHERE d = '9999-12-30'",
    """INSERT INTO days VALUES
  ('1000-01-05', '9999-12-31 23:59:59.999999', '9999-12-31 23:59:59.999999+00', '0001-01-01 00:00:00', 'late'),
  ('1500-06-15', '1500-06-15 06:15:00.5', '1500-06-15 06:15+00', '1582-10-10 00:00:00', 'late')""",
]
# What Iceberg cannot hold (README, PostgreSQL types): infinity, BC and years past 9999 land as
# the nearest end of 0001-01-01 .. 9999-12-31
PG_FAR_TABLE = "CREATE TABLE far (id int PRIMARY KEY, d date, ts timestamp, tz timestamptz)"
PG_FAR_VALUES = [
    "('infinity', 'infinity', 'infinity')",
    "('-infinity', '-infinity', '-infinity')",
    "('0044-03-15 BC', '0044-03-15 12:00:00 BC', '0001-01-01 00:00:00+01')",  # the last: 1 BC in UTC
    "('10000-01-01', '294276-12-31 23:59:59', '9999-12-31 23:59:59.999999-01')",  # the last: year 10000 in UTC
    "('2024-02-29', '2024-02-29 12:00:00', '2024-02-29 12:00:00+00')",
]
PG_FAR_EXPECTED = [
    (date(9999, 12, 31), HIGHEST, HIGHEST),
    (date(1, 1, 1), LOWEST, LOWEST),
    (date(1, 1, 1), LOWEST, LOWEST),
    (date(9999, 12, 31), HIGHEST, HIGHEST),
    (date(2024, 2, 29), datetime(2024, 2, 29, 12), datetime(2024, 2, 29, 12)),
]


def _far_rows(first_id: int) -> str:
    return "INSERT INTO far VALUES " + ", ".join(f"({first_id + i}, {v[1:]}" for i, v in enumerate(PG_FAR_VALUES))


def _pg_state(postgres, database: str) -> dict:
    """`days` as the target holds it: timestamptz in UTC, naive (read in a UTC session: year 1 in a
    zone west of UTC would be year 0, which Python cannot hold)."""
    conn = postgres.connect(database)
    try:
        with conn.cursor() as cur:
            cur.execute("SET TimeZone = 'UTC'")
            cur.execute("SELECT * FROM days")
            names = [d[0] for d in cur.description]
            rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    finally:
        conn.close()
    plain = [{c: v.replace(tzinfo=None) if isinstance(v, datetime) else v for c, v in r.items()} for r in rows]
    return {(r["d"],): r for r in plain}


class _Case:
    """One source kind: its server, statements and the table state as the target must hold it."""

    def __init__(self, kind: str, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        if kind == "mariadb":
            self.server = request.getfixturevalue("mariadb")
            self.database = self.schema = request.getfixturevalue("database")
            self.make = lambda: request.getfixturevalue("make_capture")([f"{self.database}.*"])
            self.table, self.chunk_rows, self.log, self.later = MARIA_TABLE, MARIA_CHUNK_ROWS, MARIA_LOG, MARIA_LATER
        else:
            self.server = request.getfixturevalue("postgres")
            self.database, self.schema = request.getfixturevalue("pg_database"), "public"
            self.make = lambda: request.getfixturevalue("make_pg_capture")()
            self.table, self.chunk_rows, self.log, self.later = PG_TABLE, PG_CHUNK_ROWS, PG_LOG, PG_LATER

    def execute(self, *statements: str) -> None:
        if self.kind == "mariadb":  # zero dates: allowed whatever the server's default sql_mode
            statements = ("SET SESSION sql_mode = ''", "SET time_zone = '+00:00'", *statements)
        self.server.execute(*statements, database=self.database)

    def state(self) -> dict:
        if self.kind == "mariadb":
            return _maria_state(self.server, self.database)
        return _pg_state(self.server, self.database)

    def landed(self, capture) -> None:
        if self.kind == "mariadb":
            maria.wait_until_landed(self.server, capture)
        else:
            pg.wait_until_landed(self.server, self.database, capture)


def _dump(capture, tables: list[str]) -> dict:
    engine, source = open_engine(capture)
    try:
        return engine.run(DumpRequest(tables=tables, settings=DumpSettings(chunk_size=2)))
    finally:
        source.close()


@contextmanager
def _driver_in_tokyo() -> Iterator[None]:
    """The merge's Python process in a zone east of UTC, where a Spark timestamp of 9999-12-31
    23:59 UTC that reached Python (local time) would be past the year 9999."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Tokyo"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def _merge(spark, config, tables: list[str] | None = None) -> dict:
    with _driver_in_tokyo():
        return {r["table"]: r for r in run_merge(spark, config, "src", tables)["tables"]}


def _rows(frame) -> dict:
    """A frame's rows by `d`, timestamps as naive UTC (as `iceberg_state` reads a table)."""
    columns = [f"CAST(`{f.name}` AS TIMESTAMP_NTZ) AS `{f.name}`" if f.dataType.typeName() == "timestamp"
               else f"`{f.name}`" for f in frame.schema.fields]  # fmt: skip
    return {(row["d"],): row.asDict() for row in frame.selectExpr(*columns).collect()}


def _assert_target(spark, target: str, want: dict) -> None:
    got = iceberg_state(spark, target, ("d",))
    assert typed(got) == typed(want), differences(typed(got), typed(want))


@pytest.mark.parametrize("kind", ["mariadb", "postgres"])
def test_extreme_dates_and_timestamps_merge_exactly_through_log_and_chunks(kind, request, spark, catalogs):
    case = _Case(kind, request)
    case.execute(case.table, case.chunk_rows)  # history only the dump has
    if kind == "postgres":
        case.execute(PG_FAR_TABLE, _far_rows(1))
    capture = case.make().start()
    capture.wait_running()
    config = capture.config.model_copy(
        update={"merge": catalogs["hadoop"].model_copy(update={"namespace": f"dates_{kind}"})}
    )
    target = f"`logtide`.`dates_{kind}`.`{case.schema}__days`"
    changelog = f"`logtide`.`dates_{kind}`.`{case.schema}__days__changelog`"

    # log events before a dump in chunks of two rows (chunk bounds are these dates), more after it:
    # the target holds the chunks' values, and the log's where it changed rows after the dump
    case.execute(*case.log)
    case.landed(capture)
    before_dump = case.state()
    _dump(capture, [f"{case.schema}.days"] + ([f"{case.schema}.far"] if kind == "postgres" else []))
    case.execute(*case.later)
    if kind == "postgres":
        case.execute(_far_rows(11))
    case.landed(capture)
    _merge(spark, config)
    _assert_target(spark, target, case.state())
    # the events before the dump, as the changelog holds them: the rows they wrote, exactly
    logged = spark.sql(
        f"SELECT * FROM {changelog} WHERE _source = 'log' AND _op <> 'd'"
        f" AND _lsn < (SELECT min(_lsn) FROM {changelog} WHERE _source = 'chunk')"
    )
    rows = {k: {c: v for c, v in row.items() if not c.startswith("_")} for k, row in _rows(logged).items()}
    assert len(rows) == 4 and typed(rows) == typed({k: before_dump[k] for k in rows})

    # repair: a row the source never had, inside a chunk's range, goes; a lost one comes back
    columns = spark.table(target).columns
    clone = [
        "DATE'1000-01-03' AS d" if c == "d" else "CAST(0 AS DECIMAL(38,0)) AS _lsn" if c == "_lsn" else f"`{c}`"
        for c in columns
    ]
    spark.sql(f"INSERT INTO {target} SELECT {', '.join(clone)} FROM {target} WHERE d = DATE'1000-01-01'")
    spark.sql(f"DELETE FROM {target} WHERE d = DATE'9999-12-31'")
    _dump(capture, [f"{case.schema}.days"])
    case.landed(capture)
    report = _merge(spark, config, [f"{case.schema}.days"])[f"{case.schema}.days"]
    assert report["repair_deletes"] == 1
    want = case.state()
    _assert_target(spark, target, want)
    assert typed(changelog_replay(spark, changelog, ("d",))) == typed(want)

    if kind == "postgres":  # infinity, BC and past 9999, from chunks (ids 1..) and from the log (ids 11..)
        far = iceberg_state(spark, f"`logtide`.`dates_{kind}`.`public__far`")
        expected = {
            (first + i,): {"id": first + i, "d": d, "ts": ts, "tz": tz}
            for first in (1, 11)
            for i, (d, ts, tz) in enumerate(PG_FAR_EXPECTED)
        }
        assert far == expected, differences(far, expected)


def test_a_spark_error_in_a_table_ends_the_merge_with_one_error_line(catalogs, tmp_path):
    """`logtide merge` as an operator runs it, on a table whose merge Spark fails (here Spark's own
    refusal of dates before 1582, which a user's spark_conf brings back): exit 1 (a table failed,
    the others were merged), and the output ends with one `error:` line naming the table, the step
    and Spark's reason; no traceback."""
    days = TableSchema("db", "days", (Column("id", pa.int32(), "int"), Column("d", pa.date32(), "date")), ("id",))
    landing = Landing(tmp_path, catalogs, "failing")
    landing.commit(100, days, Change(Lsn(100), Op.CREATE, None, (1, date(1000, 1, 1))))
    config = landing.config_file(
        spark_master="local[1]", spark_conf={"spark.sql.parquet.datetimeRebaseModeInRead": "EXCEPTION"}
    )
    cmd = [sys.executable, "-m", "capture.cli", "--config", str(config), "merge", "--source", "src"]
    # spark-submit sends the driver's stderr (our log and the error) to its stdout
    done = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    output = done.stdout
    assert done.returncode == 1, output[-3000:]
    last = [line for line in output.splitlines() if line.strip()][-1]
    assert last.startswith("error: db.days: the merge failed in step "), output[-3000:]
    assert "READ_ANCIENT_DATETIME" in last and "run the merge again" in last
    assert "Traceback" not in output
