"""Helpers for dump tests: a random concurrent workload and the check that the reconciled
stream reproduces the source table."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pyarrow.parquet as pq
import pymysql
import pytest

from capture.dump.control import DumpSettings
from capture.dump.engine import DumpEngine, DumpRequest
from capture.dump.progress import dump_dir
from capture.dump.reconcile import apply, reconcile_table
from capture.dump.record import RECORD
from capture.errors import DumpInputError
from capture.landing.chunks import read_chunk_meta
from capture.landing.reader import chunk_files
from capture.sources import open_chunk_source
from capture.sources.base import WATERMARK_SCHEMA, WATERMARK_TABLE
from capture.sources.mysql.reader import position_lsn
from tests.servers import wait_for


class Workload(threading.Thread):
    """Inserts, updates, deletes, key changes and multi-row transactions on `table(<key>, v, note)`.

    `server` is any test server whose `connect(database, autocommit=False)` gives a DB-API
    connection (MariaDB, PostgreSQL); `random_sql` is its random function. New keys are
    `key_value(n)` for n counting up from `first_free_id` (default: n itself, an integer `id`);
    `key_changes=False` leaves keys alone (PostgreSQL under REPLICA IDENTITY DEFAULT cannot
    carry an unchanged TOASTed value across a key change of a row that neither the target nor the
    merge run holds, such as history the dump has not read yet, see README)."""

    def __init__(
        self,
        server,
        database: str,
        table: str,
        first_free_id: int,
        seed: int,
        random_sql: str = "RAND()",
        key: str = "id",
        key_value: Callable[[int], Any] | None = None,
        key_changes: bool = True,
    ) -> None:
        super().__init__(daemon=True)
        self.server, self.database, self.table, self.random_sql = server, database, table, random_sql
        self.key, self.key_value, self.key_changes = key, key_value or (lambda n: n), key_changes
        self.next_id = first_free_id
        self.rng = random.Random(seed)
        self.stop_event = threading.Event()
        self.transactions = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def _run(self) -> None:
        rng, t = self.rng, self.table
        conn = self.server.connect(self.database, autocommit=False)
        try:
            self._transactions(conn, rng, t)
        finally:
            conn.close()

    def _transactions(self, conn, rng: random.Random, t: str) -> None:
        key, new = self.key, self.key_value
        with conn.cursor() as cur:
            while not self.stop_event.is_set():
                cur.execute(f"SELECT {key} FROM {t} ORDER BY {self.random_sql} LIMIT 5")
                some = [r[0] for r in cur.fetchall()]
                choice = rng.random() if self.key_changes else rng.random() * 0.8
                if choice < 0.3 or not some:
                    n = rng.randint(1, 10)
                    rows = [(new(i), rng.randint(0, 999), f"new{i}") for i in range(self.next_id, self.next_id + n)]
                    cur.executemany(f"INSERT INTO {t} ({key}, v, note) VALUES (%s, %s, %s)", rows)
                    self.next_id += n
                elif choice < 0.6:
                    cur.executemany(f"UPDATE {t} SET v = v + 1, note = 'upd' WHERE {key} = %s", [(k,) for k in some])
                elif choice < 0.8:
                    cur.execute(f"DELETE FROM {t} WHERE {key} = %s", (some[0],))
                    if rng.random() < 0.3:  # deleted and re-inserted
                        cur.execute(f"INSERT INTO {t} ({key}, v, note) VALUES (%s, 7, 'again')", (some[0],))
                else:
                    cur.execute(f"UPDATE {t} SET {key} = %s WHERE {key} = %s", (new(self.next_id), some[0]))
                    self.next_id += 1
                conn.commit()
                self.transactions += 1
                time.sleep(rng.uniform(0, 0.003))

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=30)
        if self.error is not None:
            raise self.error


def nudge(mariadb) -> None:
    """Commit one transaction outside every captured table. A read-only chunk's HIGH is the binlog
    end after the chunk (capture/sources/mysql/snapshot.py): the frontier passes it only when
    something commits after it, which an idle test server does not do by itself."""
    mariadb.execute(
        "CREATE DATABASE IF NOT EXISTS logtide_test_nudge",
        "CREATE TABLE IF NOT EXISTS logtide_test_nudge.n (id INT PRIMARY KEY, at TIMESTAMP(6))",
        "REPLACE INTO logtide_test_nudge.n VALUES (1, NOW(6))",
    )


def wait_until_landed(mariadb, capture, timeout: float = 60, nudge_first: bool | None = None) -> None:
    """Until the capture's frontier passes the server's current binlog end; first `nudge` the
    server (default: when the capture's source has read-only watermarks)."""
    if nudge_first is None:
        nudge_first = capture.config.source(capture.source).watermarks == "readonly"
    if nudge_first:
        nudge(mariadb)
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    end = position_lsn(file, int(pos))
    wait_for(lambda: capture.zone.checkpoint().frontier >= end, timeout, interval=0.1, what="capture to catch up")


def table_state(mariadb, database: str, table: str, key: tuple[str, ...] = ("id",)) -> dict:
    with mariadb.connect(database) as conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(f"SELECT * FROM {table}")
        return {tuple(r[k] for k in key): r for r in cur.fetchall()}


def reconciled_state(capture, schema: str, table: str):
    """The table as the landed log and chunks rebuild it (reconcile.py), and the reconciliation's counts."""
    stream, stats = reconcile_table(capture.zone, schema, table)
    return apply(stream), stats


def table_rows(mariadb, database: str, table: str) -> list[tuple]:
    """The table's rows as tuples, in key order."""
    with mariadb.connect(database) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table} ORDER BY id")
        return [tuple(row) for row in cursor.fetchall()]


def landed_rows(capture, schema: str, table: str) -> list[tuple]:
    """The reconciled landed table's rows as sorted tuples, to compare with `table_rows`."""
    return sorted(tuple(row.values()) for row in reconciled_state(capture, schema, table)[0].values())


def wait_chunks_closed(capture, schema: str, table: str, timeout: float) -> None:
    """Until the capture's frontier passed every chunk's HIGH: none is pending in reconciliation."""
    wait_for(lambda: reconciled_state(capture, schema, table)[1].chunks_pending == 0, timeout, what="chunks closed")


def run_dump(
    capture,
    request: DumpRequest | str,
    chunk_size: int = 1000,
    *,
    wrap: Callable[[Any], Any] | None = None,
    config=None,
    control=None,
) -> dict:
    """One dump (a table name: all of it in chunks of `chunk_size`) on a chunk source of the capture's
    source `src` (or `config`), wrapped by `wrap` (a test's stand-in such as `AlterAt`), closed after;
    `control`: the engine's ControlStore (pause, resume)."""
    if isinstance(request, str):
        request = DumpRequest(tables=[request], settings=DumpSettings(chunk_size=chunk_size))
    source = open_chunk_source("src", config or capture.config.source("src"))
    try:
        return DumpEngine(wrap(source) if wrap else source, capture.zone, control).run(request)
    finally:
        source.close()


def assert_refused(engine: DumpEngine, zone, cases: list[tuple[DumpRequest, str]]) -> None:
    """Each (request, message): refused with a DumpInputError that says `message`, before anything
    of the dump was written (no progress, no chunk folder)."""
    for request, message in cases:
        with pytest.raises(DumpInputError) as info:
            engine.run(request)
        assert message in str(info.value)
        assert not dump_dir(zone, request.dump_id).exists()
        assert not (zone.root / "chunks" / request.dump_id).exists()


def open_engine(capture, control=None) -> tuple[DumpEngine, Any]:
    """A dump engine on a chunk source of the capture's source `src` (close the source after)."""
    source = open_chunk_source("src", capture.config.source("src"))
    return DumpEngine(source, capture.zone, control), source


class AlterAt:
    """The real chunk source, except that another connection changes the table at an exact
    point: right after LOW of one chunk (before its SELECT) or right before HIGH of another
    (after the SELECT: the narrowest place for a change the chunk must not miss)."""

    def __init__(self, source, execute: Callable[[str], Any]) -> None:
        self._source, self._execute, self._pending = source, execute, {}

    def at(self, chunk: int, kind: str, sql: str) -> AlterAt:
        self._pending[(chunk, kind)] = sql
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)

    def write_watermark(self, mark, table=None) -> None:
        sql = self._pending.pop((mark.chunk, mark.kind), None)
        if sql is not None and mark.kind == "HIGH":
            self._execute(sql)
        self._source.write_watermark(mark, table)
        if sql is not None and mark.kind == "LOW":
            self._execute(sql)


class StatementAt:
    """The real chunk source, except that another connection runs a statement at one point of
    one chunk: `before LOW` (between two chunks), `after LOW` (inside the window, before the
    SELECT) or `before HIGH` (inside the window, after the SELECT)."""

    def __init__(self, source: Any, execute: Callable[[str], Any], chunk: int, where: str, sql: str) -> None:
        self._source, self._execute = source, execute
        self._chunk, self._where, self._sql = chunk, where, sql
        self.done = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)

    def _now(self, mark: Any, where: str) -> None:
        if not self.done and mark.chunk == self._chunk and where == self._where:
            self.done = True
            self._execute(self._sql)

    def write_watermark(self, mark: Any, table: Any = None) -> None:
        self._now(mark, f"before {mark.kind}")
        self._source.write_watermark(mark, table)
        self._now(mark, f"after {mark.kind}")


def check_schema_change_rereads(
    capture, schema: str, execute: Callable[[str], Any], landed: Callable[[], None], table: Callable[[], dict]
) -> None:
    """Dump `ledger` (ids 1..200: id, v, note) in 20-row chunks while a column is added right
    before HIGH of chunk 3 and another dropped right after LOW of chunk 6: both chunks are read
    again with the new columns, and the reconciled rows have the table's columns and values."""
    source = open_chunk_source("src", capture.config.source("src"))
    alter = AlterAt(source, execute)
    alter.at(3, "HIGH", "ALTER TABLE ledger ADD COLUMN extra INT DEFAULT 5")
    alter.at(6, "LOW", "ALTER TABLE ledger DROP COLUMN note")  # the chunk's SELECT would name it
    try:
        request = DumpRequest(dump_id="race", tables=[f"{schema}.ledger"], settings=DumpSettings(chunk_size=20))
        DumpEngine(alter, capture.zone).run(request)
    finally:
        source.close()
    landed()
    columns = {
        read_chunk_meta(p).chunk: pq.read_schema(p).field("after").type.names
        for p in chunk_files(capture.zone, schema, "ledger")
    }
    assert columns[2] == ["id", "v", "note"] and columns[3] == ["id", "v", "note", "extra"]
    assert columns[6] == ["id", "v", "extra"]
    marks = [e["after"] for e in capture.events(WATERMARK_SCHEMA, WATERMARK_TABLE)]
    highs = [m["chunk"] for m in marks if m["kind"] == "HIGH" and m["dump_id"] == "race"]
    if capture.config.source(capture.source).watermarks == "table":  # read-only: no watermark rows
        assert highs.count(3) == 2 and highs.count(6) == 1  # 3 read twice; 6 got no HIGH with the old columns
    state, _ = reconciled_state(capture, schema, "ledger")
    now = table()
    assert {k: r for k, r in state.items() if k[0] > 100} == {k: r for k, r in now.items() if k[0] > 100}
    assert all(state[k]["extra"] == 5 and state[k]["v"] == now[k]["v"] for k in now if k[0] > 40)


class Died(Exception):
    """Stands for the dump process dying: nothing in the engine handles it."""


class DiesBeforeHigh:
    """The real chunk source, except that the dump 'dies' right before HIGH of one chunk: that
    chunk's LOW is committed and its file written, its HIGH never is. `lows` keeps the id of
    every LOW written through it, by chunk."""

    def __init__(self, source, chunk: int) -> None:
        self._source, self._chunk, self.lows = source, chunk, {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)

    def write_watermark(self, mark, table=None) -> None:
        if mark.kind == "HIGH" and mark.chunk == self._chunk:
            raise Died(f"killed before HIGH of chunk {mark.chunk}")
        if mark.kind == "LOW":
            self.lows[mark.chunk] = mark.id
        self._source.write_watermark(mark, table)


def edit_progress(zone, dump_id: str, edit: Callable[[dict], None]) -> None:
    """Rewrite every progress file of a stopped dump with `edit`: the file an older version would have
    written (a field it did not know yet removed, a value in its format)."""
    files = [p for p in sorted(dump_dir(zone, dump_id).glob("*.json")) if p.name != RECORD]
    assert files, f"dump {dump_id} wrote no progress file"
    for path in files:
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))


def populate_ledger(mariadb, database: str, rows: int) -> None:
    """The MariaDB table `ledger` with ids 1..rows: history written before capture starts."""
    mariadb.execute(
        "CREATE TABLE ledger (id INT PRIMARY KEY, v INT, note VARCHAR(20))",
        f"INSERT INTO ledger SELECT seq, seq % 100, CONCAT('row', seq) FROM seq_1_to_{rows}",
        database=database,
    )
