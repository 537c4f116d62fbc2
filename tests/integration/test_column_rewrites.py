"""ALTER TABLE clauses that give every existing row a new value with no row events (MariaDB logs
the statement only): `ADD COLUMN ... DEFAULT`, `ADD ... NOT NULL`, a generated column, `RENAME
COLUMN`, `CHANGE a b`. On main capture landed them as DDL history and went on: the landed rows
(and the merge's targets) showed NULL for the new column, and nothing under a renamed column's new
name, in every row no later change carried. Now capture stops at them on a captured table
(`column_rewrites: accept` goes on with a warning; a dump repairs the table)."""

from __future__ import annotations

import pytest

from capture.dump.reconcile import apply, reconcile_table
from capture.sources.mysql.column_rewrites import column_rewrite

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("drop_database_afterwards")]


def _select(mariadb, database: str, table: str) -> list[dict]:
    with mariadb.connect(database) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table} ORDER BY id")
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _landed(capture, schema: str, table: str, columns: list[str]) -> list[dict]:
    state = apply(reconcile_table(capture.zone, schema, table)[0])
    rows = [{c: row.get(c) for c in columns} for row in state.values()]
    return sorted(rows, key=lambda r: r["id"])


def test_clauses_parsed():
    def clauses(statement: str) -> tuple[str, ...]:
        found = column_rewrite(statement, "d")
        return () if found is None else found.clauses

    for rewrites in (
        "ALTER TABLE t ADD COLUMN c INT NOT NULL DEFAULT 5",
        "ALTER TABLE t ADD c VARCHAR(10) DEFAULT 'x' AFTER id",
        "ALTER TABLE t ADD COLUMN IF NOT EXISTS c INT NOT NULL",
        "ALTER TABLE t ADD COLUMN c INT AS (id * 2) VIRTUAL",
        "ALTER TABLE t ADD COLUMN c INT GENERATED ALWAYS AS (id + 1) STORED",
        "ALTER TABLE t ADD COLUMN c TIMESTAMP",
        "ALTER TABLE t ADD COLUMN c SERIAL",
        "ALTER TABLE t ADD COLUMN c BIGINT SERIAL DEFAULT VALUE",
        "ALTER TABLE t ADD (a INT, b INT DEFAULT 1)",
        "ALTER TABLE t ADD INDEX (v), RENAME COLUMN v TO w",
        "ALTER TABLE t CHANGE v w INT",
        "ALTER TABLE t CHANGE COLUMN v v INT AS (id * 3)",
        "ALTER TABLE t MODIFY v INT AS (id * 3) PERSISTENT",
        "ALTER ONLINE TABLE `d`.`t` ADD COLUMN c INT DEFAULT 0, ALGORITHM=INSTANT",
    ):
        assert clauses(rewrites), rewrites
    for keeps in (
        "ALTER TABLE t ADD COLUMN c INT",
        "ALTER TABLE t ADD COLUMN c INT NULL DEFAULT NULL",
        "ALTER TABLE t ADD c TIMESTAMP NULL",
        "ALTER TABLE t ADD INDEX i (v), ADD UNIQUE KEY u (v), ADD CONSTRAINT c CHECK (v > 0)",
        "ALTER TABLE t ADD PRIMARY KEY (id), DROP COLUMN v",
        "ALTER TABLE t ALTER COLUMN v SET DEFAULT 5",
        "ALTER TABLE t MODIFY v BIGINT NOT NULL DEFAULT 3",  # a type (and a default for new rows)
        "ALTER TABLE t CHANGE v V INT",  # column names are case-insensitive
        "ALTER TABLE t COMMENT 'add column c int default 5'",
        "ALTER TABLE t ADD COLUMN s TIMESTAMP(6) AS ROW START INVISIBLE, ADD SYSTEM VERSIONING",
        "ALTER TABLE t RENAME TO t2",
        "ALTER TABLE t ADD PARTITION (PARTITION p3 VALUES LESS THAN (40))",
        "CREATE TABLE t (id INT, c INT NOT NULL DEFAULT 5)",
    ):
        assert clauses(keeps) == (), keeps
    assert column_rewrite("ALTER TABLE t ADD COLUMN c INT DEFAULT 5", "d", thread_specific=True) is None


def test_an_alter_that_rewrites_rows_stops_capture(mariadb, database, start_capture):
    """On main the landed t showed c = None for rows 1 and 2 (the source shows 5), and after the
    RENAME COLUMN no `w` for them (the source shows their old v there)."""
    capture = start_capture("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    mariadb.execute("INSERT INTO t VALUES (1, 1), (2, 2)", database=database)
    capture.wait_events(database, "t", 2)
    mariadb.execute(
        "ALTER TABLE t ADD COLUMN n INT NULL",  # NULL in every row: passes
        "ALTER TABLE t ADD COLUMN c INT NOT NULL DEFAULT 5",
        "INSERT INTO t (id, v) VALUES (3, 3)",
        database=database,
    )
    assert _select(mariadb, database, "t")[0] == {"id": 1, "v": 1, "n": None, "c": 5}
    assert capture.wait_exit() == 2
    log = capture.log()
    assert "ColumnRewriteError" in log and f"{database}.t" in log and "ADD c" in log
    for way_out in ("column_rewrites: accept", "dump"):
        assert way_out in log
    assert len(capture.events(database, "t")) == 2
    assert capture.run_to_exit() == 2  # stops there again

    capture.set_source(column_rewrites="accept")
    capture.start()
    capture.wait_events(database, "t", 3)
    mariadb.execute("ALTER TABLE t RENAME COLUMN v TO w", "INSERT INTO t (id, w) VALUES (4, 4)", database=database)
    capture.wait_events(database, "t", 4)
    log = capture.log()
    assert log.count("capture.column_rewrite_accepted") == 2 and "RENAME COLUMN v TO w" in log
    assert capture.stop() == 0
    # accepted: rows 1 and 2 keep the divergence until a dump
    assert _landed(capture, database, "t", ["id", "w", "c"]) == [
        {"id": 1, "w": None, "c": None},
        {"id": 2, "w": None, "c": None},
        {"id": 3, "w": None, "c": 5},  # landed before the rename: as v
        {"id": 4, "w": 4, "c": 5},
    ]
