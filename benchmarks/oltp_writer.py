"""The OLTP benchmarks' writers: processes committing small transactions as fast as the
server takes them, or at a set rate (`Writers`, used by `benchmarks.oltp_capture` and
`benchmarks.dump_throughput`). Each process, one connection:

    python -m benchmarks.oltp_writer KIND PORT DATABASE TABLE FIRST_ID IDS TRANSACTIONS ROWS [RATE]

Each transaction updates ROWS rows of TABLE (ids FIRST_ID .. FIRST_ID+IDS-1, round robin, so
writers with separate id ranges never wait for each other's locks); a transaction of several
rows is sent as one round trip (BEGIN; UPDATE ...; COMMIT). RATE (transactions/s, 0: as fast
as possible) paces the commits. The process connects, prints "ready", waits for a line on
stdin (all writers start together), writes, and prints one JSON line: the wall-clock times of
its first and last commit.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

UPDATE = "UPDATE {table} SET balance = balance + 1, touched = {now} WHERE id = {id}"


def connect(kind: str, port: int, database: str) -> Any:
    if kind == "postgresql":
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=port, dbname=database, user="postgres")
        conn.autocommit = True
        return conn
    import pymysql
    from pymysql.constants import CLIENT

    return pymysql.connect(
        host="127.0.0.1",
        port=port,
        user="root",
        database=database,
        autocommit=True,
        client_flag=CLIENT.MULTI_STATEMENTS,
    )


def statements(kind: str, table: str, first_id: int, ids: int, transactions: int, rows: int) -> list[str]:
    """The SQL text of every transaction, built before the clock starts."""
    now = "clock_timestamp()" if kind == "postgresql" else "NOW(6)"
    texts = []
    for t in range(transactions):
        updates = [UPDATE.format(table=table, now=now, id=first_id + (t * rows + r) % ids) for r in range(rows)]
        texts.append(updates[0] if rows == 1 else "BEGIN; " + "; ".join(updates) + "; COMMIT")
    return texts


def main(argv: list[str]) -> int:
    kind, port, database, table, first_id, ids, transactions, rows, *rate = argv
    texts = statements(kind, table, int(first_id), int(ids), int(transactions), int(rows))
    interval = 1 / float(rate[0]) if rate and float(rate[0]) > 0 else 0.0
    conn = connect(kind, int(port), database)
    cursor = conn.cursor()
    multi = kind != "postgresql" and int(rows) > 1
    print("ready", flush=True)
    sys.stdin.readline()
    first = 0.0
    began = time.monotonic()
    for n, text in enumerate(texts):
        if interval:
            delay = began + n * interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        cursor.execute(text)
        if multi:
            while cursor.nextset():
                pass
        if not first:
            first = time.time()
    last = time.time()
    conn.close()
    print(json.dumps({"first": first, "last": last}), flush=True)
    return 0


@dataclass(frozen=True)
class Burst:
    first: float  # wall clock of the first commit
    last: float  # ... and of the last

    def rate(self, transactions: int) -> float:
        return transactions / max(1e-9, self.last - self.first)


class Writers:
    """`count` writer processes on `table` of `database`, each on its own range of `ids` ids
    (ids 0 .. count x ids - 1 must exist)."""

    def __init__(self, kind: str, port: int, database: str, table: str, count: int, ids: int) -> None:
        self.kind, self.port, self.database, self.table = kind, port, database, table
        self.count, self.ids = count, ids

    def start(self, transactions: int, rows: int, rate: float = 0.0) -> list[subprocess.Popen[str]]:
        """Start the writers and let them go together; `rate`: transactions/s of all of them."""
        procs = []
        for w in range(self.count):
            share = transactions // self.count + (w < transactions % self.count)
            args = [
                self.kind,
                self.port,
                self.database,
                self.table,
                w * self.ids,
                self.ids,
                share,
                rows,
                rate / self.count,
            ]
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "benchmarks.oltp_writer", *map(str, args)],
                    cwd=ROOT,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError("a writer process did not start")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        return procs

    @staticmethod
    def finish(procs: list[subprocess.Popen[str]]) -> Burst:
        times = []
        for proc in procs:
            out, _ = proc.communicate(timeout=600)
            if proc.returncode != 0:
                raise RuntimeError(f"a writer exited with {proc.returncode}")
            times.append(json.loads(out.strip().splitlines()[-1]))
        return Burst(min(t["first"] for t in times), max(t["last"] for t in times))

    def write(self, transactions: int, rows: int, rate: float = 0.0) -> Burst:
        return self.finish(self.start(transactions, rows, rate))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
