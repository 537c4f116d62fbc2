"""Zero dates in a key (MariaDB without NO_ZERO_DATE / NO_ZERO_IN_DATE in sql_mode) land as NULL.

On main a full dump of such a table read two of its six rows and reported success: its first
chunk ended at the key (NULL, 2), the next chunk's `key > (NULL, 2)` returned nothing, and a
completed full dump's repair deletes target keys it did not return. Now the dump refuses the
table, naming the column and what to do."""

from __future__ import annotations

from datetime import date, datetime

import pytest

from capture.dump.control import DumpSettings
from capture.dump.engine import DumpRequest
from capture.errors import DumpInputError
from tests.integration.dumping import open_engine

pytestmark = pytest.mark.integration


def test_a_dump_refuses_zero_dates_in_a_key(mariadb, database, make_capture):
    with mariadb.connect(database) as conn, conn.cursor() as cursor:
        cursor.execute("SET SESSION sql_mode = ''")
        cursor.execute("CREATE TABLE z (d DATE NOT NULL, n INT NOT NULL, v INT, PRIMARY KEY (d, n))")
        cursor.execute(
            "INSERT INTO z VALUES ('0000-00-00', 1, 1), ('0000-00-00', 2, 2), ('2020-00-00', 1, 3),"
            " ('2020-01-01', 1, 4), ('2021-01-01', 1, 5), ('2022-01-01', 1, 6)"
        )
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    engine, source = open_engine(capture)
    try:
        with pytest.raises(DumpInputError) as refused:
            engine.run(DumpRequest(tables=[f"{database}.z"], settings=DumpSettings(chunk_size=2)))
        # the same table with real dates dumps whole
        mariadb.execute(
            "UPDATE z SET d = '2019-01-01' + INTERVAL v DAY WHERE d < '2019-01-01' OR MONTH(d) = 0", database=database
        )
        result = engine.run(DumpRequest(tables=[f"{database}.z"], settings=DumpSettings(chunk_size=2)))
    finally:
        source.close()
    message = str(refused.value)
    assert f"{database}.z" in message and "'d'" in message and "zero date" in message and "exclude" in message
    assert result["tables"][0]["rows"] == 6


def test_capture_stops_at_a_zero_date_in_a_key(mariadb, database, start_capture):
    """On main capture landed ('0000-00-00', 1) and ('2020-00-00', 1) both under the key (NULL, 1):
    the merge keeps one row per key. A zero date outside the key lands as NULL, as before."""
    capture = start_capture(
        "CREATE TABLE z (d DATE NOT NULL, n INT NOT NULL, v INT, PRIMARY KEY (d, n))",
        "CREATE TABLE ok (id INT PRIMARY KEY, d DATE NOT NULL)",
    )
    with mariadb.connect(database) as conn, conn.cursor() as cursor:
        cursor.execute("SET SESSION sql_mode = ''")
        cursor.execute("INSERT INTO ok VALUES (1, '0000-00-00')")
        cursor.execute("INSERT INTO z VALUES ('2020-01-01', 1, 1)")
        assert capture.wait_events(database, "ok", 1)[0]["after"]["d"] is None
        capture.wait_events(database, "z", 1)
        cursor.execute("INSERT INTO z VALUES ('0000-00-00', 1, 2), ('2020-00-00', 1, 3)")
    assert capture.wait_exit() == 2
    log = capture.log()
    assert f"{database}.z" in log and "zero date in key column 'd'" in log and "exclude" in log
    assert len(capture.events(database, "z")) == 1  # nothing of the refused transaction


# `sql_mode` ALLOW_INVALID_DATES stores days a month does not have ('2020-02-30', '2021-02-29',
# '2020-04-31'): any day 1-31 of any month. No date type can hold them. On main capture stopped at the
# first such DATE value anywhere in a captured table (`BinlogDecodeError ... day is out of range for
# month`), landed such a DATETIME as NULL, and a dump of either failed with Arrow's "Failed to parse
# string"; now they land as NULL on both paths, as zero dates do, and a key holding one is refused.
INVALID_DAYS = "CREATE TABLE bad (id INT PRIMARY KEY, d DATE, dt DATETIME(6), dt0 DATETIME, ts TIMESTAMP(6) NULL)"
INVALID_ROWS = (
    "INSERT INTO bad VALUES (1, '2020-02-30', '2020-04-31 10:00:00.5', '2021-02-29 00:00:00', '2020-02-29 01:00:00'),"
    " (2, '2020-02-29', '2020-02-29 23:59:59.999999', '2021-06-31 12:00:00', NULL),"
    " (3, '2021-09-31', '9999-11-31 00:00:00', '2000-02-29 00:00:00', NULL)"
)


def test_days_a_month_does_not_have_land_as_null_from_the_log_and_the_dump(mariadb, database, make_capture):
    from capture.sources import open_chunk_source

    mariadb.execute(INVALID_DAYS, database=database)
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    mariadb.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES'", INVALID_ROWS, database=database)
    mariadb.execute("INSERT INTO bad (id) VALUES (4)", database=database)  # capture goes on past them
    events = capture.wait_events(database, "bad", 4)
    source = open_chunk_source("src", capture.config.source("src"))
    try:
        rows = source.select_chunk(source.describe(database, "bad"), None, None, None, 100).to_pylist()
    finally:
        source.close()
    assert rows == [e["after"] for e in events]
    assert [(r["d"], r["dt"], r["dt0"]) for r in rows[:3]] == [
        (None, None, None),
        (date(2020, 2, 29), datetime(2020, 2, 29, 23, 59, 59, 999999), None),
        (None, None, datetime(2000, 2, 29)),
    ]


def test_a_day_its_month_does_not_have_in_a_key_is_refused(mariadb, database, make_capture):
    mariadb.execute(
        "SET SESSION sql_mode = 'ALLOW_INVALID_DATES'",
        "CREATE TABLE z (d DATE NOT NULL, n INT NOT NULL, v INT, PRIMARY KEY (d, n))",
        "INSERT INTO z VALUES ('2020-01-01', 1, 1), ('2020-02-30', 1, 2), ('2020-02-30', 2, 3), ('2020-03-01', 1, 4)",
        database=database,
    )
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    engine, source = open_engine(capture)
    try:
        with pytest.raises(DumpInputError) as refused:
            engine.run(DumpRequest(tables=[f"{database}.z"], settings=DumpSettings(chunk_size=2)))
    finally:
        source.close()
    assert f"{database}.z" in str(refused.value) and "'d'" in str(refused.value)
    assert "a day its month does not have" in str(refused.value)
    mariadb.execute(
        "SET SESSION sql_mode = 'ALLOW_INVALID_DATES'", "INSERT INTO z VALUES ('2021-04-31', 1, 5)", database=database
    )
    assert capture.wait_exit() == 2
    log = capture.log()
    assert f"{database}.z" in log and "key column 'd'" in log and "a day its month does not have" in log
    assert capture.events(database, "z") == []
