"""PostgreSQL capture throughput against the raw decoding of the same slot's messages.

Run from the repository root::

    .venv/bin/python -m benchmarks.pg_capture_throughput              # 1,000,000 rows
    .venv/bin/python -m benchmarks.pg_capture_throughput --rows 20000 # quick smoke run

Everything runs against one private PostgreSQL 15 (tests/servers.py; never the system server):

1. Capture is started once and stopped: its first start creates its replication slot. Two
   more pgoutput slots, for the baselines, are created at the same moment (no writes between).
2. N rows are inserted into ``public.changes`` in transactions of 10,000 rows.
3. Baselines: psycopg2 streams a baseline slot (pgoutput, same publication) until all N rows
   are read, receiving and splitting every message into its column texts, no typing, no
   landing; once with Logtide's column-wise splitter (`pgoutput.split_tuples`, in batches of
   the reader's BATCH_ROWS, as capture does), once message by message (`pgoutput.parse_change`).
   The ratio is taken against the faster of the two.
4. Logtide: ``python -m capture.cli capture`` as a real process, timed from process start
   until the checkpoint covers all N rows: decoding, typing (Arrow), Parquet, checkpoints.
   Target: ratio >= 0.7.
5. Also printed: the CPU seconds each side used (the baseline's loop; the capture process from
   start to exit). On a shared machine they vary much less than the wall-clock rates: the
   difference between them is waiting, for a core, for the server, for fsync.
"""

from __future__ import annotations

import argparse
import resource
import select
import shutil
import subprocess
import sys
import tempfile
import time
from itertools import accumulate
from pathlib import Path

import psycopg2
import psycopg2.extras
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from capture.landing import LandingZone
from capture.sources.postgres import pgoutput
from capture.sources.postgres.reader import BATCH_ROWS
from tests.servers import PostgreSQL

ROOT = Path(__file__).resolve().parent.parent
SOURCE = "bench"
ROWS_PER_COMMIT = 10_000
FULL_ROWS = 1_000_000
RATIO_TARGET = 0.7
RAW_SLOTS = {"columns": "bench_raw", "messages": "bench_raw_messages"}
TABLE_DDL = """CREATE TABLE changes (
  id bigint PRIMARY KEY, name varchar(64) NOT NULL, amount numeric(12,2) NOT NULL,
  created timestamptz NOT NULL, flag smallint NOT NULL
)"""


def _config(server: PostgreSQL, work: Path) -> Path:
    path = work / "bench.yaml"
    source = {
        "kind": "postgresql",
        "port": server.port,
        "user": "postgres",
        "database": "postgres",
        "include": ["public.*"],
        "heartbeat_s": 0.5,
        "metrics": {"port": 0},
    }
    path.write_text(
        yaml.safe_dump(
            {"landing": {"path": str(work / "landing"), "flush_interval_s": 0.5}, "sources": {SOURCE: source}}
        )
    )
    return path


def _capture(config: Path, work: Path) -> subprocess.Popen[bytes]:
    log = open(work / "capture.log", "ab")  # noqa: SIM115 - owned by the child
    cmd = [sys.executable, "-m", "capture.cli", "--config", str(config), "capture", "--source", SOURCE]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=log)


def _landed(zone: LandingZone, seen: dict[Path, int]) -> int:
    for path in zone.committed_files("public.changes"):
        if path not in seen:
            seen[path] = pq.ParquetFile(path).metadata.num_rows
    return sum(seen.values())


def _split(messages: list[bytes], width: int) -> None:
    """The messages' column texts, as the capture's reader splits them (`reader._changes`)."""
    octets = pgoutput.message_octets(b"".join(messages))
    starts = pa.array(list(accumulate(map(len, messages), initial=0))[:-1], pa.int64())
    pgoutput.split_tuples(octets, pc.add(starts, 6), width)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _raw(server: PostgreSQL, rows: int, mode: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds) to receive and split `rows` inserted rows from the slot."""
    conn = psycopg2.connect(
        host="127.0.0.1",
        port=server.port,
        dbname="postgres",
        user="postgres",
        connection_factory=psycopg2.extras.LogicalReplicationConnection,
    )
    cursor = conn.cursor()
    began, cpu = time.monotonic(), time.process_time()
    cursor.start_replication(
        slot_name=RAW_SLOTS[mode],
        decode=False,
        options={"proto_version": "1", "publication_names": f"logtide_{SOURCE}"},
    )
    seen, width = 0, 0
    pending: list[bytes] = []
    while seen < rows:
        message = cursor.read_message()
        if message is None:
            select.select([cursor], [], [], 0.5)
            continue
        buf = message.payload
        if buf[0] == 73:  # Insert
            if mode == "messages":
                change = pgoutput.parse_change(buf)
                seen += change.new is not None
                continue
            pending.append(buf)
            if len(pending) == BATCH_ROWS:
                _split(pending, width)
                seen += len(pending)
                pending = []
        elif buf[0] == 82:
            width = len(pgoutput.parse_relation(buf).columns)
        elif buf[0] == 67 and pending:  # Commit: a transaction's run of changes ends
            _split(pending, width)
            seen += len(pending)
            pending = []
    elapsed, cpu = time.monotonic() - began, time.process_time() - cpu
    conn.close()
    return elapsed, cpu


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=FULL_ROWS)
    args = parser.parse_args()
    rows = args.rows
    work = Path(tempfile.mkdtemp(prefix="logtide-pgbench-"))
    server = PostgreSQL(work / "pg")
    server.start()
    try:
        server.execute(TABLE_DDL)
        config = _config(server, work)
        capture = _capture(config, work)
        zone = LandingZone(work / "landing", SOURCE)
        while zone.checkpoint() is None:
            if capture.poll() is not None:
                raise SystemExit((work / "capture.log").read_text())
            time.sleep(0.1)
        for slot in RAW_SLOTS.values():
            server.query("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        capture.terminate()
        capture.wait(60)

        began = time.monotonic()
        for start in range(1, rows + 1, ROWS_PER_COMMIT):
            end = min(rows, start + ROWS_PER_COMMIT - 1)
            server.execute(
                "INSERT INTO changes SELECT i, 'name-' || i, (i % 100000) / 100.0,"
                f" '2024-01-01'::timestamptz + i * interval '1 second', i % 2 FROM generate_series({start}, {end}) i"
            )
        print(f"loaded {rows} rows in {time.monotonic() - began:.1f} s")

        raw = {mode: _raw(server, rows, mode) for mode in RAW_SLOTS}
        raw_s = min(seconds for seconds, _cpu in raw.values())
        cpu_before = _children_cpu()
        began = time.monotonic()
        capture = _capture(config, work)
        seen: dict[Path, int] = {}
        while _landed(zone, seen) < rows:
            if capture.poll() is not None:
                raise SystemExit((work / "capture.log").read_text())
            time.sleep(0.2)
        capture_s = time.monotonic() - began
        capture.terminate()
        capture.wait(60)
        capture_cpu = _children_cpu() - cpu_before
        raw_rate, capture_rate = rows / raw_s, rows / capture_s
        ratio = capture_rate / raw_rate
        for mode, (seconds, cpu) in raw.items():
            print(f"raw pgoutput decoding ({mode}): {rows / seconds:,.0f} rows/s ({seconds:.1f} s, CPU {cpu:.1f} s)")
        print(
            f"logtide capture:       {capture_rate:,.0f} rows/s ({capture_s:.1f} s, process start to checkpoint;"
            f" CPU {capture_cpu:.1f} s, start to exit)"
        )
        print(f"ratio {ratio:.2f} (target >= {RATIO_TARGET})")
        return 0
    finally:
        server.destroy()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
