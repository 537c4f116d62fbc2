"""ALTER TABLE clauses that give every existing row a new value with no row events (MariaDB logs
the statement only): `ADD COLUMN ... DEFAULT`, `ADD ... NOT NULL`, a generated column, `RENAME
COLUMN`, `CHANGE a b`. On main capture landed them as DDL history and went on: the landed rows
(and the merge's targets) showed NULL for the new column, and nothing under a renamed column's new
name, in every row no later change carried. Now capture stops at them on a captured table
(`column_rewrites: accept` goes on with a warning; a dump repairs the table)."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from capture.dump.reconcile import apply, reconcile_table
from capture.landing.log_writer import SCHEMA_HISTORY_SCHEMA
from capture.sources.mysql.column_rewrites import column_rewrite, columns_after, landed_column_types, table_charset
from capture.sources.mysql.column_types import Collations, ColumnType, charset_name, definition, from_definition
from capture.sources.mysql.table_charsets import may_change
from tests.servers import wait_for

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


def test_type_changes_judged():
    """MODIFY / CHANGE of a type and CONVERT TO CHARACTER SET against the types before
    (`column_types`): what may give a value another value is a rewrite, a provably lossless
    widening is not."""
    before = {
        "v": ColumnType("varchar", length=10, charset="utf8mb4"),
        "l": ColumnType("varchar", length=10, charset="latin1"),
        "t": ColumnType("text", length=65535, charset="utf8mb4"),
        "n": ColumnType("int", rank=4),
        "k": ColumnType("int", rank=4, nullable=False),
        "d": ColumnType("decimal", precision=10, scale=4),
        "e": ColumnType("enum", values=("a", "b", "c"), charset="utf8mb4"),
        "f": ColumnType("double"),
        "ts": ColumnType("datetime", scale=6),
    }

    def clauses(statement: str, default: str = "utf8mb4") -> tuple[str, ...]:
        found = column_rewrite(statement, "d", columns=lambda table: before, default_charset=lambda table: default)
        return () if found is None else found.clauses

    for rewrites in (
        "ALTER TABLE t MODIFY v VARCHAR(3)",
        "ALTER TABLE t MODIFY COLUMN n TINYINT",
        "ALTER TABLE t MODIFY n INT UNSIGNED",
        "ALTER TABLE t MODIFY n INT NOT NULL",  # a NULL becomes 0
        "ALTER TABLE t MODIFY d DECIMAL(10,2)",
        "ALTER TABLE t MODIFY d DECIMAL(8,4)",
        "ALTER TABLE t MODIFY e ENUM('a','x','c')",  # b renamed: its rows become ''
        "ALTER TABLE t MODIFY f FLOAT",
        "ALTER TABLE t MODIFY v CHAR(20)",  # trailing spaces dropped
        "ALTER TABLE t MODIFY t VARCHAR(100)",
        "ALTER TABLE t MODIFY ts DATETIME",
        "ALTER TABLE t MODIFY ts TIMESTAMP(6)",  # another type; NOT NULL unless declared NULL
        "ALTER TABLE t CONVERT TO CHARACTER SET latin1",
        "ALTER TABLE t CHANGE COLUMN n n SMALLINT",
        "ALTER TABLE t MODIFY v VARCHAR(20) CHARACTER SET latin1",
        "ALTER TABLE t MODIFY n DOUBLE",  # not judged lossless: taken as a rewrite
        "ALTER TABLE t MODIFY unknown INT",  # a column capture has no type of
        "ALTER TABLE t MODIFY n GEOGRAPHY",
    ):
        assert clauses(rewrites), rewrites
    assert clauses("ALTER TABLE t MODIFY v VARCHAR(20)", default="latin1")  # the table's charset: latin1
    for keeps in (
        "ALTER TABLE t MODIFY v VARCHAR(20)",
        "ALTER TABLE t MODIFY v VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT 'x' COMMENT 'not null'",
        "ALTER TABLE t MODIFY v TEXT",
        "ALTER TABLE t MODIFY l VARCHAR(10) CHARACTER SET utf8mb4",
        "ALTER TABLE t MODIFY t MEDIUMTEXT",
        "ALTER TABLE t MODIFY n BIGINT",
        "ALTER TABLE t MODIFY n BIGINT NULL DEFAULT NULL",
        "ALTER TABLE t MODIFY n DECIMAL(12,0)",
        "ALTER TABLE t MODIFY k BIGINT NOT NULL",
        "ALTER TABLE t CHANGE n n BIGINT",
        "ALTER TABLE t MODIFY d DECIMAL(14,6)",
        "ALTER TABLE t MODIFY e ENUM('c','b','a','d')",  # reordered, one added: values kept by name
        "ALTER TABLE t MODIFY f DOUBLE",
        "ALTER TABLE t MODIFY ts DATETIME(6)",
        "ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4",
        "ALTER TABLE t CONVERT TO CHARSET 'utf8mb4' COLLATE 'utf8mb4_bin'",
        "ALTER TABLE t MODIFY l VARCHAR(12) CHARACTER SET 'utf8mb4', ALGORITHM=COPY, LOCK=SHARED",
        "ALTER TABLE t ADD COLUMN z INT NULL",
    ):
        assert clauses(keeps) == (), keeps
    history = [
        {"kind": "table", "schema": "d", "table": "t", "statement": None, "columns": [
            {"name": "n", "source_type": "int"}, {"name": "v", "source_type": "varchar"},
            {"name": "d", "source_type": "decimal(10,4)"}, {"name": "u", "source_type": "bigint unsigned"},
        ]},
        {"kind": "ddl", "schema": "d", "table": None, "statement": "ALTER TABLE t MODIFY v CHAR(9)", "columns": None},
        {"kind": "table", "schema": "d", "table": "o", "statement": None, "columns": []},
        {"kind": "ddl", "schema": "d", "table": None, "statement": "CREATE TABLE o2 LIKE o", "columns": None},
    ]  # fmt: skip
    landed, partial = landed_column_types(history, lambda table: "utf8mb4")
    assert set(landed) == {("d", "t")} and partial == {("d", "t")}  # o: named by a later statement
    assert landed["d", "t"]["n"] == ColumnType("int", rank=4, nullable=None) and landed["d", "t"]["v"].family == "char"
    assert landed["d", "t"]["u"].unsigned and landed["d", "t"]["d"].scale == 4
    for kept in before.values():  # the whole type, as the schema history's records carry it
        assert from_definition(definition(kept)) == kept
    quoted = ColumnType("set", values=("a,b", "it's", "\\", "é"), charset="latin1", nullable=False)
    assert from_definition(definition(quoted)) == quoted and from_definition("varchar") is None
    email = {"name": "Email", "source_type": "varchar", "definition": definition(ColumnType("varchar", length=255))}
    keeping = (  # name u, change none of its columns
        "CREATE UNIQUE INDEX IF NOT EXISTS u_email ON u (email)",
        "DROP INDEX u_email ON d.u",
        "OPTIMIZE TABLE u",
        "CREATE DEFINER=`root`@`localhost` TRIGGER u_bi BEFORE INSERT ON u FOR EACH ROW SET NEW.email = 'u'",
        "CREATE OR REPLACE ALGORITHM=MERGE VIEW uv AS SELECT * FROM u",
        "ALTER TABLE orders ADD FOREIGN KEY (uid) REFERENCES u (id)",
        "ALTER TABLE u MODIFY email VARCHAR(320) NOT NULL",
        "TRUNCATE TABLE u",
    )
    history = [{"kind": "table", "schema": "d", "table": "u", "statement": None, "columns": [email]}]
    history += [{"kind": "ddl", "schema": "d", "table": None, "statement": s, "columns": None} for s in keeping]
    landed, partial = landed_column_types(history, lambda table: None)
    assert landed == {("d", "u"): {"email": ColumnType("varchar", length=320, nullable=False)}} and not partial
    replacing_u = ("ALTER TABLE u2 RENAME TO u", "RENAME TABLE u TO u1, u2 TO u", "CREATE OR REPLACE TABLE u (i INT)")
    for replacing in replacing_u:
        moved = [*history, {"kind": "ddl", "schema": "d", "table": None, "statement": replacing, "columns": None}]
        assert landed_column_types(moved, lambda table: None)[0] == {}, replacing
    after = columns_after(
        "ALTER TABLE t MODIFY v VARCHAR(20), ADD z BIGINT, DROP f, RENAME COLUMN n TO m", "d", before, str
    )
    assert after["v"].length == 20 and after["z"].rank == 5 and "f" not in after and after["m"] == before["n"]


def test_a_narrowing_modify_stops_capture_and_a_widening_does_not(mariadb, database, make_capture):
    """A MODIFY that narrows or converts a type changes stored values with no row events (outside
    strict mode silently: `sql_mode=''`). On main capture went on: the landed row 1 kept
    'abcdefgh', 1000, 1.2346, 'a' and 1.123456789 where the source shows 'abc', 127, 1.2, '' and
    1.12346. A lossless widening (VARCHAR(10) to VARCHAR(20), INT to BIGINT, a nullable column
    added) keeps capture running."""
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10), n INT, d DECIMAL(10,4), e ENUM('a','b'), f DOUBLE)"
        " DEFAULT CHARSET utf8mb4",
        database=database,
    )
    capture = make_capture([f"{database}.t"]).start()
    capture.wait_running()
    mariadb.execute("INSERT INTO t VALUES (1, 'abcdefgh', 1000, 1.2346, 'a', 1.123456789)", database=database)
    capture.wait_events(database, "t", 1)
    mariadb.execute(
        "ALTER TABLE t MODIFY v VARCHAR(20), MODIFY d DECIMAL(12,4), MODIFY e ENUM('b','a','c'), ADD COLUMN w INT NULL",
        "INSERT INTO t (id, v) VALUES (2, 'x')",
        "ALTER TABLE t MODIFY v VARCHAR(30)",  # no row in between: judged against the ALTER before
        "INSERT INTO t (id, v) VALUES (3, 'y')",
        database=database,
    )
    capture.wait_events(database, "t", 3)
    assert capture.stop() == 0
    capture.start()  # no row of t read since: the types as the landed schema history shows them
    capture.wait_running()
    mariadb.execute("ALTER TABLE t MODIFY n BIGINT", "INSERT INTO t (id, v) VALUES (4, 'z')", database=database)
    capture.wait_events(database, "t", 4)
    assert capture.process is not None and capture.process.poll() is None

    with mariadb.connect(database) as conn, conn.cursor() as cursor:
        cursor.execute("SET SESSION sql_mode = ''")
        cursor.execute(
            "ALTER TABLE t MODIFY v VARCHAR(3), MODIFY n TINYINT, MODIFY d DECIMAL(12,1), MODIFY e ENUM('x','b','c'),"
            " MODIFY f FLOAT"
        )
        cursor.execute("INSERT INTO t (id, v) VALUES (5, 'q')")
    assert _select(mariadb, database, "t")[0] == {
        "id": 1, "v": "abc", "n": 127, "d": Decimal("1.2"), "e": "", "f": pytest.approx(1.12346, abs=1e-5), "w": None
    }  # fmt: skip
    wait_for(lambda: capture.process.poll() is not None, 30, what="capture to stop")
    assert capture.process.returncode == 2
    log = capture.log()
    assert "ColumnRewriteError" in log and f"{database}.t" in log
    for clause in (
        "MODIFY v from VARCHAR(30)",
        "MODIFY n from BIGINT",
        "MODIFY d from DECIMAL(12,4)",
        "MODIFY e",
        "MODIFY f",
    ):
        assert clause in log, clause
    for way_out in ("column_rewrites: accept", "dump"):
        assert way_out in log
    assert len(capture.events(database, "t")) == 4  # nothing of the ALTER or after it
    assert capture.run_to_exit() == 2  # stops there again


def _wait_statement(capture, text: str) -> None:
    """Wait until a DDL statement containing `text` has landed in the schema history (capture
    stopping first fails, with its log)."""

    def landed() -> bool:
        if capture.process.poll() is not None:
            raise AssertionError(f"capture exited with {capture.process.returncode}:\n{capture.log()[-3000:]}")
        history = capture.zone.read_schema_history()
        return history is not None and any(text in (s or "") for s in history["statement"].to_pylist())

    wait_for(landed, 30, what=f"{text!r} to land")


def test_a_restart_judges_the_whole_types_before(mariadb, database, make_capture):
    """After a restart, before capture has read a row of the table, a MODIFY is judged against the
    whole types the landed schema history records (as the table map gave them: lengths, charsets,
    ENUM values, nullability). On main the history named no string length nor nullability, and
    capture stopped at the ordinary widening `MODIFY email VARCHAR(320) NOT NULL` ("cannot tell the
    type before"); narrowings of a VARCHAR, an ENUM and an INT across a restart still stop it."""
    mariadb.execute(
        "CREATE TABLE users (id INT PRIMARY KEY, email VARCHAR(255) NOT NULL, kind ENUM('a','b') NOT NULL,"
        " n INT, note VARCHAR(10)) DEFAULT CHARSET utf8mb4",
        database=database,
    )
    capture = make_capture([f"{database}.users"]).start()
    capture.wait_running()
    mariadb.execute("INSERT INTO users VALUES (1, 'ann@example.com', 'b', 1000, 'abcdefgh')", database=database)
    capture.wait_events(database, "users", 1)
    assert capture.stop() == 0

    def restart() -> int:
        at = len(capture.log())
        capture.start()
        capture.wait_running()
        return at

    def running(at: int) -> None:
        assert capture.process is not None and capture.process.poll() is None, capture.log()[at:]
        assert "ColumnRewriteError" not in capture.log()[at:]

    # widenings, each after a restart with no row of users read: capture goes on, later rows land
    at = restart()
    mariadb.execute(
        "ALTER TABLE users MODIFY email VARCHAR(320) NOT NULL",
        "CREATE INDEX users_email ON users (email)",  # names users, changes no column
        database=database,
    )
    _wait_statement(capture, "users_email")
    running(at)
    assert capture.stop() == 0  # no row since: the next start replays these on the landed record
    at = restart()
    mariadb.execute(
        "ALTER TABLE users MODIFY email VARCHAR(320) NULL, MODIFY kind ENUM('c','b','a') NOT NULL",
        "INSERT INTO users VALUES (2, 'bob@example.com', 'c', 2, 'x')",
        database=database,
    )
    capture.wait_events(database, "users", 2)
    running(at)
    assert capture.stop() == 0
    at = restart()
    mariadb.execute(
        "ALTER TABLE users MODIFY note VARCHAR(10) CHARACTER SET utf8mb4 NULL DEFAULT 'n'",  # the same type
        "INSERT INTO users VALUES (3, 'cy@example.com', 'a', 3, 'y')",
        database=database,
    )
    capture.wait_events(database, "users", 3)
    running(at)
    assert capture.stop() == 0

    # narrowings after a restart: capture stops, nothing of them lands; accepted once to go on
    rows = 3
    for statement, clause in (
        ("ALTER TABLE users MODIFY email VARCHAR(5)", "MODIFY email from VARCHAR(320)"),
        ("ALTER TABLE users MODIFY kind ENUM('x','b','a') NOT NULL", "MODIFY kind from ENUM('c', 'b', 'a')"),
        ("ALTER TABLE users MODIFY n TINYINT", "MODIFY n from INT to TINYINT"),
        ("ALTER TABLE users MODIFY note VARCHAR(10) NOT NULL", "NOT NULL: a NULL becomes"),
    ):
        at = len(capture.log())
        capture.start()
        capture.wait_running()
        with mariadb.connect(database) as conn, conn.cursor() as cursor:
            cursor.execute("SET SESSION sql_mode = ''")
            cursor.execute(statement)
            cursor.execute(f"INSERT INTO users (id, email, kind) VALUES ({rows + 1}, 'z', 'b')")
        assert capture.wait_exit() == 2, capture.log()[at:]
        log = capture.log()[at:]
        assert "ColumnRewriteError" in log and f"{database}.users" in log and clause in log, log
        assert "cannot tell the type before" not in log
        assert len(capture.events(database, "users")) == rows  # nothing of the ALTER or after it
        capture.set_source(column_rewrites="accept")
        capture.start()
        rows += 1
        capture.wait_events(database, "users", rows)
        assert capture.stop() == 0
        capture.set_source(column_rewrites="refuse")
    assert _select(mariadb, database, "users")[0] == {
        "id": 1, "email": "ann@e", "kind": "b", "n": 127, "note": "abcdefgh"
    }  # fmt: skip


def _as_landed_before_definitions(capture) -> None:
    """Rewrite the schema history as a version that recorded no column definitions wrote it."""
    old_columns = pa.list_(pa.struct([("name", pa.string()), ("type", pa.string()), ("source_type", pa.string())]))
    at = SCHEMA_HISTORY_SCHEMA.get_field_index("columns")
    schema = SCHEMA_HISTORY_SCHEMA.set(at, pa.field("columns", old_columns))
    for path in sorted(capture.zone.history_dir.glob("*.parquet")):
        rows = pq.read_table(path).to_pylist()
        for row in rows:
            for column in row["columns"] or []:
                column.pop("definition")
        pq.write_table(pa.Table.from_pylist(rows, schema), path)


def test_an_older_landing_zone_falls_back_and_catches_up(mariadb, database, make_capture):
    """A landing zone whose schema history has no column definitions (landed by an older version):
    after a restart a MODIFY of a string type is judged as before (refused: the type before is not
    known), with a warning that says why; the next row of the table read lands a record with them,
    and a widening after the next restart goes on."""
    mariadb.execute(
        "CREATE TABLE users (id INT PRIMARY KEY, email VARCHAR(255) NOT NULL) DEFAULT CHARSET utf8mb4",
        database=database,
    )
    capture = make_capture([f"{database}.users"]).start()
    capture.wait_running()
    mariadb.execute("INSERT INTO users VALUES (1, 'ann@example.com')", database=database)
    capture.wait_events(database, "users", 1)
    assert capture.stop() == 0
    _as_landed_before_definitions(capture)

    at = len(capture.log())
    capture.start()
    capture.wait_running()
    mariadb.execute("ALTER TABLE users MODIFY email VARCHAR(320) NOT NULL", database=database)
    assert capture.wait_exit() == 2
    log = capture.log()[at:]
    assert "capture.column_types_partly_known" in log and "older landing zone" in log
    assert "ColumnRewriteError" in log and "cannot tell the type before" in log
    capture.set_source(column_rewrites="accept")
    capture.start()
    mariadb.execute("INSERT INTO users VALUES (2, 'bob@example.com')", database=database)
    capture.wait_events(database, "users", 2)
    assert capture.stop() == 0
    capture.set_source(column_rewrites="refuse")

    at = len(capture.log())
    capture.start()
    capture.wait_running()
    mariadb.execute(
        "ALTER TABLE users MODIFY email VARCHAR(400) NOT NULL",
        "INSERT INTO users VALUES (3, 'cy@example.com')",
        database=database,
    )
    capture.wait_events(database, "users", 3)
    assert capture.process.poll() is None and "ColumnRewriteError" not in capture.log()[at:]
    assert capture.stop() == 0


def test_the_default_charset_is_the_one_at_the_alter(mariadb, database, make_capture):
    """A MODIFY of a string column naming no charset gives it the table's default charset at that
    moment. Capture stopped while the default charset changed around the MODIFY: on main it judged
    the MODIFY with the default the catalog showed when capture read it, later: it passed a MODIFY
    that turned '中' into '?' (a default latin1 then, utf8mb4 again since; the landed row kept '中'),
    and stopped at a lossless widening (a default latin1 then, ascii since). Now capture stops or
    runs on as it would have, had it read them live."""
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10)) DEFAULT CHARSET utf8mb4", database=database)
    capture = make_capture([f"{database}.t"]).start()
    capture.wait_running()
    mariadb.execute("INSERT INTO t VALUES (1, '中')", "ALTER TABLE t DEFAULT CHARSET latin1", database=database)
    _wait_statement(capture, "DEFAULT CHARSET latin1")  # read live
    assert capture.stop() == 0

    # the default charset read before (latin1) is not the catalog's now (utf8mb4): not trusted
    with mariadb.connect(database) as conn, conn.cursor() as cursor:
        cursor.execute("SET SESSION sql_mode = ''")
        cursor.execute("ALTER TABLE t MODIFY v VARCHAR(10)")
        cursor.execute("ALTER TABLE t DEFAULT CHARSET utf8mb4")
        cursor.execute("INSERT INTO t VALUES (2, 'x')")
    assert _select(mariadb, database, "t")[0] == {"id": 1, "v": "?"}
    at = len(capture.log())
    assert capture.run_to_exit(timeout=30) == 2, capture.log()[at:]
    assert "ColumnRewriteError" in capture.log()[at:] and "MODIFY v" in capture.log()[at:]
    assert len(capture.events(database, "t")) == 1
    capture.set_source(column_rewrites="accept")
    capture.start()
    capture.wait_events(database, "t", 2)
    assert capture.stop() == 0
    capture.set_source(column_rewrites="refuse")

    # a widening in latin1 (v is latin1 now), the default set to latin1 before it and to ascii after
    mariadb.execute(
        "ALTER TABLE t DEFAULT CHARSET latin1",
        "ALTER TABLE t MODIFY v VARCHAR(20)",
        "ALTER TABLE t DEFAULT CHARSET ascii",
        "INSERT INTO t VALUES (3, 'y')",
        database=database,
    )
    at = len(capture.log())
    capture.start()
    capture.wait_events(database, "t", 3)
    assert "ColumnRewriteError" not in capture.log()[at:]
    assert capture.stop() == 0


def test_table_charset_parsed():
    """The default charset an ALTER TABLE gives its table (`table_charset`), and the DDL that may
    change it (`table_charsets.may_change`)."""
    for statement, charset in (
        ("ALTER TABLE t DEFAULT CHARSET latin1", "latin1"),
        ("ALTER TABLE t CHARACTER SET = 'utf8'", "utf8mb3"),
        ("ALTER TABLE t DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", "utf8mb4"),
        ("ALTER TABLE t COLLATE latin1_bin, MODIFY v VARCHAR(3)", "latin1"),
        ("ALTER TABLE t CONVERT TO CHARACTER SET ascii", "ascii"),
        ("ALTER TABLE t CONVERT TO CHARSET DEFAULT", None),
    ):
        assert table_charset(statement, "d") == (("d", "t"), charset), statement
    for statement in (
        "ALTER TABLE t MODIFY v VARCHAR(3) CHARACTER SET latin1",
        "ALTER TABLE t ALTER COLUMN v SET DEFAULT 'x'",
        "ALTER TABLE t ADD COLUMN c CHAR(1) CHARSET ascii DEFAULT 'a'",
        "CREATE TABLE t2 (v INT) DEFAULT CHARSET latin1",
    ):
        assert table_charset(statement, "d") is None, statement
    assert may_change("ALTER TABLE d.t CONVERT TO CHARSET latin1", "x", ("d", "t"))
    assert may_change("RENAME TABLE t TO t_old, t_new TO t", "d", ("d", "t"))
    assert may_change("CREATE OR REPLACE TABLE t (i INT)", "d", ("d", "t"))
    assert not may_change("ALTER TABLE t MODIFY v VARCHAR(30)", "d", ("d", "t"))
    assert not may_change("CREATE INDEX i ON t (v)", "d", ("d", "t"))
    assert not may_change("ALTER TABLE u DEFAULT CHARSET latin1", "d", ("d", "t"))


def test_a_collation_names_the_charset_the_catalog_gives_it(mariadb):
    """Every collation the server lists gives the charset COLLATION_CHARACTER_SET_APPLICABILITY gives
    it, in a column definition and as a table option. On main the charset was the name's prefix:
    MariaDB 11's charset-independent `uca1400_ai_ci` (also in 10.11 here) gave charset 'uca1400';
    such a name keeps the charset in effect (the table's for a column, the table's own as an option)."""
    with mariadb.connect() as conn, conn.cursor() as cursor:
        collations = Collations.load(conn)
        cursor.execute("SELECT * FROM information_schema.COLLATION_CHARACTER_SET_APPLICABILITY")
        names = [d[0].upper() for d in cursor.description]
        listed = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    applies: dict[str, set[str]] = {}
    for row in listed:
        for name in {row["COLLATION_NAME"], row.get("FULL_COLLATION_NAME") or row["COLLATION_NAME"]}:
            applies.setdefault(name, set()).add(charset_name(row["CHARACTER_SET_NAME"]))
    assert any(len(charsets) > 1 for charsets in applies.values())  # uca1400_ai_ci and the like
    before = {"v": ColumnType("varchar", length=3, charset="utf32")}
    for name, charsets in applies.items():
        named = next(iter(charsets)) if len(charsets) == 1 else None
        modify = f"ALTER TABLE t MODIFY v VARCHAR(3) COLLATE {name}"
        after = columns_after(modify, "d", before, lambda t: "utf32", collations)["v"]
        if named == "binary":  # VARCHAR ... COLLATE binary is VARBINARY
            assert after.family == "varbinary"
        else:
            assert after.charset == (named or "utf32"), name
        option = table_charset(f"ALTER TABLE t COLLATE {name}", "d", collations)
        assert option == (None if named is None else (("d", "t"), named)), name


def test_a_modify_to_a_charset_independent_collation_keeps_capture_running(mariadb, database, make_capture):
    """`COLLATE uca1400_ai_ci` keeps the column's charset (utf8mb4): no value changes. On main capture
    took the charset 'uca1400' from the name, judged the MODIFY a conversion and stopped."""
    mariadb.execute("CREATE TABLE u (id INT PRIMARY KEY, v VARCHAR(10)) DEFAULT CHARSET utf8mb4", database=database)
    capture = make_capture([f"{database}.u"]).start()
    capture.wait_running()
    mariadb.execute("INSERT INTO u VALUES (1, 'a')", database=database)
    capture.wait_events(database, "u", 1)
    mariadb.execute(
        "ALTER TABLE u MODIFY v VARCHAR(10) COLLATE uca1400_ai_ci",
        "INSERT INTO u VALUES (2, 'b')",
        database=database,
    )
    capture.wait_events(database, "u", 2)
    assert capture.process is not None and capture.process.poll() is None
