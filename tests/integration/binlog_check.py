"""The exactly-once proof shared by the crash and failover tests: a random write load, and a
comparison of the landing zone with an independent read of the binlog (same changes, same
order, no LSN twice; replaying the landed log rebuilds the table)."""

from __future__ import annotations

import random
import threading
import time

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import QueryEvent, RotateEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from capture.events import Lsn
from capture.landing import LandingZone
from capture.sources.mysql.reader import position_lsn

TABLES = ("ledger", "audit")


def create_tables(mariadb, database: str) -> None:
    mariadb.execute(
        "CREATE TABLE ledger (id INT PRIMARY KEY, v INT, note VARCHAR(40))",
        "CREATE TABLE audit (id BIGINT AUTO_INCREMENT PRIMARY KEY, ledger_id INT, what VARCHAR(10))",
        database=database,
    )


def workload(mariadb, database: str, stop: threading.Event, seed: int, max_pause_s: float = 0.004) -> int:
    """Random transactions until `stop`: batches, updates, deletes, key changes, and big ones
    (1,500 rows) that spill. Returns the number of transactions."""
    rng = random.Random(seed)
    next_id, live = 1, []
    transactions = 0
    conn = mariadb.connect(database, autocommit=False)
    with conn, conn.cursor() as cur:
        while not stop.is_set():
            choice = rng.random()
            if choice < 0.35 or len(live) < 10:
                size = 1500 if rng.random() < 0.01 else rng.randint(1, 20)
                rows = [(i, rng.randint(0, 10**6), f"n{i}") for i in range(next_id, next_id + size)]
                cur.executemany("INSERT INTO ledger VALUES (%s, %s, %s)", rows)
                cur.execute("INSERT INTO audit (ledger_id, what) VALUES (%s, 'insert')", (next_id,))
                live.extend(r[0] for r in rows)
                next_id += size
            elif choice < 0.65:
                for key in rng.sample(live, min(len(live), rng.randint(1, 5))):
                    cur.execute("UPDATE ledger SET v = v + 1, note = %s WHERE id = %s", (f"u{transactions}", key))
            elif choice < 0.85:
                key = live.pop(rng.randrange(len(live)))
                cur.execute("DELETE FROM ledger WHERE id = %s", (key,))
                cur.execute("INSERT INTO audit (ledger_id, what) VALUES (%s, 'delete')", (key,))
            else:
                old = live.pop(rng.randrange(len(live)))
                cur.execute("UPDATE ledger SET id = %s WHERE id = %s", (next_id, old))
                live.append(next_id)
                next_id += 1
            conn.commit()
            transactions += 1
            time.sleep(rng.uniform(0, max_pause_s))
    return transactions


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


def binlog_changes(mariadb, database: str, gtid: str, end: Lsn) -> list[tuple]:
    """(table, op, before, after) for every row change from `gtid` to `end`, straight from the binlog."""
    stream = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": mariadb.port, "user": "root", "password": ""},
        server_id=999,
        is_mariadb=True,
        auto_position=gtid,
        blocking=True,
        only_events=[RotateEvent, XidEvent, QueryEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
    )
    changes = []
    file = ""
    try:
        for event in stream:
            if isinstance(event, RotateEvent):
                file = event.next_binlog
                continue
            if position_lsn(file, event.packet.log_pos) >= end:
                break
            if not isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)) or event.schema != database:
                continue
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
    finally:
        stream.close()
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
