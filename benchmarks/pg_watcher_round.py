"""The PostgreSQL catalog watcher's round with many captured tables (README, PostgreSQL: the catalog
watcher): a private server with N tables (primary keys), all in capture's publication; then rounds
alternating between the old one (the publication sync's own queries, then the watcher's statement)
and the new one (the statement, whose stamp tells the sync is not needed), on one connection.
Prints the medians and minimums of each. `python -m benchmarks.pg_watcher_round --tables 2000`"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from capture.config import SourceConfig
from capture.sources.postgres.connection import connect, query
from capture.sources.postgres.publication import Publication
from capture.sources.postgres.schema_change import CATALOG_SQL, SYNC_STAMP
from tests.servers import PostgreSQL

WITHOUT_STAMP = CATALOG_SQL.replace(f", (SELECT concat_ws(',', {SYNC_STAMP}))", "")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tables", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="logtide-pg-watcher-"))
    server = PostgreSQL(work / "pg")
    server.start()
    try:
        server.execute(
            "DO $$ BEGIN FOR i IN 1.." + str(args.tables) + " LOOP"
            " EXECUTE format('CREATE TABLE t%s (id int PRIMARY KEY, v int)', i); END LOOP; END $$"
        )
        config = SourceConfig(
            kind="postgresql", host="127.0.0.1", port=server.port, user="postgres", database="postgres"
        )
        publication = Publication("bench", config)
        conn = connect(config)
        assert publication.sync(conn).problem is None
        standing = [r[0] for r in query(conn, "SELECT oid::int8 FROM pg_class WHERE relname LIKE 't%%'")]
        assert WITHOUT_STAMP != CATALOG_SQL
        old, new, plain, stamp = [], [], [], []
        for _ in range(args.rounds):
            began = time.perf_counter()
            publication.sync(conn, create=False)
            query(conn, WITHOUT_STAMP, (standing,))
            old.append(time.perf_counter() - began)
            began = time.perf_counter()
            query(conn, CATALOG_SQL, (standing,))
            new.append(time.perf_counter() - began)
            began = time.perf_counter()
            query(conn, WITHOUT_STAMP, (standing,))
            plain.append(time.perf_counter() - began)
            began = time.perf_counter()
            query(conn, f"SELECT concat_ws(',', {SYNC_STAMP})")
            stamp.append(time.perf_counter() - began)
        conn.close()
        for name, times in (
            ("sync + statement (before)", old),
            ("statement with stamp (after)", new),
            ("statement without stamp", plain),
            ("stamp alone", stamp),
        ):
            print(f"{name}: median {statistics.median(times) * 1000:.1f} ms, min {min(times) * 1000:.1f} ms")
    finally:
        server.destroy()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
