"""The tables of a source merge at once (merge.parallel_tables) in one Spark application, and a
table whose merge fails while the others run stops and undoes none of them."""

from __future__ import annotations

import pyarrow as pa
import pytest

from capture.events import Change, Column, Lsn, Op, TableSchema
from capture.merge.app import run_merge
from tests.spark.landing import Landing
from tests.spark.merging import iceberg_state

pytestmark = pytest.mark.spark

COLUMNS = (
    Column("id", pa.int32(), "integer"),
    Column("title", pa.string(), "text"),
    Column("body", pa.string(), "text"),
)
TABLES = [TableSchema("db", name, COLUMNS, ("id",)) for name in ("t0", "t1", "bad")]


def test_tables_merge_at_once_and_a_failing_one_stops_none_of_the_others(spark, catalogs, tmp_path):
    landing = Landing(tmp_path, catalogs, "parallel")
    merge = landing.config.merge.model_copy(update={"parallel_tables": 3})
    config = landing.config.model_copy(update={"merge": merge})
    expected: dict[str, dict] = {t.table: {} for t in TABLES}
    for major in range(100, 1100, 10):  # 100 transactions, each touching every table
        for table in TABLES:
            n = major // 10
            rows = [(n, f"title {n}", 'it\'s "quoted" ü'), (n - 5, f"changed at {major}", None)]
            changes = [Change(Lsn(major, 0), Op.CREATE, None, rows[0])]
            if n - 5 in expected[table.table]:
                old = expected[table.table][n - 5]
                changes.append(Change(Lsn(major, 1), Op.UPDATE, tuple(old.values()), rows[1]))
                expected[table.table][n - 5] = dict(zip(("id", "title", "body"), rows[1], strict=True))
            expected[table.table][n] = dict(zip(("id", "title", "body"), rows[0], strict=True))
            landing.commit(major, table, *changes)
    # db.bad's target holds `title` as int: the merge refuses to change the type, while t0 and t1 run
    spark.sql("CREATE NAMESPACE IF NOT EXISTS logtide.parallel")
    spark.sql(
        "CREATE TABLE logtide.parallel.db__bad (id int, title int, body string, _lsn decimal(38,0),"
        " _applied_at timestamp) USING iceberg"
    )
    spark.sql("INSERT INTO logtide.parallel.db__bad VALUES (1, 7, 'kept', 5, current_timestamp())")

    report = run_merge(spark, config, "src")

    assert [t["table"] for t in report["tables"]] == ["db.bad", "db.t0", "db.t1"]  # every table, in order
    (failed,) = report["failed"]
    assert failed["table"] == "db.bad" and "'title'" in failed["failed"]
    for name in ("t0", "t1"):
        assert iceberg_state(spark, f"logtide.parallel.db__{name}") == {(k,): v for k, v in expected[name].items()}
    assert iceberg_state(spark, "logtide.parallel.db__bad") == {(1,): {"id": 1, "title": 7, "body": "kept"}}
    merged = [t for t in report["tables"] if t["table"] != "db.bad"]
    # the two tables ran at once: the run took less than their merges one after the other
    assert report["seconds"] < sum(t["seconds"] for t in merged), report
