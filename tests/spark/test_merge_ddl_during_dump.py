"""DDL on a MariaDB table while a dump of it runs in small chunks, capture lands the log
(`column_rewrites: accept`) and a workload writes: between two chunks (before LOW), inside a
chunk's window before its SELECT (after LOW) and after it (before HIGH). After capture, the dump
and a merge, the Iceberg target holds the source's rows on the source's columns."""

from __future__ import annotations

import pytest

from tests.spark.ddl_dumps import FILL, TABLE, dump_through, merged_differences

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("drop_database_afterwards")]

NARROW = "SET SESSION sql_mode = ''; ALTER TABLE ledger MODIFY s VARCHAR(3) DEFAULT 'abc'"
CASES = [
    # a rewrite (capture accepts it, the dump must repair): main kept 's63xyzw' where the source has 's63'
    ("narrowed VARCHAR", "before LOW", NARROW),
    ("narrowed VARCHAR", "before HIGH", NARROW),
    (
        "column added with a default, in the middle",
        "after LOW",
        "ALTER TABLE ledger ADD COLUMN a INT DEFAULT 7 AFTER v",
    ),
    ("column renamed", "before HIGH", "ALTER TABLE ledger RENAME COLUMN c TO c2"),
    ("column dropped", "after LOW", "ALTER TABLE ledger DROP COLUMN c"),
    ("INT to BIGINT", "before LOW", "ALTER TABLE ledger MODIFY c BIGINT DEFAULT 3"),
    ("key INT to BIGINT", "before HIGH", "ALTER TABLE ledger MODIFY id BIGINT"),
    ("charset", "after LOW", "ALTER TABLE ledger MODIFY l VARCHAR(10) CHARACTER SET utf8mb4 DEFAULT 'caf\u00e9'"),
    ("ENUM member added", "before HIGH", "ALTER TABLE ledger MODIFY e ENUM('a', 'b', 'c') DEFAULT 'b'"),
    ("SET '' member added", "after LOW", "ALTER TABLE ledger MODIFY st SET('', 'x', 'y') DEFAULT 'x,y'"),
    ("primary key replaced", "before LOW", "ALTER TABLE ledger DROP PRIMARY KEY, ADD PRIMARY KEY (id, c)"),
    ("truncate", "before HIGH", "TRUNCATE TABLE ledger"),
]


READONLY = [  # read-only watermarks: LOW opens the chunk's snapshot, an ALTER after it fails the SELECT
    ("narrowed VARCHAR", "after LOW", NARROW, "readonly"),
    ("column added with a default, in the middle", "before HIGH", CASES[2][2], "readonly"),
]


@pytest.mark.parametrize(
    ("what", "where", "sql", "watermarks"),
    [(*c, "table") for c in CASES] + READONLY,
    ids=[f"{c[0]}, {c[1]}" for c in CASES] + [f"{c[0]}, {c[1]}, readonly" for c in READONLY],
)
def test_ddl_during_a_dump_merges_to_the_source(
    mariadb, database, make_capture, merge_config, spark, what, where, sql, watermarks
):
    mariadb.execute(TABLE, FILL, database=database)
    capture = make_capture([f"{database}.*"], column_rewrites="accept", watermarks=watermarks).start()
    capture.wait_running()
    dump_through(mariadb, database, capture, 4, where, sql)
    diff = merged_differences(spark, merge_config(capture.config), mariadb, database)
    assert not diff, f"{what}, {where}: the target differs from the source:\n{diff}"


def test_rows_given_a_new_empty_set_member_between_chunks_land_as_the_log_spells_them(
    mariadb, database, make_capture, merge_config, spark
):
    """`{'', x}` of `SET('', 'x', 'y')` reads 'x' in a plain SELECT and lands as ',x' (README, Keys and
    their order). The member added and rows given it between two chunks: on main the next chunk's
    SELECT still spelled the SET the old way (its expression came from the table as described
    before the ALTER, and the ALTER changed no column type the dump compared), so those rows landed
    as 'x' where the log spells them ',x'."""
    mariadb.execute(TABLE, FILL, database=database)
    capture = make_capture([f"{database}.*"], column_rewrites="accept").start()
    capture.wait_running()
    members = "ALTER TABLE ledger MODIFY st SET('', 'x', 'y') DEFAULT 'x,y'"
    given = "UPDATE ledger SET st = ',x' WHERE id BETWEEN 76 AND 100"  # chunk 4's rows
    dump_through(mariadb, database, capture, 4, "before LOW", f"{members}; {given}")
    spelled = {"st": "IF((st & 1) <> 0, CONCAT(',', st), st)"}
    diff = merged_differences(spark, merge_config(capture.config), mariadb, database, spelled=spelled)
    assert not diff, f"the target differs from the source:\n{diff}"
