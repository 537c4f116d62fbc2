"""The exactly-once proof shared by the crash and failover tests: a random write load, and a
comparison of the landing zone with an independent read of the binlog (same changes, same
order, no LSN twice; replaying the landed log rebuilds the table)."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import QueryEvent, RotateEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from capture.events import Lsn
from capture.landing import LandingZone
from capture.sources.mysql.reader import position_lsn
from tests.integration.crash_load import random_transactions

TABLES = ("ledger", "audit")


def binlog_position(mariadb) -> dict[str, Any]:
    """Where the binlog ends now, as a reader's resume token (file, position, GTID there)."""
    with mariadb.connect() as conn, conn.cursor() as cursor:
        cursor.execute("SHOW MASTER STATUS")
        file, pos = cursor.fetchone()[:2]
        cursor.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, pos))
        return {"file": file, "pos": pos, "gtid": cursor.fetchone()[0]}


def create_tables(mariadb, database: str) -> None:
    mariadb.execute(
        "CREATE TABLE ledger (id INT PRIMARY KEY, v INT, note VARCHAR(40))",
        "CREATE TABLE audit (id BIGINT AUTO_INCREMENT PRIMARY KEY, ledger_id INT, what VARCHAR(10))",
        database=database,
    )


def _insert_batch(cur, first: int, size: int, rng: random.Random) -> None:
    rows = [(i, rng.randint(0, 10**6), f"n{i}") for i in range(first, first + size)]
    cur.executemany("INSERT INTO ledger VALUES (%s, %s, %s)", rows)


def workload(mariadb, database: str, stop: threading.Event, seed: int, max_pause_s: float = 0.004) -> int:
    """`random_transactions` on MariaDB until `stop`. Returns the number of transactions."""
    conn = mariadb.connect(database, autocommit=False)
    with conn:
        return random_transactions(conn, stop, seed, _insert_batch, max_pause_s)


class Workload(threading.Thread):
    """`workload` in a thread: start(), then finish() returns the transaction count."""

    def __init__(self, mariadb, database: str, seed: int, max_pause_s: float = 0.004) -> None:
        super().__init__(daemon=True)
        self.args = (mariadb, database)
        self.seed, self.max_pause_s = seed, max_pause_s
        self.stop_event = threading.Event()
        self.transactions = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.transactions = workload(*self.args, self.stop_event, self.seed, self.max_pause_s)
        except BaseException as exc:
            self.error = exc

    def finish(self) -> int:
        self.stop_event.set()
        self.join()
        if self.error is not None:
            raise self.error
        return self.transactions


def binlog_end(mariadb) -> Lsn:
    """The server's current binlog position as an LSN: everything written so far is below it."""
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        end_file, end_pos = cur.fetchone()[:2]
    return position_lsn(end_file, int(end_pos))


def row_events(port: int, database: str, gtid: str, end: Lsn, server_id: int) -> Iterator[tuple[str, Any]]:
    """(binlog file, rows event) of every rows event of `database` from `gtid` to `end`, read by
    mysql-replication: the independent reader the tests hold capture to."""
    stream = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": port, "user": "root", "password": ""},
        server_id=server_id,
        is_mariadb=True,
        auto_position=gtid,
        blocking=True,
        only_events=[RotateEvent, XidEvent, QueryEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
    )
    file = ""
    try:
        for event in stream:
            if isinstance(event, RotateEvent):
                file = event.next_binlog
                continue
            if position_lsn(file, event.packet.log_pos) >= end:
                break
            if isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)) and event.schema == database:
                yield file, event
    finally:
        stream.close()


def binlog_changes(mariadb, database: str, gtid: str, end: Lsn) -> list[tuple]:
    """(table, op, before, after) for every row change from `gtid` to `end`, straight from the binlog."""
    changes = []
    for _, event in row_events(mariadb.port, database, gtid, end, server_id=999):
        for row in event.rows:
            if isinstance(event, WriteRowsEvent):
                changes.append((event.table, "c", None, row["values"]))
            elif isinstance(event, DeleteRowsEvent):
                changes.append((event.table, "d", row["values"], None))
            elif row["before_values"]["id"] != row["after_values"]["id"]:
                changes.append((event.table, "d", row["before_values"], None))
                changes.append((event.table, "c", None, row["after_values"]))
            else:
                changes.append((event.table, "u", row["before_values"], row["after_values"]))
    return changes


def assert_landed_exactly_once(mariadb, database: str, zone: LandingZone, start_gtid: str, end: Lsn) -> int:
    """The landing zone holds every change of `database` from `start_gtid` to `end` exactly once,
    in binlog order, and replaying it rebuilds `ledger`. Returns the number of changes."""
    expected = binlog_changes(mariadb, database, start_gtid, end)
    landed = []
    for table in TABLES:
        data = zone.read_table(database, table)
        for event in [] if data is None else data.to_pylist():
            landed.append((int(event["_lsn"]), table, event["_op"], event["before"], event["after"]))
    lsns = [e[0] for e in landed]
    assert len(set(lsns)) == len(lsns), "an LSN landed twice"
    landed.sort()
    assert len(landed) == len(expected), f"{len(landed)} changes landed, the binlog has {len(expected)}"
    assert [e[1:] for e in landed] == expected

    state: dict[int, dict] = {}
    for _, table, op, before, after in landed:
        if table == "ledger":
            if op == "d":
                del state[before["id"]]
            else:
                state[after["id"]] = after
    with mariadb.connect(database, autocommit=True) as conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SELECT * FROM ledger")
        assert {r["id"]: r for r in cur.fetchall()} == state
    return len(expected)
