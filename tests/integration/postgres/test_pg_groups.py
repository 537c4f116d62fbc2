"""PostgreSQL's reader holds transactions and hands them over in groups (`batches.Group`),
against a real server: one batch for many transactions, each row with its own transaction,
handed over only once the group's first transaction was read `hold_s` ago, heartbeats or not."""

from __future__ import annotations

import threading
import time

import pytest

from capture.config import SourceConfig
from capture.events import ColumnBatch, Heartbeat, Lsn, TransactionEnd
from capture.sources.postgres.source import PostgresSource

pytestmark = pytest.mark.integration


def _table_t_source(postgres, pg_database: str) -> tuple[PostgresSource, dict]:
    """A table `t (id, v)` and a preflighted source reading it, with its position before any row."""
    postgres.execute("CREATE TABLE t (id int PRIMARY KEY, v text)", database=pg_database)
    config = SourceConfig(
        kind="postgresql",
        port=postgres.port,
        user="postgres",
        database=pg_database,
        slot=f"lt_{pg_database}"[:63],
        include=["public.*"],
        heartbeat_s=0.1,
    )
    source = PostgresSource("src", config)
    source.preflight()
    _, resume = source.current_position()
    return source, resume


def test_transactions_are_held_for_the_flush_interval_and_handed_over_together(postgres, pg_database):
    source, resume = _table_t_source(postgres, pg_database)
    postgres.execute(*[f"INSERT INTO t VALUES ({i}, 'v{i}')" for i in range(30)], database=pg_database)
    items = []
    try:
        for item in source.read(resume, threading.Event(), hold_s=0.8):
            items.append((time.monotonic(), item))
            if isinstance(item, TransactionEnd):
                break
    finally:
        source.close()
    kinds = [type(item) for _, item in items]
    assert kinds[-2:] == [ColumnBatch, TransactionEnd] and set(kinds[:-2]) == {Heartbeat}  # idle, holding
    batch, (yielded, end) = items[-2][1], items[-1]
    events = batch.events.to_pylist()
    assert [e["after"]["id"] for e in events] == list(range(30)) and len({e["_txid"] for e in events}) == 30
    majors = [Lsn.decode(int(e["_lsn"])) for e in events]
    assert all(lsn.minor == 0 for lsn in majors) and majors == sorted(majors) and majors[-1] < end.frontier
    assert yielded - end.read_at >= 0.8  # not handed over at a heartbeat (0.1 s): the writer commits it at once


def test_a_backlogs_large_last_group_is_handed_over_once_read_with_an_end_that_asks_for_a_commit(postgres, pg_database):
    """6,000 single-row transactions written before reading, a hold of 60 s: once everything the
    server has sent is read, a group of at least 5,000 (half of BATCH_ROWS) is handed over at once,
    its end asking the writer to commit now, not after the hold; each of its transactions' rows is
    in it, in commit order. (How much the walsender has sent when the socket is first drained
    depends on the machine's load: the group holds 5,000 to 6,000 of them.)"""
    source, resume = _table_t_source(postgres, pg_database)
    postgres.execute(
        "DO $$ BEGIN FOR i IN 0..5999 LOOP INSERT INTO t VALUES (i, 'v' || i); COMMIT; END LOOP; END $$",
        database=pg_database,
    )
    items = []
    began = time.monotonic()
    try:
        for item in source.read(resume, threading.Event(), hold_s=60):
            items.append(item)
            if isinstance(item, TransactionEnd):
                break
    finally:
        source.close()
    end = items[-1]
    assert isinstance(end, TransactionEnd) and end.flush and time.monotonic() - began < 30
    events = [e for item in items if isinstance(item, ColumnBatch) for e in item.events.to_pylist()]
    count = len(events)
    assert 5000 <= count <= 6000, count
    assert [e["after"]["id"] for e in events] == list(range(count)) and len({e["_txid"] for e in events}) == count
    majors = [Lsn.decode(int(e["_lsn"])).major for e in events]
    assert majors == sorted(majors) and majors[-1] < end.frontier.major
