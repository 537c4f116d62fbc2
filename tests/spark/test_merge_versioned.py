"""MariaDB system-versioned tables end to end: the real capture, a dump with small chunks under a
concurrent workload (inserts, updates, deletes, key changes, rolled-back transactions, DELETE
HISTORY), merges in the middle of the dump and after it: each Iceberg target equals what
`SELECT *` shows (current rows, no period columns), the plain-Python reconciliation and its
changelog's replay."""

from __future__ import annotations

import pytest

from capture.merge.app import run_merge
from tests.integration.dumping import Workload, wait_until_landed
from tests.spark.merging import (
    PausedDump,
    changelog_replay,
    differences,
    iceberg_state,
    reference_state,
    source_state,
    target_types,
    typed,
)
from tests.spark.test_merge import _target

pytestmark = pytest.mark.spark

SETUP = [
    "CREATE TABLE vledger (id INT PRIMARY KEY, v INT, note VARCHAR(20)) WITH SYSTEM VERSIONING",
    "CREATE TABLE vexplicit (id INT PRIMARY KEY, v INT, note VARCHAR(20), vs TIMESTAMP(6) AS ROW START INVISIBLE,"
    " ve TIMESTAMP(6) AS ROW END INVISIBLE, PERIOD FOR SYSTEM_TIME (vs, ve)) WITH SYSTEM VERSIONING",
    # history before capture starts: only the dump has these rows, and their history stays behind
    "INSERT INTO vledger SELECT seq, seq % 100, CONCAT('row', seq) FROM seq_1_to_800",
    "INSERT INTO vexplicit (id, v, note) SELECT seq, seq, CONCAT('x', seq) FROM seq_1_to_300",
    "UPDATE vledger SET v = v + 1 WHERE id % 3 = 0",
    "DELETE FROM vledger WHERE id % 10 = 0",
    "UPDATE vexplicit SET id = id + 5000 WHERE id % 7 = 0",
]
TABLES = ("vledger", "vexplicit")
TYPES = {"id": "int", "v": "int", "note": "string", "_lsn": "decimal(38,0)", "_applied_at": "timestamp"}


def _rolled_back(mariadb, database: str, round_: int) -> None:
    """Writes on both tables that roll back: none of them may show."""
    with mariadb.connect(database, autocommit=False) as conn, conn.cursor() as cur:
        for table in TABLES:
            cur.execute(f"UPDATE {table} SET v = -1, note = 'rolled back' WHERE id % 13 = {round_ % 13}")
            cur.execute(f"DELETE FROM {table} WHERE id % 17 = {round_ % 17}")
            cur.execute(f"INSERT INTO {table} (id, v, note) VALUES ({900_000 + round_}, 0, 'rolled back')")
        conn.rollback()


@pytest.mark.parametrize("watermarks", ["table", "readonly"])
def test_versioned_tables_merge_to_what_select_shows(mariadb, database, make_capture, merge_config, spark, watermarks):
    mariadb.execute(*SETUP, database=database)
    capture = make_capture([f"{database}.*"], landing={"flush_interval_s": 0.5}, watermarks=watermarks).start()
    capture.wait_running()
    config = merge_config(capture.config)
    tables = [f"{database}.{t}" for t in TABLES]

    def workloads(firsts: list[int], seed: int) -> list[Workload]:
        started = [
            Workload(mariadb, database, t, first, seed + i)
            for i, (t, first) in enumerate(zip(TABLES, firsts, strict=True))
        ]
        for w in started:
            w.start()
        return started

    running = workloads([10_000, 10_000], 1)
    finished: list[Workload] = []
    reports = []
    try:
        with PausedDump(capture, "versioned", tables) as dump:  # resumed and joined before the workloads stop
            for round_, done in enumerate((6, 14)):
                dump.pause_after(done)
                for w in running:
                    w.stop()
                finished += running
                # not beside the workload: its table-wide locks would deadlock it
                _rolled_back(mariadb, database, round_)
                mariadb.execute("DELETE HISTORY FROM vledger", database=database)
                wait_until_landed(mariadb, capture)
                reports.append(run_merge(spark, config, "src", tables))
                running = workloads([w.next_id for w in running], 10 + round_)
                dump.resume()
    finally:
        for w in running:
            w.stop()
    result = dump.result
    finished += running
    _rolled_back(mariadb, database, 99)
    wait_until_landed(mariadb, capture)
    reports.append(run_merge(spark, config, "src", tables))

    assert all(not r["failed"] and not r["skipped"] for r in reports)
    assert {t["table"] for t in result["tables"]} == set(tables) and all(t["chunks"] > 3 for t in result["tables"])
    assert all(w.transactions > 0 for w in finished) and sum(w.transactions for w in finished) > 50
    for table in TABLES:
        target = _target(config, database, table)
        state = typed(iceberg_state(spark, target))
        want = typed(source_state(mariadb, database, table))  # SELECT *: current rows, period columns invisible
        assert state == want, f"{table}:\n{differences(state, want)}"
        reference = typed(reference_state(capture.zone, database, table))
        assert state == reference, f"{table}:\n{differences(state, reference)}"
        assert target_types(spark, target) == TYPES
        replay = typed(changelog_replay(spark, _target(config, database, table, "__changelog")))
        assert replay == state, table
    assert capture.stop() == 0
