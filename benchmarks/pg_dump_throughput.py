"""PostgreSQL dump throughput against a plain keyset SELECT loop.

Run from the repository root::

    .venv/bin/python -m benchmarks.pg_dump_throughput               # 1,000,000 rows, chunk 5000
    .venv/bin/python -m benchmarks.pg_dump_throughput --rows 50000  # quick smoke run
    .venv/bin/python -m benchmarks.pg_dump_throughput --compare-readonly  # table vs readonly watermarks

Against one private PostgreSQL 15 (tests/servers.py; never the system server):

1. ``public.big`` gets N rows (id, name, amount numeric(12,2), created timestamptz, flag).
2. Baseline: a plain keyset loop with psycopg2's default conversions, ``WHERE id > last
   ORDER BY id LIMIT chunk``, fetching every row: no watermarks, no files.
3. Logtide: ``DumpEngine`` over the same table: LOW watermark, chunk transaction with its
   snapshot, column-wise Arrow parsing, durable Parquet chunk file, HIGH watermark, progress.
   Target: rows/s >= 0.8 of the baseline.

With ``--compare-readonly`` it measures, instead, the dump with table watermarks against the dump
with ``watermarks: readonly`` (WAL positions around the chunk's snapshot, a HIGH file) on the same
table, alternately, twice each (table, readonly, table, readonly), and prints the best of each and
their ratio.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from capture.config import parse_config
from capture.dump.control import DumpSettings
from capture.dump.engine import DumpEngine, DumpRequest
from capture.landing import LandingZone
from capture.sources import open_chunk_source
from tests.servers import PostgreSQL

RATIO_TARGET = 0.8


def baseline(server: PostgreSQL, chunk: int) -> float:
    conn = server.connect()
    began, last, rows = time.monotonic(), None, 0
    with conn.cursor() as cur:
        while True:
            if last is None:
                cur.execute("SELECT id, name, amount, created, flag FROM big ORDER BY id LIMIT %s", (chunk,))
            else:
                cur.execute(
                    "SELECT id, name, amount, created, flag FROM big WHERE id > %s ORDER BY id LIMIT %s", (last, chunk)
                )
            batch = cur.fetchall()
            rows += len(batch)
            if len(batch) < chunk:
                break
            last = batch[-1][0]
    conn.close()
    return rows / (time.monotonic() - began)


def dump(config, work: Path, chunk: int, dump_id: str) -> float:
    source = open_chunk_source("bench", config.source("bench"))
    try:
        engine = DumpEngine(source, LandingZone(work / "landing", "bench"))
        began = time.monotonic()
        request = DumpRequest(dump_id=dump_id, tables=["public.big"], settings=DumpSettings(chunk_size=chunk))
        summary = engine.run(request)
        return summary["rows"] / (time.monotonic() - began)
    finally:
        source.close()


def compare_readonly(server: PostgreSQL, work: Path, chunk: int) -> None:
    server.execute("CREATE PUBLICATION logtide_bench FOR TABLE big")  # readonly creates nothing itself
    source = {"kind": "postgresql", "port": server.port, "user": "postgres", "database": "postgres"}
    configs = {
        kind: parse_config({"sources": {"bench": {**source, "watermarks": kind}}}) for kind in ("table", "readonly")
    }
    rates: dict[str, list[float]] = {"table": [], "readonly": []}
    for i, kind in enumerate(("table", "readonly", "table", "readonly")):
        rates[kind].append(dump(configs[kind], work, chunk, f"compare-{i}"))
    table, readonly = max(rates["table"]), max(rates["readonly"])
    print(f"  table watermarks     {table:12,.0f} rows/s  (runs: {', '.join(f'{r:,.0f}' for r in rates['table'])})")
    print(
        f"  readonly watermarks  {readonly:12,.0f} rows/s  (runs: {', '.join(f'{r:,.0f}' for r in rates['readonly'])})"
    )
    print(f"  ratio readonly / table {readonly / table:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chunk-size", type=int, default=5000)
    parser.add_argument("--compare-readonly", action="store_true", help="table vs readonly watermarks")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="logtide-pgdump-"))
    server = PostgreSQL(work / "pg")
    server.start()
    try:
        server.execute(
            "CREATE TABLE big (id bigint PRIMARY KEY, name varchar(64) NOT NULL, amount numeric(12,2) NOT NULL,"
            " created timestamptz NOT NULL, flag smallint NOT NULL)",
            f"INSERT INTO big SELECT i, 'name-' || i, (i % 100000) / 100.0, now() - i * interval '1 second', i % 2"
            f" FROM generate_series(1, {args.rows}) i",
            "VACUUM ANALYZE big",
        )
        if args.compare_readonly:
            compare_readonly(server, work, args.chunk_size)
            return 0
        config = parse_config(
            {
                "sources": {
                    "bench": {"kind": "postgresql", "port": server.port, "user": "postgres", "database": "postgres"}
                }
            }
        )
        base_rate = baseline(server, args.chunk_size)
        source = open_chunk_source("bench", config.source("bench"))
        try:
            engine = DumpEngine(source, LandingZone(work / "landing", "bench"))
            began = time.monotonic()
            summary = engine.run(DumpRequest(tables=["public.big"], settings=DumpSettings(chunk_size=args.chunk_size)))
            dump_rate = summary["rows"] / (time.monotonic() - began)
        finally:
            source.close()
        print(f"  plain keyset SELECT loop   {base_rate:12,.0f} rows/s")
        print(f"  logtide dump               {dump_rate:12,.0f} rows/s")
        print(f"  ratio {dump_rate / base_rate:.2f} (target >= {RATIO_TARGET})")
        return 0
    finally:
        server.destroy()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
