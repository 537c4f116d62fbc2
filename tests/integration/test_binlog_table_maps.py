"""Table maps parsed once per distinct table map (`capture.sources.mysql.table_maps`), against a
real MariaDB: the reader's rows stay right across ALTERs that change only a column's name or
only its length (the bytes a table map is known by change too)."""

from __future__ import annotations

import threading

import pytest

from capture.config import SourceConfig
from capture.events import ChangeBatch, TransactionEnd
from capture.sources.mysql.reader import BinlogReader
from tests.integration.binlog_check import binlog_position

pytestmark = pytest.mark.integration


def test_identical_table_maps_share_one_parse_and_alters_are_seen(mariadb, database):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT, b VARCHAR(10))", database=database)
    start = binlog_position(mariadb)
    statements = [f"INSERT INTO t VALUES ({i}, {i}, 'x{i}')" for i in range(20)]
    statements += ["ALTER TABLE t RENAME COLUMN a TO c"]  # same types: only the names differ
    statements += [f"INSERT INTO t VALUES ({i}, {i}, 'y{i}')" for i in range(20, 30)]
    # same names, only a length: past 255 bytes, so a value's length prefix takes 2 bytes from now on
    statements += ["ALTER TABLE t MODIFY b VARCHAR(100)"]
    statements += [f"INSERT INTO t VALUES ({i}, {i}, '{'z' * 15}')" for i in range(30, 40)]
    mariadb.execute(*statements, database=database)

    config = SourceConfig(  # RENAME COLUMN rewrites rows (column_rewrites), accepted here
        kind="mariadb",
        port=mariadb.port,
        user="root",
        server_id=4242,
        include=[f"{database}.*"],
        column_rewrites="accept",
    )
    batches, ends = [], 0
    for item in BinlogReader("src", config, start, threading.Event()):
        if isinstance(item, ChangeBatch):
            batches.append(item)
        elif isinstance(item, TransactionEnd):
            ends += 1
            if ends == 42:  # 40 inserts, 2 ALTERs
                break
    names = [batch.table.names for batch in batches]
    assert names == [("id", "a", "b")] * 20 + [("id", "c", "b")] * 20
    assert [batch.changes[0].after for batch in batches] == (
        [(i, i, f"x{i}") for i in range(20)]
        + [(i, i, f"y{i}") for i in range(20, 30)]
        + [(i, i, "z" * 15) for i in range(30, 40)]
    )
    # one schema object per table map parsed: one per definition, not one per transaction
    assert len({id(batch.table) for batch in batches}) == 3
