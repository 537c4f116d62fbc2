"""The OLTP benchmark's writer: one process committing small transactions as fast as the server
takes them (run by `benchmarks.oltp_capture`, one process per connection).

    python -m benchmarks.oltp_writer KIND PORT TABLE FIRST_ID IDS TRANSACTIONS ROWS

Each transaction updates ROWS rows of TABLE (ids FIRST_ID .. FIRST_ID+IDS-1, round robin, so
writers with separate id ranges never wait for each other's locks); a transaction of several
rows is sent as one round trip (BEGIN; UPDATE ...; COMMIT). The process connects, prints
"ready", waits for a line on stdin (all writers start together), writes, and prints one JSON
line: the wall-clock times of its first and last commit.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

UPDATE = "UPDATE {table} SET balance = balance + 1, touched = {now} WHERE id = {id}"


def connect(kind: str, port: int) -> Any:
    if kind == "postgresql":
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=port, dbname="postgres", user="postgres")
        conn.autocommit = True
        return conn
    import pymysql
    from pymysql.constants import CLIENT

    return pymysql.connect(
        host="127.0.0.1", port=port, user="root", database="oltp", autocommit=True, client_flag=CLIENT.MULTI_STATEMENTS
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
    kind, port, table, first_id, ids, transactions, rows = argv
    texts = statements(kind, table, int(first_id), int(ids), int(transactions), int(rows))
    conn = connect(kind, int(port))
    cursor = conn.cursor()
    multi = kind != "postgresql" and int(rows) > 1
    print("ready", flush=True)
    sys.stdin.readline()
    first = 0.0
    for text in texts:
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
