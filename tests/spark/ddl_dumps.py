"""Helpers for DDL during a MariaDB dump: a table with columns a DDL can change while the workload
(tests/integration/dumping.py, which writes id, v, note) keeps writing, a dump in small chunks that
runs a statement at an exact point of one chunk, and the comparison of the Iceberg target with the
source on the source's columns."""

from __future__ import annotations

from typing import Any

import pymysql

from capture.dump.control import DumpSettings
from capture.dump.engine import DumpEngine, DumpRequest
from capture.merge.app import run_merge
from capture.sources import open_chunk_source
from tests.integration.dumping import StatementAt, Workload, wait_until_landed
from tests.spark.merging import differences, iceberg_state, source_state

ROWS = 300
CHUNK = 25
TABLE = """CREATE TABLE ledger (
  id INT PRIMARY KEY, v INT, note VARCHAR(20),
  c INT DEFAULT 3, s VARCHAR(10) DEFAULT 'abcdef', e ENUM('a', 'b') DEFAULT 'b',
  st SET('x', 'y') DEFAULT 'x,y', l VARCHAR(10) CHARACTER SET latin1 DEFAULT 'caf\u00e9'
)"""
FILL = (
    "INSERT INTO ledger (id, v, note, c, s, e, st) SELECT seq, seq % 100, CONCAT('row', seq), seq,"
    f" CONCAT('s', seq, 'xyzw'), IF(seq % 2, 'a', 'b'), IF(seq % 3, 'x', 'y,x') FROM seq_1_to_{ROWS}"
)


class DdlWorkload(Workload):
    """The workload, going on after the deadlocks and lock waits an ALTER's table copy gives it."""

    def _run(self) -> None:
        while not self.stop_event.is_set():
            try:
                super()._run()
            except pymysql.err.OperationalError as exc:
                if exc.args[0] not in (1205, 1213, 1412):
                    raise


def dump_through(mariadb: Any, database: str, capture: Any, chunk: int, where: str, sql: str) -> dict:
    """The whole of `ledger` dumped in CHUNK-row chunks while the workload writes, `sql` run at
    `where` of chunk `chunk` (statements separated by ';' run on one connection)."""
    workload = DdlWorkload(mariadb, database, "ledger", 100_000, seed=chunk)
    workload.start()
    source = open_chunk_source("src", capture.config.source("src"))

    def execute(text: str) -> None:
        mariadb.execute(*[s for s in text.split(";") if s.strip()], database=database)

    wrapped = StatementAt(source, execute, chunk, where, sql)
    request = DumpRequest(tables=[f"{database}.ledger"], settings=DumpSettings(chunk_size=CHUNK))
    try:
        summary = DumpEngine(wrapped, capture.zone).run(request)
    finally:
        source.close()
        workload.stop()
    assert wrapped.done, "the statement never ran: the dump ended before that chunk"
    assert capture.process.poll() is None, f"capture stopped: {capture.log()[-2000:]}"
    wait_until_landed(mariadb, capture)
    return summary


def merged_differences(
    spark: Any, config: Any, mariadb: Any, database: str, table: str = "ledger", spelled: dict[str, str] | None = None
) -> str:
    """Merge the landing zone; '' when the Iceberg target holds the source's rows on the source's
    columns (a dropped column may stay in the target: the source no longer has it), else the
    first differences. `spelled`: columns read from the source with an SQL expression of the
    spelling they land in (a SET with a '' member)."""
    run_merge(spark, config, "src")
    target = f"`{config.merge.catalog_name}`.`{database}`.`{database}__{table}`"
    want = source_state(mariadb, database, table)
    for column, expression in (spelled or {}).items():
        with mariadb.connect(database) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT id, {expression} FROM {table}")
            for key, value in cur.fetchall():
                want[(key,)][column] = value
    got = iceberg_state(spark, target)
    columns = next(iter(want.values())).keys() if want else set()
    got = {k: {c: row.get(c) for c in columns} for k, row in got.items()}
    return differences(got, want)
