"""Dump throughput against a plain keyset SELECT loop, and log latency while a dump runs.

Run from the repository root::

    .venv/bin/python -m benchmarks.dump_throughput               # 1,000,000 rows
    .venv/bin/python -m benchmarks.dump_throughput --rows 50000  # quick smoke run
    .venv/bin/python -m benchmarks.dump_throughput --compare-readonly  # table vs readonly watermarks

Against one private MariaDB (tests/servers.py), with the capture service running:

1. ``bench.big`` gets N rows (id, name, amount DECIMAL, created DATETIME(6), flag).
2. Baseline: a plain keyset loop, ``WHERE id > last ORDER BY id LIMIT chunk`` with the
   same chunk size over the same connection settings, fetching every row: no watermarks,
   no files. This is what reading the table costs at all.
3. Logtide: ``DumpEngine`` over the same table: LOW watermark, chunk SELECT, type
   conversion, durable Parquet chunk file, HIGH watermark, progress file, per chunk.
   Target: rows/s >= 0.8 of the baseline.
4. Latency: a writer commits one row every ~10 ms into ``bench.pulse`` with its client
   commit time; a poller sees each row land (checkpoint frontier covers its file, polled
   every 20 ms). p50/p99 commit-to-landed is measured idle, then while a dump of
   ``bench.big`` runs, then while two writer processes (`benchmarks.oltp_writer`) commit
   2,000 single-row UPDATE transactions/s into ``bench.accounts`` for 10 s. Target: p99
   during the dump <= 3 s.

With ``--compare-readonly`` it measures, instead of the latency rows, the dump with table
watermarks against the dump with ``watermarks: readonly`` (a consistent snapshot per chunk and a
HIGH file, capture/sources/mysql/snapshot.py) on the same table, alternately, twice each, and
prints the best of each and their ratio.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import yaml

from benchmarks.oltp_writer import Writers
from capture.config import load_config
from capture.dump.control import DumpSettings
from capture.dump.engine import DumpEngine, DumpRequest
from capture.landing import LandingZone
from capture.sources import open_chunk_source
from tests.servers import MariaDB, free_port

ROOT = Path(__file__).resolve().parent.parent
LOAD_RATE, LOAD_S, LOAD_WRITERS, LOAD_IDS = 2_000, 10, 2, 1_000  # the latency row under OLTP load


def write_config(base: Path, server: MariaDB, server_id: int = 77, **extra: Any) -> Path:
    """The benchmark source `bench` on `server` (capture of bench.*), plus `extra` top-level keys."""
    path = base / "logtide.yaml"
    source = {
        "kind": "mariadb",
        "port": server.port,
        "user": "root",
        "server_id": server_id,
        "include": ["bench.*"],
        "heartbeat_s": 0.2,
        "metrics": {"port": free_port()},
    }
    landing = {"path": str(base / "landing"), "flush_interval_s": 0.2}
    path.write_text(yaml.safe_dump({"landing": landing, "sources": {"bench": source}, **extra}))
    return path


def baseline(server: MariaDB, chunk: int) -> float:
    conn = server.connect("bench")
    began, rows, last = time.perf_counter(), 0, None
    with conn, conn.cursor() as cur:
        while True:
            if last is None:
                cur.execute(
                    "SELECT `id`, `name`, `amount`, `created`, `flag` FROM `bench`.`big` ORDER BY `id` LIMIT %s",
                    (chunk,),
                )
            else:
                cur.execute(
                    "SELECT `id`, `name`, `amount`, `created`, `flag` FROM `bench`.`big` WHERE `id` > %s "
                    "ORDER BY `id` LIMIT %s",
                    (last, chunk),
                )
            batch = cur.fetchall()
            rows += len(batch)
            if len(batch) < chunk:
                break
            last = batch[-1][0]
    return rows / (time.perf_counter() - began)


def dump(config_path: Path, chunk: int, dump_id: str, watermarks: str = "table") -> float:
    config = load_config(config_path)
    source = open_chunk_source("bench", config.source("bench").model_copy(update={"watermarks": watermarks}))
    engine = DumpEngine(source, LandingZone(config.landing.path, "bench"))
    began = time.perf_counter()
    try:
        summary = engine.run(
            DumpRequest(dump_id=dump_id, tables=["bench.big"], settings=DumpSettings(chunk_size=chunk))
        )
    finally:
        source.close()
    return summary["rows"] / (time.perf_counter() - began)


class Pulse:
    """Commits one row at a time into table `pulse` (autocommit connections from `connect`)
    and measures when each lands in `folder` of the landing zone."""

    def __init__(self, connect: Callable[[], Any], zone: LandingZone, folder: str) -> None:
        self.connect, self.zone, self.folder = connect, zone, folder
        self.committed: dict[int, float] = {}
        self.landed: dict[int, float] = {}
        self.stop = threading.Event()
        self.next_id = 1
        self._seen: set[Path] = set()

    def start(self) -> None:
        for target in (self.write, self.poll):
            threading.Thread(target=target, daemon=True).start()

    def write(self) -> None:
        conn = self.connect()
        try:
            cur = conn.cursor()
            while not self.stop.is_set():
                cur.execute("INSERT INTO pulse (id) VALUES (%s)", (self.next_id,))
                self.committed[self.next_id] = time.time()
                self.next_id += 1
                time.sleep(0.01)
        finally:
            conn.close()

    def poll(self) -> None:
        while not self.stop.is_set():
            now = time.time()
            for path in self.zone.committed_files(self.folder):
                if path not in self._seen:
                    self._seen.add(path)
                    for row in pq.read_table(path, columns=["after"]).column("after").to_pylist():
                        self.landed.setdefault(row["id"], now)
            time.sleep(0.02)

    def measure(self, seconds: float | None, during: threading.Thread | None = None) -> tuple[float, float, int]:
        start_id = self.next_id
        if during is not None:
            during.start()
            during.join()
        else:
            time.sleep(seconds or 0)
        end_id = self.next_id
        deadline = time.time() + 30
        while any(i not in self.landed for i in range(start_id, end_id)) and time.time() < deadline:
            time.sleep(0.05)
        latencies = sorted(self.landed[i] - self.committed[i] for i in range(start_id, end_id) if i in self.landed)
        if not latencies:
            return float("nan"), float("nan"), 0
        return (
            latencies[len(latencies) // 2],
            latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            len(latencies),
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chunk-size", type=int, default=5000)
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "--compare-readonly", action="store_true", help="table vs readonly watermarks instead of the latency rows"
    )
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="logtide-bench-dump-"))
    server = MariaDB(base / "mariadb")
    capture = None
    try:
        server.start()
        server.execute(
            "CREATE DATABASE bench",
            "CREATE TABLE bench.big (id BIGINT PRIMARY KEY, name VARCHAR(64), amount DECIMAL(12,2),"
            " created DATETIME(6), flag TINYINT)",
            "CREATE TABLE bench.pulse (id BIGINT PRIMARY KEY, at TIMESTAMP(6) DEFAULT CURRENT_TIMESTAMP(6))",
            "CREATE TABLE bench.accounts (id BIGINT PRIMARY KEY, balance DECIMAL(12,2) NOT NULL,"
            " touched DATETIME(6) NOT NULL)",
        )
        server.execute(
            f"INSERT INTO big SELECT seq, CONCAT('name-', seq), seq / 100, NOW(6), seq % 2 FROM seq_1_to_{args.rows}",
            f"INSERT INTO accounts SELECT seq, 0, NOW(6) FROM seq_0_to_{LOAD_WRITERS * LOAD_IDS - 1}",
            database="bench",
        )
        config_path = write_config(base, server)
        capture = subprocess.Popen(
            [sys.executable, "-m", "capture.cli", "--config", str(config_path), "capture", "--source", "bench"],
            cwd=ROOT,
            stderr=(base / "capture.log").open("wb"),
        )
        time.sleep(2)
        base_rate = baseline(server, args.chunk_size)
        dump_rate = dump(config_path, args.chunk_size, "throughput")
        if args.compare_readonly:
            rates: dict[str, list[float]] = {"table": [dump_rate], "readonly": []}
            for i, watermarks in enumerate(("readonly", "table", "readonly")):
                rates[watermarks].append(dump(config_path, args.chunk_size, f"compare-{i}", watermarks))
            table_rate, readonly_rate = max(rates["table"]), max(rates["readonly"])
            print(f"\nDump benchmark: {args.rows:,} rows, chunk size {args.chunk_size} (best of 2 each)")
            print(f"  plain keyset SELECT loop     {base_rate:12,.0f} rows/s")
            print(f"  dump, table watermarks       {table_rate:12,.0f} rows/s")
            print(f"  dump, readonly watermarks    {readonly_rate:12,.0f} rows/s")
            print(f"  readonly / table             {readonly_rate / table_rate:12.2f}")
            return 0

        pulse = Pulse(
            lambda: server.connect("bench"), LandingZone(load_config(config_path).landing.path, "bench"), "bench.pulse"
        )
        pulse.start()
        time.sleep(1)
        idle_p50, idle_p99, idle_n = pulse.measure(10)
        during = threading.Thread(target=dump, args=(config_path, args.chunk_size, "latency"))
        busy_p50, busy_p99, busy_n = pulse.measure(None, during)
        writers = Writers("mariadb", server.port, "bench", "accounts", LOAD_WRITERS, LOAD_IDS)
        bursts = []
        load = threading.Thread(target=lambda: bursts.append(writers.write(LOAD_RATE * LOAD_S, 1, LOAD_RATE)))
        load_p50, load_p99, load_n = pulse.measure(None, load)
        reached = bursts[0].rate(LOAD_RATE * LOAD_S) if bursts else float("nan")
        pulse.stop.set()
    finally:
        if capture is not None:
            capture.send_signal(signal.SIGTERM)
            capture.wait(timeout=60)
        server.destroy()
        shutil.rmtree(base, ignore_errors=True)

    ratio = dump_rate / base_rate
    print(f"\nDump benchmark: {args.rows:,} rows, chunk size {args.chunk_size}")
    print(f"  plain keyset SELECT loop   {base_rate:12,.0f} rows/s")
    print(f"  logtide dump               {dump_rate:12,.0f} rows/s")
    print(f"  ratio                      {ratio:12.2f}   (target >= 0.80: {'PASS' if ratio >= 0.8 else 'MISS'})")
    print(f"  log latency idle           p50 {idle_p50:.3f} s  p99 {idle_p99:.3f} s  ({idle_n} commits)")
    print(
        f"  log latency during dump    p50 {busy_p50:.3f} s  p99 {busy_p99:.3f} s  ({busy_n} commits)"
        f"   (target p99 <= 3 s: {'PASS' if busy_p99 <= 3 else 'MISS'})"
    )
    print(
        f"  log latency at {LOAD_RATE:,d} txn/s   p50 {load_p50:.3f} s  p99 {load_p99:.3f} s  ({load_n} commits;"
        f" single-row UPDATEs by {LOAD_WRITERS} writer processes for {LOAD_S} s: {reached:,.0f} txn/s reached)"
    )
    missed = ratio < 0.8 or busy_p99 > 3
    return 1 if (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
