"""An outside audit of the binlog reader's stream handling against a real MariaDB: transactions
that end otherwise than by COMMIT (XA, ROLLBACK with a non-transactional table, savepoints),
events larger than a 16 MB protocol packet, DDL and table id reuse between transactions, binlog
rotation, heartbeats, MariaDB's INET6 and UUID types. The bar: the changes the reader yields,
replayed, give the rows SELECT reads; what it cannot decode exactly it refuses."""

from __future__ import annotations

import hashlib
import threading
from typing import Any

import pymysql
import pytest

from capture.config import SourceConfig
from capture.errors import BinlogDecodeError
from capture.events import ChangeBatch, Heartbeat, LogItem, SchemaChange, TransactionEnd, Truncate
from tests.integration.binlog_check import binlog_position
from tests.integration.test_binlog_audit import committed_end

pytestmark = pytest.mark.integration


def _config(mariadb, database: str, **overrides: Any) -> SourceConfig:
    return SourceConfig(
        kind="mariadb", port=mariadb.port, user="root", server_id=4278, include=[f"{database}.*"], **overrides
    )


def _items(
    mariadb, database: str, start: dict[str, Any], end, items: list[LogItem] | None = None, **overrides: Any
) -> list[LogItem]:
    """What the reader yields from `start` up to the transaction that ends at or after `end`
    (into `items` when given: what came before an error)."""
    from capture.sources.mysql.reader import BinlogReader

    items = [] if items is None else items
    stop = threading.Event()
    timer = threading.Timer(60, stop.set)  # a reader that never reaches `end` fails the test, never hangs it
    timer.start()
    try:
        for item in BinlogReader("src", _config(mariadb, database, **overrides), start, stop):
            items.append(item)
            if isinstance(item, TransactionEnd) and item.frontier >= end:
                return items
    finally:
        timer.cancel()
    raise AssertionError(f"the reader stopped before {end}")


def _read(mariadb, database: str, start: dict[str, Any], items: list[LogItem] | None = None, **overrides: Any):
    """What the reader yields from `start` through the last transaction committed now."""
    return _items(mariadb, database, start, committed_end(mariadb, start), items, **overrides)


def _read_unless_refused(mariadb, database: str, start: dict[str, Any], reason: str) -> tuple[list[LogItem], bool]:
    """`_read`, and whether the reader refused (its error naming `reason`): then what it yielded before."""
    items: list[LogItem] = []
    try:
        _read(mariadb, database, start, items)
    except BinlogDecodeError as exc:
        assert reason.lower() in str(exc).lower(), exc
        return items, True
    return items, False


def _landed(items: list[LogItem], table: str) -> dict[Any, dict[str, Any]]:
    """The table as the yielded changes leave it: key -> row (by column name); a truncate empties it."""
    state: dict[Any, dict[str, Any]] = {}
    for item in items:
        if isinstance(item, Truncate) and item.table == table:
            state.clear()
        elif isinstance(item, ChangeBatch) and item.table.table == table:
            names = item.table.names
            for change in item.changes:
                if change.before is not None:
                    state.pop(change.before[0], None)
                if change.after is not None:
                    state[change.after[0]] = dict(zip(names, change.after, strict=True))
    return state


def _select(mariadb, database: str, sql: str) -> list[tuple]:
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def _ids(mariadb, database: str, table: str) -> list[Any]:
    return [r[0] for r in _select(mariadb, database, f"SELECT id FROM `{table}` ORDER BY id")]


def _assert_landed_ids(mariadb, database: str, items: list[LogItem], *tables: str) -> None:
    """Each table's keys as the yielded changes leave it are the keys SELECT reads."""
    for table in tables:
        assert sorted(_landed(items, table)) == _ids(mariadb, database, table), table


def _statement_session(mariadb, database: str, binlog_format: str, *statements: str) -> None:
    """Statements in a session that logs them in `binlog_format` (STATEMENT, MIXED or ROW)."""
    conn = mariadb.connect(database)
    with conn, conn.cursor() as cur:
        cur.execute(f"SET SESSION binlog_format = '{binlog_format}'")
        for statement in statements:
            cur.execute(statement)


def _run(mariadb, database: str, *statements: str) -> None:
    """Statements on one connection (autocommit off, so that transactions span statements)."""
    conn = mariadb.connect(database, autocommit=False)
    with conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
        conn.commit()


def test_xa_rolled_back_after_prepare_lands_nothing(mariadb, database):
    """XA PREPARE writes the rows to the binlog; XA ROLLBACK later undoes them in a transaction of
    its own. Rows of a rolled-back XA transaction must not be captured."""
    mariadb.execute("CREATE TABLE xa (id INT PRIMARY KEY, v INT)", database=database)
    start = binlog_position(mariadb)
    _run(
        mariadb,
        database,
        "XA START 'gone'",
        "INSERT INTO xa VALUES (1, 1)",
        "XA END 'gone'",
        "XA PREPARE 'gone'",
        "XA ROLLBACK 'gone'",
        "XA START 'kept'",
        "INSERT INTO xa VALUES (2, 2)",
        "XA END 'kept'",
        "XA PREPARE 'kept'",
        "XA COMMIT 'kept'",
        "INSERT INTO xa VALUES (3, 3)",
    )
    items, refused = _read_unless_refused(mariadb, database, start, "XA PREPARE")
    if refused:  # then no transaction may end after the prepared rows
        first = next(n for n, i in enumerate(items) if isinstance(i, ChangeBatch))
        assert not any(isinstance(i, TransactionEnd) for i in items[first:])
        return
    _assert_landed_ids(mariadb, database, items, "xa")


@pytest.fixture
def inno_and_myi(mariadb, database) -> tuple[str, str]:
    """Tables `inno` (InnoDB) and `myi` (MyISAM: its writes stay whatever the transaction does)."""
    mariadb.execute(
        "CREATE TABLE inno (id INT PRIMARY KEY) ENGINE=InnoDB",
        "CREATE TABLE myi (id INT PRIMARY KEY) ENGINE=MyISAM",
        database=database,
    )
    return ("inno", "myi")


def test_rollback_with_a_non_transactional_table_lands_only_what_stayed(mariadb, database, inno_and_myi):
    """ROLLBACK of a transaction that also wrote a MyISAM table: the MyISAM row stays (and is
    logged), the InnoDB row is gone. Capture must land what the tables hold."""
    start = binlog_position(mariadb)
    conn = mariadb.connect(database, autocommit=False)
    with conn, conn.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("INSERT INTO inno VALUES (1)")
        cur.execute("INSERT INTO myi VALUES (1)")
        cur.execute("INSERT INTO inno VALUES (2)")
        conn.rollback()
        cur.execute("INSERT INTO inno VALUES (3)")
        conn.commit()
    _assert_landed_ids(mariadb, database, _read(mariadb, database, start), *inno_and_myi)


def test_rollback_to_savepoint_lands_what_committed(mariadb, database):
    mariadb.execute("CREATE TABLE sp (id INT PRIMARY KEY)", database=database)
    start = binlog_position(mariadb)
    _run(
        mariadb,
        database,
        "INSERT INTO sp VALUES (1)",
        "SAVEPOINT s1",
        "INSERT INTO sp VALUES (2)",
        "ROLLBACK TO SAVEPOINT s1",
        "INSERT INTO sp VALUES (3)",
        "SAVEPOINT s2",
        "INSERT INTO sp VALUES (4)",
        "RELEASE SAVEPOINT s2",
    )
    items = _read(mariadb, database, start)
    _assert_landed_ids(mariadb, database, items, "sp")
    # one transaction: its changes and one end (a SAVEPOINT is no schema change: no DDL history)
    assert [i.statement for i in items if isinstance(i, SchemaChange)] == []
    assert sum(isinstance(i, TransactionEnd) for i in items) == 1


@pytest.fixture
def big_packets(mariadb):
    """Room for 17 MB values; afterwards a new binlog file, so that no later BINLOG_GTID_POS
    (which reads the file with max_allowed_packet) meets the big events."""
    mariadb.execute("SET GLOBAL max_allowed_packet = 96 * 1024 * 1024")
    yield
    mariadb.execute("FLUSH BINARY LOGS", "SET GLOBAL max_allowed_packet = DEFAULT")


def _event_size(mariadb, database: str, blob: int) -> int:
    """Bytes of the WRITE_ROWS event of one row of table `big` with a `blob`-byte value."""
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        cur.execute(f"INSERT INTO big VALUES (0, REPEAT('x', {blob}))")
        cur.execute("DELETE FROM big WHERE id = 0")
        cur.execute(f"SHOW BINLOG EVENTS IN '{file}' FROM {pos}")
        writes = [r for r in cur.fetchall() if r[2] == "Write_rows_v1"]
        return writes[0][4] - writes[0][1]


def test_events_beyond_one_protocol_packet(mariadb, database, big_packets):
    """A rows event of 16 MB or more arrives in several protocol packets: one exactly 0xFFFFFF
    bytes long (then an empty packet), one of 17 MB, an UPDATE whose before and after images
    are 17 MB each."""
    mariadb.execute("CREATE TABLE big (id INT PRIMARY KEY, b LONGBLOB)", database=database)
    overhead = _event_size(mariadb, database, 1000) - 1000
    exact = 0xFFFFFF - 1 - overhead  # the OK byte and the event: exactly one full packet
    start = binlog_position(mariadb)
    sizes = {1: exact, 2: 17 * 2**20, 3: exact + 1}
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        for row, size in sizes.items():
            cur.execute(f"INSERT INTO big VALUES ({row}, REPEAT(CHAR({row + 64}), {size}))")
        cur.execute("UPDATE big SET b = REPEAT('u', 17 * 1024 * 1024 + 3) WHERE id = 2")
    end = committed_end(mariadb, start)
    mariadb.execute("SET GLOBAL max_allowed_packet = DEFAULT")  # the replica stream does not depend on it
    items = _items(mariadb, database, start, end)
    landed = {k: (len(v["b"]), hashlib.sha256(v["b"]).hexdigest()) for k, v in _landed(items, "big").items()}
    source = {r[0]: (r[1], r[2]) for r in _select(mariadb, database, "SELECT id, LENGTH(b), SHA2(b, 256) FROM big")}
    assert landed == source


def test_ddl_and_table_id_reuse_between_transactions(mariadb, database):
    """Each row decoded with the table as it was when written: ADD/DROP/MODIFY COLUMN, a dropped
    and recreated table of the same name with other types, FLUSH TABLES (new table ids)."""
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(10))", database=database)
    start = binlog_position(mariadb)
    mariadb.execute(
        "INSERT INTO t VALUES (1, 'one')",
        "ALTER TABLE t ADD COLUMN n INT DEFAULT 5 AFTER id",
        "INSERT INTO t VALUES (2, 22, 'two')",
        "ALTER TABLE t MODIFY n BIGINT, DROP COLUMN a",
        "INSERT INTO t VALUES (3, 9000000000)",
        "FLUSH TABLES",
        "DROP TABLE t",
        "CREATE TABLE t (id INT PRIMARY KEY, a DOUBLE, d DATE)",
        "INSERT INTO t VALUES (4, 2.5, '2024-02-29')",
        "FLUSH TABLES",
        "INSERT INTO t VALUES (5, -1.25, '1000-01-01')",
        database=database,
    )
    items = _read(mariadb, database, start, column_rewrites="accept")  # ADD COLUMN ... DEFAULT 5
    rows = [
        dict(zip(i.table.names, c.after, strict=True)) for i in items if isinstance(i, ChangeBatch) for c in i.changes
    ]
    import datetime as dt

    assert rows == [
        {"id": 1, "a": "one"},
        {"id": 2, "n": 22, "a": "two"},
        {"id": 3, "n": 9000000000},
        {"id": 4, "a": 2.5, "d": dt.date(2024, 2, 29)},
        {"id": 5, "a": -1.25, "d": dt.date(1000, 1, 1)},
    ]


def test_rotation_mid_stream_keeps_order_and_rows(mariadb, database):
    mariadb.execute("CREATE TABLE r (id INT PRIMARY KEY)", database=database)
    start = binlog_position(mariadb)
    mariadb.execute(
        "INSERT INTO r VALUES (1)",
        "FLUSH BINARY LOGS",
        "INSERT INTO r VALUES (2)",
        "FLUSH BINARY LOGS",
        "INSERT INTO r VALUES (3)",
        database=database,
    )
    items = _read(mariadb, database, start)
    changes = [c for i in items if isinstance(i, ChangeBatch) for c in i.changes]
    assert [c.after[0] for c in changes] == [1, 2, 3]
    lsns = [c.lsn for c in changes]
    assert lsns == sorted(lsns) and len(set(lsns)) == 3
    ends = [i.resume["file"] for i in items if isinstance(i, TransactionEnd)]
    assert len(set(ends)) == 3  # each row's transaction ends in its own binlog file


def test_an_idle_stream_yields_heartbeats(mariadb, database):
    start = binlog_position(mariadb)
    from capture.sources.mysql.reader import BinlogReader

    stop = threading.Event()
    reader = BinlogReader("src", _config(mariadb, database, heartbeat_s=0.2), start, stop)
    timer = threading.Timer(5, stop.set)
    timer.start()
    try:
        first = next(i for i in reader if isinstance(i, Heartbeat))
    finally:
        timer.cancel()
    assert isinstance(first, Heartbeat) and not stop.is_set()


MARIADB_TYPES = {
    "inet6": ["'::1'", "'2001:db8::ff00:42:8329'", "'::ffff:192.0.2.1'"],
    "uuid": ["'123e4567-e89b-12d3-a456-426655440000'", "'6ccd780c-baba-1026-9564-5b8c656024db'"],
}


@pytest.mark.parametrize("kind", MARIADB_TYPES)
def test_mariadb_data_types_land_as_select_shows_them_or_are_refused(mariadb, database, kind):
    """INET6 (10.5) and UUID (10.7) are stored in 16 bytes (UUID with its groups reordered): the
    binlog must give what SELECT shows, or refuse."""
    mariadb.execute(f"CREATE TABLE m (id INT PRIMARY KEY, v {kind.upper()})", database=database)
    start = binlog_position(mariadb)
    values = ", ".join(f"({i}, {v})" for i, v in enumerate(MARIADB_TYPES[kind]))
    mariadb.execute(f"INSERT INTO m VALUES {values}", database=database)
    items, refused = _read_unless_refused(mariadb, database, start, "'v'")
    if refused:
        return
    landed = {k: row["v"] for k, row in _landed(items, "m").items()}
    assert landed == dict(_select(mariadb, database, "SELECT id, CAST(v AS CHAR) FROM m"))


def test_binlog_row_image_minimal_session_is_refused(mariadb, database):
    mariadb.execute("CREATE TABLE mi (id INT PRIMARY KEY, a INT, b INT)", database=database)
    start = binlog_position(mariadb)
    conn = mariadb.connect(database)
    with conn, conn.cursor() as cur:
        cur.execute("INSERT INTO mi VALUES (1, 1, 1)")
        cur.execute("SET SESSION binlog_row_image = 'MINIMAL'")
        cur.execute("UPDATE mi SET a = 2 WHERE id = 1")
    with pytest.raises(BinlogDecodeError, match="binlog_row_image"):
        _read(mariadb, database, start)


def test_rollback_to_savepoint_past_a_non_transactional_write(mariadb, database, inno_and_myi):
    """A MyISAM write after a SAVEPOINT: ROLLBACK TO cannot cut the InnoDB rows out of the binlog,
    so the log holds them and then 'ROLLBACK TO'. Capture must land what the tables hold, or refuse."""
    start = binlog_position(mariadb)
    _run(
        mariadb,
        database,
        "INSERT INTO inno VALUES (1)",
        "SAVEPOINT s1",
        "INSERT INTO inno VALUES (2)",
        "INSERT INTO myi VALUES (1)",
        "INSERT INTO inno VALUES (3)",
        "ROLLBACK TO SAVEPOINT s1",
        "INSERT INTO inno VALUES (4)",
    )
    items, refused = _read_unless_refused(mariadb, database, start, "ROLLBACK")
    if refused:  # the undone rows are in no ended transaction
        undone = next(
            n for n, i in enumerate(items) if isinstance(i, ChangeBatch) and any(c.after == (2,) for c in i.changes)
        )
        assert not any(isinstance(i, TransactionEnd) for i in items[undone:])
        return
    _assert_landed_ids(mariadb, database, items, *inno_and_myi)


def test_statements_writing_several_tables_and_creating_tables(mariadb, database):
    """A multi-table UPDATE and DELETE (rows events of two table maps in one statement), CREATE
    TABLE ... SELECT (a DDL statement that carries rows), non-ASCII schema, table and column names."""
    mariadb.execute(
        "CREATE TABLE a (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE `bé ✓` (id INT PRIMARY KEY, `çol ✓` VARCHAR(10))",
        "INSERT INTO a VALUES (1, 1), (2, 2), (3, 3)",
        "INSERT INTO `bé ✓` VALUES (1, 'x'), (2, 'y'), (3, 'z')",
        database=database,
    )
    start = binlog_position(mariadb)
    mariadb.execute(
        "UPDATE a JOIN `bé ✓` b USING (id) SET a.v = a.v * 10, b.`çol ✓` = CONCAT(b.`çol ✓`, 'é') WHERE id < 3",
        "DELETE a, b FROM a JOIN `bé ✓` b USING (id) WHERE id = 3",
        "CREATE TABLE c (id INT PRIMARY KEY, v INT) SELECT id, v FROM a",
        "INSERT INTO c VALUES (9, 9)",
        database=database,
    )
    items = _read(mariadb, database, start)
    for table in ("a", "bé ✓", "c"):
        landed = {k: tuple(row.values()) for k, row in _landed(items, table).items()}
        if table != "c":  # a and bé ✓ were filled before `start`: only their changed rows landed
            landed = {k: v for k, v in landed.items() if k < 3}
        rows = _select(mariadb, database, f"SELECT * FROM `{table}` ORDER BY id")
        expected = {r[0]: tuple(r) for r in rows if table == "c" or r[0] < 3}
        assert landed == expected, table
    deleted = [c.before[0] for i in items if isinstance(i, ChangeBatch) for c in i.changes if c.after is None]
    assert sorted(deleted) == [3, 3]


def test_truncate_empties_the_landed_table(mariadb, database):
    mariadb.execute("CREATE TABLE tr (id INT PRIMARY KEY)", database=database)
    start = binlog_position(mariadb)
    mariadb.execute(
        "INSERT INTO tr VALUES (1), (2)", "TRUNCATE TABLE tr", "INSERT INTO tr VALUES (3)", database=database
    )
    items = _read(mariadb, database, start)
    _assert_landed_ids(mariadb, database, items, "tr")
    truncates = [i for i in items if isinstance(i, Truncate)]
    assert [(t.schema, t.table) for t in truncates] == [(database, "tr")]


def test_truncate_spellings_and_filters(mariadb, database):
    """Qualified, quoted, unqualified from another default database, `TRUNCATE t` without TABLE: each
    yields one truncate of the right table, in log order; a table the filters leave out yields none."""
    mariadb.execute(
        "CREATE TABLE `a``b` (id INT PRIMARY KEY)", "CREATE TABLE c (id INT PRIMARY KEY)", database=database
    )
    mariadb.execute("CREATE DATABASE IF NOT EXISTS other_tr")
    mariadb.execute("CREATE TABLE IF NOT EXISTS other_tr.x (id INT PRIMARY KEY)")
    start = binlog_position(mariadb)
    mariadb.execute(
        "INSERT INTO c VALUES (1)",
        f"TRUNCATE TABLE `{database}`.`a``b`",
        "/* a comment */ truncate c",
        "TRUNCATE TABLE other_tr.x",
        "INSERT INTO c VALUES (2)",
        database=database,
    )
    mariadb.execute(f"TRUNCATE {database}.c", database="other_tr")
    items = _read(mariadb, database, start)
    order = [
        (type(i).__name__, i.table if isinstance(i, Truncate) else i.table.table)
        for i in items
        if isinstance(i, (Truncate, ChangeBatch))
    ]
    assert order == [
        ("ChangeBatch", "c"),
        ("Truncate", "a`b"),
        ("Truncate", "c"),
        ("ChangeBatch", "c"),
        ("Truncate", "c"),
    ]
    assert all(i.schema == database for i in items if isinstance(i, Truncate))
    assert _landed(items, "c") == {}


@pytest.fixture
def checksum_restored(mariadb):
    yield
    mariadb.execute("SET GLOBAL binlog_checksum = CRC32")


def test_binlog_checksum_changed_while_reading(mariadb, database, checksum_restored):
    """SET GLOBAL binlog_checksum rotates to a file whose events carry another checksum than the
    reader was told at connect time: rows on both sides of the change decode."""
    mariadb.execute("CREATE TABLE ck (id INT PRIMARY KEY, v VARCHAR(10))", database=database)
    start = binlog_position(mariadb)
    mariadb.execute(
        "INSERT INTO ck VALUES (1, 'crc')",
        "SET GLOBAL binlog_checksum = NONE",
        "INSERT INTO ck VALUES (2, 'none')",
        "SET GLOBAL binlog_checksum = CRC32",
        "INSERT INTO ck VALUES (3, 'crc again')",
        database=database,
    )
    end = committed_end(mariadb, start)
    source = dict(_select(mariadb, database, "SELECT id, v FROM ck"))
    for setting in ("CRC32", "NONE"):  # as the reader connects
        mariadb.execute(f"SET GLOBAL binlog_checksum = {setting}")
        items = _items(mariadb, database, start, end)
        assert {k: row["v"] for k, row in _landed(items, "ck").items()} == source, setting


def test_resuming_from_every_transaction_end_across_domains_and_rotation(mariadb, database):
    """Transactions in two GTID domains, a DDL and a rotation between them: resuming from any
    transaction end's token yields exactly the changes after it (none lost, none twice)."""
    mariadb.execute("CREATE TABLE g (id INT PRIMARY KEY)", database=database)
    start = binlog_position(mariadb)
    conn = mariadb.connect(database)
    with conn, conn.cursor() as cur:
        for statement in (
            "SET SESSION gtid_domain_id = 1",
            "INSERT INTO g VALUES (1)",
            "SET SESSION gtid_domain_id = 0",
            "INSERT INTO g VALUES (2)",
            "ALTER TABLE g ADD COLUMN v INT",
            "SET SESSION gtid_domain_id = 1",
            "INSERT INTO g VALUES (3, 3)",
            "FLUSH BINARY LOGS",
            "SET SESSION gtid_domain_id = 2",
            "INSERT INTO g VALUES (4, 4)",
            "SET SESSION gtid_domain_id = 0",
            "INSERT INTO g VALUES (5, 5)",
        ):
            cur.execute(statement)
    end = committed_end(mariadb, start)
    items = _items(mariadb, database, start, end)
    ends = [(n, i) for n, i in enumerate(items) if isinstance(i, TransactionEnd)]
    assert len(ends) == 6
    every = [c.lsn for i in items if isinstance(i, ChangeBatch) for c in i.changes]
    assert len(every) == 5
    for n, item in ends[:-1]:
        rest = _items(mariadb, database, item.resume, end)
        after = [c.lsn for i in rest if isinstance(i, ChangeBatch) for c in i.changes]
        expected = [c.lsn for i in items[n + 1 :] if isinstance(i, ChangeBatch) for c in i.changes]
        assert after == expected, item.resume


@pytest.mark.parametrize("binlog_format", ["STATEMENT", "MIXED"])
def test_a_session_logging_statements_is_refused_or_lands_its_rows(mariadb, database, binlog_format):
    """binlog_format is a session setting too (for a user with BINLOG ADMIN): an INSERT logged as
    its statement carries no rows. Capture must land them, or refuse; never record the INSERT as DDL."""
    mariadb.execute("CREATE TABLE st (id INT PRIMARY KEY, v INT)", database=database)
    start = binlog_position(mariadb)
    _statement_session(
        mariadb, database, binlog_format, "INSERT INTO st VALUES (1, 1), (2, 2)", "UPDATE st SET v = 5 WHERE id = 2"
    )
    items, refused = _read_unless_refused(mariadb, database, start, "statement")
    if refused:
        return
    landed = {k: (row["id"], row["v"]) for k, row in _landed(items, "st").items()}
    assert landed == {r[0]: r for r in _select(mariadb, database, "SELECT id, v FROM st")}


@pytest.fixture
def kept_not_skipped(mariadb, database) -> dict[str, Any]:
    """Tables `kept` and `skipped` with a row each; the reader's settings that capture kept, not skipped."""
    mariadb.execute(
        "CREATE TABLE kept (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE skipped (id INT PRIMARY KEY, v INT)",
        "INSERT INTO kept VALUES (1, 1)",
        "INSERT INTO skipped VALUES (1, 1)",
        database=database,
    )
    return {"exclude": [f"{database}.skipped"]}


@pytest.fixture
def other_database(mariadb, database):
    """A second database, which capture (include: `database`.*) does not capture."""
    other = f"{database[:40]}_other"
    mariadb.execute(f"DROP DATABASE IF EXISTS `{other}`", f"CREATE DATABASE `{other}`")
    yield other
    mariadb.execute(f"DROP DATABASE IF EXISTS `{other}`")


@pytest.mark.parametrize("binlog_format", ["STATEMENT", "MIXED"])
def test_statements_logged_for_tables_capture_does_not_capture_are_passed_over(
    mariadb, database, kept_not_skipped, other_database, binlog_format
):
    """A session logging statements that write only tables capture leaves out (an excluded table,
    another database, a multi-table UPDATE and DELETE of both): capture goes on, and the captured
    table's rows, written in row format around them, land."""
    mariadb.execute("CREATE TABLE elsewhere (id INT PRIMARY KEY, v INT)", database=other_database)
    start = binlog_position(mariadb)
    mariadb.execute("INSERT INTO kept VALUES (4, 4)", database=database)
    _statement_session(
        mariadb,
        database,
        binlog_format,
        "INSERT INTO skipped VALUES (2, 2), (3, 3)",
        "UPDATE /* a comment */ `skipped` SET v = 5 WHERE id = 2",
        f"INSERT INTO `{other_database}`.elsewhere (id, v) SELECT id, v FROM skipped",
        f"UPDATE skipped s JOIN `{other_database}`.elsewhere e USING (id) SET s.v = e.v + 1, e.v = 7",
        f"DELETE s, e FROM skipped s JOIN `{other_database}`.elsewhere e ON s.id = e.id WHERE s.id = 1",
        f"REPLACE INTO `{other_database}`.`elsewhere` VALUES (3, 3)",
    )
    _statement_session(mariadb, other_database, binlog_format, "DELETE FROM elsewhere WHERE id = 3")
    mariadb.execute("INSERT INTO kept VALUES (2, 2)", "UPDATE kept SET v = 3 WHERE id = 4", database=database)
    items = _read(mariadb, database, start, **kept_not_skipped)
    landed = {k: (row["id"], row["v"]) for k, row in _landed(items, "kept").items()}
    assert landed == {r[0]: r for r in _select(mariadb, database, "SELECT id, v FROM kept WHERE id > 1")}
    assert [i.statement for i in items if isinstance(i, SchemaChange)] == []


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO kept VALUES (9, 9)",
        "UPDATE skipped s JOIN kept k USING (id) SET k.v = 8",
        "DELETE k FROM skipped s, kept AS k WHERE s.id = k.id",
        "DELETE FROM kept USING kept JOIN skipped USING (id)",
    ],
)
def test_a_statement_logged_for_a_captured_table_stops_capture(mariadb, database, kept_not_skipped, statement):
    start = binlog_position(mariadb)
    _statement_session(mariadb, database, "STATEMENT", statement)
    with pytest.raises(BinlogDecodeError, match=f"logged as its statement.* writing {database}.kept:"):
        _read(mariadb, database, start, **kept_not_skipped)


def test_a_statement_whose_tables_capture_cannot_tell_stops_capture_naming_its_database(
    mariadb, database, other_database
):
    """Writes a statement-logged statement hides: a trigger and a stored function, both in a
    database capture leaves out, writing a captured table. Capture cannot see them: it stops."""
    mariadb.execute("CREATE TABLE kept (id INT PRIMARY KEY, v INT)", database=database)
    mariadb.execute(
        "CREATE TABLE log (id INT PRIMARY KEY)",
        f"CREATE TRIGGER copy AFTER INSERT ON log FOR EACH ROW INSERT INTO `{database}`.kept VALUES (NEW.id, 0)",
        f"CREATE FUNCTION put(i INT) RETURNS INT DETERMINISTIC MODIFIES SQL DATA BEGIN INSERT INTO `{database}`.kept "
        "VALUES (i, 1); RETURN i; END",
        database=other_database,
    )
    for statement in ("INSERT INTO log VALUES (1)", "SELECT put(2)"):
        start = binlog_position(mariadb)
        _statement_session(mariadb, other_database, "STATEMENT", statement)
        with pytest.raises(BinlogDecodeError, match=f"logged as its statement.*{other_database}"):
            _read(mariadb, database, start)
    assert _select(mariadb, database, "SELECT id, v FROM kept ORDER BY id") == [(1, 0), (2, 1)]


@pytest.mark.parametrize("table", ["kept", "skipped"])
def test_load_data_logged_as_its_statement(mariadb, database, kept_not_skipped, tmp_path, table):
    """LOAD DATA in a session logging statements reaches the binlog as the file's blocks and an
    EXECUTE_LOAD_QUERY event, no rows: into a captured table it stops capture, into a table capture
    leaves out it is passed over."""
    data = tmp_path / "rows.tsv"
    data.write_text("2\t2\n3\t3\n")
    start = binlog_position(mariadb)
    conn = pymysql.connect(host="127.0.0.1", port=mariadb.port, user="root", database=database, local_infile=True)
    with conn, conn.cursor() as cur:
        cur.execute("SET SESSION binlog_format = 'STATEMENT'")
        cur.execute(f"LOAD DATA LOCAL INFILE '{data}' INTO TABLE {table}")
        conn.commit()
    mariadb.execute("INSERT INTO kept VALUES (4, 4)", database=database)
    if table == "kept":
        with pytest.raises(BinlogDecodeError, match=f"logged as its statement.* writing {database}.kept:"):
            _read(mariadb, database, start, **kept_not_skipped)
        return
    assert sorted(_landed(_read(mariadb, database, start, **kept_not_skipped), "kept")) == [4]


@pytest.mark.parametrize(
    "statement",
    [
        "TRUNCATE TABLE c /* a trailing comment */",
        "TRUNCATE TABLE c -- a trailing comment",
        "TRUNCATE/**/c",
        "TRUNCATE /*!TABLE */ c",
        "truncate table c # why",
    ],
)
def test_truncate_with_comments_empties_the_landed_table(mariadb, database, statement):
    """The binlog keeps a TRUNCATE's text as the session sent it, comments included: wherever a
    comment stands, the truncate lands (else the target keeps the rows the source no longer has)."""
    mariadb.execute("CREATE TABLE c (id INT PRIMARY KEY)", database=database)
    start = binlog_position(mariadb)
    mariadb.execute("INSERT INTO c VALUES (1), (2)", statement, "INSERT INTO c VALUES (3)", database=database)
    items = _read(mariadb, database, start)
    _assert_landed_ids(mariadb, database, items, "c")


@pytest.mark.parametrize(
    ("sql_mode", "statement"),
    [
        # `--` then a control character other than a space or tab starts a comment on the server
        ("", "UPDATE skipped s --\r'\nJOIN kept k ON k.id = s.id -- '\nSET k.v = 8"),
        # under NO_BACKSLASH_ESCAPES '\' is a whole string: the next quote opens one, not closes it
        (
            "NO_BACKSLASH_ESCAPES",
            "UPDATE skipped s JOIN skipped s2 ON s2.id = s.id AND '\\' <> 'x' "
            "JOIN kept k ON k.id = s.id AND 'q' = 'q' SET k.v = 8",
        ),
        # under ANSI_QUOTES "a\" is an identifier, the backslash its last character
        (
            "ANSI_QUOTES",
            'UPDATE skipped s JOIN skipped AS "s2\\" ON "s2\\".id = s.id '
            'JOIN kept k ON k.id = s.id AND "s2\\".v IS NOT NULL SET k.v = 8',
        ),
    ],
)
def test_a_statement_hiding_a_captured_table_from_the_parser_stops_capture(
    mariadb, database, kept_not_skipped, sql_mode, statement
):
    """A statement-logged UPDATE that writes the captured table `kept`, spelled so that a reader
    tokenizing it otherwise than the server does sees only `skipped`: capture must stop, not pass it over."""
    start = binlog_position(mariadb)
    _statement_session(mariadb, database, "STATEMENT", f"SET SESSION sql_mode = '{sql_mode}'", statement)
    assert _select(mariadb, database, "SELECT v FROM kept WHERE id = 1") == [(8,)]
    with pytest.raises(BinlogDecodeError, match="logged as its statement"):
        _read(mariadb, database, start, **kept_not_skipped)


def test_system_versioned_rows_changed_several_times_in_one_transaction(mariadb, database):
    """Key changes there and back, repeated updates of one row, REPLACE and INSERT ... ON DUPLICATE
    KEY UPDATE in one transaction of a system-versioned table: the current rows land as SELECT reads them."""
    mariadb.execute(
        "CREATE TABLE vt (id INT PRIMARY KEY, v INT, u INT UNIQUE) WITH SYSTEM VERSIONING",
        "INSERT INTO vt VALUES (1, 1, 1), (2, 2, 2), (3, 3, 3)",
        database=database,
    )
    start = binlog_position(mariadb)
    _run(
        mariadb,
        database,
        "UPDATE vt SET id = id + 10 WHERE id = 1",
        "UPDATE vt SET id = 1, v = 7 WHERE id = 11",
        "UPDATE vt SET v = v + 1 WHERE id = 1",
        "UPDATE vt SET v = v + 1 WHERE id = 1",
        "REPLACE INTO vt VALUES (2, 20, 3)",
        "INSERT INTO vt VALUES (4, 4, 1) ON DUPLICATE KEY UPDATE v = 40",
        "DELETE FROM vt WHERE id = 1",
        "INSERT INTO vt VALUES (1, 100, 100)",
        "UPDATE vt SET id = 5 WHERE id = 2",
    )
    items = _read(mariadb, database, start)
    landed = {k: (row["id"], row["v"], row["u"]) for k, row in _landed(items, "vt").items()}
    assert landed == {r[0]: r for r in _select(mariadb, database, "SELECT id, v, u FROM vt")}


def test_create_table_select_logged_as_its_statement_is_refused_or_lands_its_rows(mariadb, database):
    """CREATE TABLE ... SELECT in a session logging statements writes the new (captured) table's
    rows without row events: capture must land them or stop, never land an empty table."""
    mariadb.execute("CREATE TABLE src (id INT PRIMARY KEY)", "INSERT INTO src VALUES (1), (2)", database=database)
    start = binlog_position(mariadb)
    _statement_session(mariadb, database, "STATEMENT", "CREATE TABLE made (id INT PRIMARY KEY) SELECT id FROM src")
    mariadb.execute("INSERT INTO src VALUES (3)", database=database)
    items, refused = _read_unless_refused(mariadb, database, start, "statement")
    if not refused:
        _assert_landed_ids(mariadb, database, items, "made")


@pytest.mark.parametrize("binlog_format", ["STATEMENT", "MIXED", "ROW"])
def test_truncate_of_a_temporary_table_shadowing_a_captured_one_lands_no_truncate(mariadb, database, binlog_format):
    """A session logging statements logs its temporary tables' DDL too: a TRUNCATE of a temporary
    table named like a captured table empties the temporary table only, and must not land as a
    truncate of the captured one (its target would lose every row the source still has)."""
    mariadb.execute("CREATE TABLE kept (id INT PRIMARY KEY)", "INSERT INTO kept VALUES (1), (2)", database=database)
    start = binlog_position(mariadb)
    _statement_session(
        mariadb,
        database,
        binlog_format,
        "CREATE TEMPORARY TABLE kept (id INT PRIMARY KEY)",
        "TRUNCATE TABLE kept",
        "DROP TEMPORARY TABLE kept",
    )
    mariadb.execute("INSERT INTO kept VALUES (3)", database=database)
    items = _read(mariadb, database, start)
    assert [i for i in items if isinstance(i, Truncate)] == []


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE skipped AS `SET` JOIN kept k ON k.id = `SET`.id SET k.v = 8",
        "DELETE `where` FROM skipped s JOIN kept AS `where` ON `where`.id = s.id",
        "UPDATE skipped s JOIN `values` x ON x.id = s.id SET x.v = 8",
        "INSERT INTO `delayed` VALUES (5, 5)",
    ],
)
def test_a_quoted_name_spelled_like_a_keyword_is_a_name(mariadb, database, kept_not_skipped, statement):
    """Backquotes make a keyword a name (an alias `SET`, `where`; captured tables `values`,
    `delayed`): a statement-logged write through one to a captured table stops capture."""
    mariadb.execute(
        "CREATE TABLE `values` (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE `delayed` (id INT PRIMARY KEY, v INT)",
        "INSERT INTO `values` VALUES (1, 1)",
        database=database,
    )
    start = binlog_position(mariadb)
    _statement_session(mariadb, database, "STATEMENT", statement)
    with pytest.raises(BinlogDecodeError, match=r"logged as its statement.* writing"):
        _read(mariadb, database, start, **kept_not_skipped)


@pytest.fixture(scope="module")
def folding(tmp_path_factory: pytest.TempPathFactory):
    """A private MariaDB with lower_case_table_names=1 (names stored in lowercase, compared without
    case) and a database `folded` with tables `kept` and `skipped`."""
    from tests.servers import MariaDB

    server = MariaDB(tmp_path_factory.mktemp("folding"), extra_options=["--lower-case-table-names=1"])
    try:
        server.start()
        server.execute("CREATE DATABASE folded")
        yield server
    finally:
        server.destroy()


@pytest.fixture
def folded(folding):
    folding.execute(
        "DROP TABLE IF EXISTS kept, skipped",
        "CREATE TABLE kept (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE skipped (id INT PRIMARY KEY, v INT)",
        "INSERT INTO kept VALUES (1, 1)",
        "INSERT INTO skipped VALUES (1, 1)",
        database="folded",
    )
    return folding


def test_a_truncate_spelled_in_other_case_under_lower_case_table_names_lands(folded):
    """With lower_case_table_names=1 `TRUNCATE FOLDED.KEPT` empties `folded`.`kept`: the truncate lands
    for the table the row events name (else the target keeps the rows)."""
    start = binlog_position(folded)
    folded.execute("INSERT INTO kept VALUES (2, 2)", "TRUNCATE TABLE FOLDED.KEPT", "INSERT INTO kept VALUES (3, 3)",
                   database="folded")  # fmt: skip
    items = _read(folded, "folded", start)
    assert [(t.schema, t.table) for t in items if isinstance(t, Truncate)] == [("folded", "kept")]
    _assert_landed_ids(folded, "folded", items, "kept")


@pytest.mark.parametrize(
    ("statement", "after"),
    [
        ("UPDATE skipped s JOIN FOLDED.KEPT k USING (id) SET k.v = 8", [(1, 8)]),
        ("DELETE K FROM skipped s JOIN kept AS k USING (id)", []),  # an alias named in other case
    ],
)
def test_a_statement_naming_a_captured_table_in_other_case_stops_capture(folded, statement, after):
    """With lower_case_table_names=1 a statement-logged write of `FOLDED.KEPT` (or through an alias
    named in other case) writes the captured `folded`.`kept`: capture must stop, not pass it over."""
    start = binlog_position(folded)
    _statement_session(folded, "folded", "STATEMENT", statement)
    assert _select(folded, "folded", "SELECT id, v FROM kept") == after
    with pytest.raises(BinlogDecodeError, match=r"logged as its statement.* writing (.*, )?folded\.kept"):
        _read(folded, "folded", start, exclude=["folded.skipped"])
