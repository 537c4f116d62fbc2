"""MariaDB system-versioned tables (`WITH SYSTEM VERSIONING`) land what `SELECT *` shows: their
current rows, without the period columns. A dump reads them like any table (both watermark kinds),
and ALTER TABLE ... ADD / DROP SYSTEM VERSIONING in the middle of the log is followed, also by a
reader that reaches those statements long after they ran (the catalog then describes the table
as it is now)."""

from __future__ import annotations

import json

import pytest

from capture.errors import BinlogDecodeError
from tests.integration.binlog_check import binlog_position
from tests.integration.dumping import reconciled_state, table_state, wait_until_landed
from tests.integration.keyless import cli
from tests.integration.test_binlog_audit import committed_end, decode, replay

pytestmark = pytest.mark.integration

TABLES = [
    "CREATE TABLE vledger (id INT PRIMARY KEY, v INT, note VARCHAR(20)) WITH SYSTEM VERSIONING",
    # period columns of other names, the row start visible (SELECT * shows it; it does not land)
    "CREATE TABLE vexplicit (id INT PRIMARY KEY, v INT, vs TIMESTAMP(6) AS ROW START,"
    " ve TIMESTAMP(6) AS ROW END INVISIBLE, PERIOD FOR SYSTEM_TIME (vs, ve)) WITH SYSTEM VERSIONING",
    "CREATE TABLE vkeyless (n INT, v INT) WITH SYSTEM VERSIONING",
    "INSERT INTO vledger SELECT seq, seq % 100, CONCAT('row', seq) FROM seq_1_to_300",
    "UPDATE vledger SET v = v + 1 WHERE id % 3 = 0",
    "DELETE FROM vledger WHERE id % 10 = 0",
    "UPDATE vledger SET id = id + 1000 WHERE id % 7 = 0",
    "INSERT INTO vexplicit (id, v) SELECT seq, seq FROM seq_1_to_50",
    "UPDATE vexplicit SET v = -v WHERE id % 2 = 0",
    "DELETE FROM vexplicit WHERE id % 5 = 0",
    "INSERT INTO vkeyless VALUES (1, 1), (2, 2)",
    "UPDATE vkeyless SET v = 3",
]
CHANGES = [
    "UPDATE vledger SET v = v * 2, note = 'log' WHERE id % 4 = 0",
    "DELETE FROM vledger WHERE id % 9 = 0",
    "INSERT INTO vledger VALUES (5000, 1, 'new'), (10, 2, 'again')",
    "UPDATE vledger SET id = id + 10000 WHERE id % 11 = 0",
    "DELETE HISTORY FROM vledger",
    "UPDATE vexplicit SET v = v + 100 WHERE id < 10",
    "DELETE FROM vexplicit WHERE id = 11",
]


def _state(mariadb, database: str, table: str) -> dict:
    """SELECT * without the visible row start (`vexplicit.vs`)."""
    return {k: {c: v for c, v in row.items() if c != "vs"} for k, row in table_state(mariadb, database, table).items()}


@pytest.mark.parametrize("watermarks", ["table", "readonly"])
def test_an_all_tables_dump_reads_versioned_tables_as_select_shows_them(
    mariadb, database, make_capture, watermarks, tmp_path
):
    """History rows and period columns stay out of the chunks and the log alike; the keyless one is
    skipped by the all-tables dump as any keyless table is."""
    mariadb.execute(*TABLES, database=database)
    capture = make_capture([f"{database}.*"], watermarks=watermarks).start()
    capture.wait_running()
    assert f"tables={database}.vkeyless " in capture.log()  # capture.keyless_tables, as for any keyless table
    mariadb.execute(*CHANGES[:3], database=database)
    dump = cli(capture.config_path, "dump", "--source", "src", "--chunk-size", "17", "--dump-id", "all")
    assert dump.returncode == 0, dump.stderr
    summary = json.loads(dump.stdout)
    tables = {t["table"]: t for t in summary["tables"]}
    assert sorted(tables) == [f"{database}.vexplicit", f"{database}.vledger"]
    assert [s["table"] for s in summary["skipped"]] == [f"{database}.vkeyless"]
    assert "no primary key" in summary["skipped"][0]["reason"]
    mariadb.execute(*CHANGES[3:], database=database)
    wait_until_landed(mariadb, capture)
    for table, columns in (("vledger", ["id", "v", "note"]), ("vexplicit", ["id", "v"])):
        want = _state(mariadb, database, table)
        assert tables[f"{database}.{table}"]["rows"] > 0
        state, _ = reconciled_state(capture, database, table)
        assert {k: dict(r) for k, r in state.items()} == want, table
        assert all(list(e["after"] or e["before"]) == columns for e in capture.events(database, table))
    assert capture.stop() == 0


def _reader_changes(mariadb, database: str, start, table: str) -> tuple[list, list]:
    """What a reader yields for `table` from `start` to now, and the schemas of its batches."""
    changes, schemas = decode(mariadb, database, start, committed_end(mariadb, start), [table])
    return changes.get(table, []), schemas


def test_add_and_drop_system_versioning_in_the_log(mariadb, database):
    """A table versioned, unversioned and versioned again (implicit, then explicit period columns),
    each phase with inserts, updates, a key change and deletes: read after all of it ran, the log
    replays to the table's current rows with the same columns throughout."""
    mariadb.execute(
        "CREATE TABLE flip (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE flop (id INT PRIMARY KEY, v INT) WITH SYSTEM VERSIONING",
        database=database,
    )
    start = binlog_position(mariadb)

    def phase(table: str, base: int) -> list[str]:
        return [
            f"INSERT INTO {table} VALUES ({base + 1}, 1), ({base + 2}, 2), ({base + 3}, 3)",
            f"UPDATE {table} SET v = v + 10 WHERE id = {base + 1}",
            f"UPDATE {table} SET id = {base + 9} WHERE id = {base + 2}",
            f"DELETE FROM {table} WHERE id = {base + 3}",
            f"UPDATE {table} SET v = -v",
        ]

    mariadb.execute(
        *phase("flip", 0),
        "ALTER TABLE flip ADD SYSTEM VERSIONING",
        *phase("flip", 10),
        "ALTER TABLE flip DROP SYSTEM VERSIONING",
        *phase("flip", 20),
        *phase("flop", 0),
        "ALTER TABLE flop DROP SYSTEM VERSIONING",
        *phase("flop", 10),
        "ALTER TABLE flop ADD COLUMN s TIMESTAMP(6) AS ROW START INVISIBLE, ADD COLUMN e TIMESTAMP(6) AS ROW END"
        " INVISIBLE, ADD PERIOD FOR SYSTEM_TIME (s, e), ADD SYSTEM VERSIONING",
        *phase("flop", 20),
        database=database,
    )
    for table in ("flip", "flop"):
        changes, schemas = _reader_changes(mariadb, database, start, table)
        assert schemas[table].names == ("id", "v") and schemas[table].key == ("id",)
        want = [{"id": k[0], "v": r["v"]} for k, r in sorted(table_state(mariadb, database, table).items())]
        assert replay(schemas[table], changes) == want, table
        # per phase 3 inserts, an update, a key change (2), a delete, then every row so far updated
        assert len(changes) == 3 * (3 + 1 + 2 + 1) + 2 + 4 + 6, table


def test_transaction_precise_versioning_is_refused_by_name(mariadb, database, make_capture):
    """MariaDB logs writes to a table versioned by transaction ids (AS ROW START on BIGINT UNSIGNED)
    as statements, whatever binlog_format says: capture names such tables when it starts, and
    stops at the first write to one, saying why."""
    mariadb.execute(
        "CREATE TABLE trx (id INT PRIMARY KEY, v INT, s BIGINT UNSIGNED AS ROW START INVISIBLE,"
        " e BIGINT UNSIGNED AS ROW END INVISIBLE, PERIOD FOR SYSTEM_TIME (s, e)) WITH SYSTEM VERSIONING",
        database=database,
    )
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    assert "capture.statement_logged_tables" in capture.log() and f"tables={database}.trx " in capture.log()
    start = binlog_position(mariadb)
    mariadb.execute("INSERT INTO trx VALUES (1, 1)", database=database)
    with pytest.raises(BinlogDecodeError, match="transaction-precise system versioning"):
        _reader_changes(mariadb, database, start, "trx")
    assert capture.process.wait(timeout=60) != 0
    assert "transaction-precise system versioning" in capture.log()
