"""The relay alone: its CPU cost per message, replaying a landed log into JetStream.

Run from the repository root::

    .venv/bin/python -m benchmarks.relay_replay                  # 100,000 landed changes
    .venv/bin/python -m benchmarks.relay_replay --changes 20000 --profile /tmp/relay.prof
    .venv/bin/python -m benchmarks.relay_replay --narrow         # the output benchmark's table: BIGINT, text, INT

A landing zone is written with capture's own LogWriter (inserts of a 5-column table: BIGINT key, text,
DECIMAL, DATETIME, TINYINT; 1,000 changes a transaction, a file per 10,000), then `Relay` (NATS output,
Logtide JSON, default batch settings, start `beginning`) runs in this process against a private
`nats-server -js` until every message is acknowledged. Printed: messages a second (wall) and the relay
process's CPU seconds a 1,000 messages: the end-to-end benchmark (benchmarks/output_latency.py) has capture,
MariaDB, nats-server and the relay share two cores, so the relay's CPU per message is what moves its ratio.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import shutil
import subprocess
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

from capture.config import OutputConfig
from capture.events import Change, ChangeBatch, Column, Lsn, Op, TableSchema, TransactionEnd
from capture.landing import Checkpoint, LandingZone
from capture.landing.log_writer import LogWriter
from capture.output.relay import Relay
from capture.output.sinks import NatsOutput
from tests.integration.outputs import stream_count
from tests.servers import NATS_SERVER, NatsServer

TABLE = TableSchema(
    "bench",
    "changes",
    (
        Column("id", pa.int64(), "bigint"),
        Column("name", pa.string(), "varchar(64)"),
        Column("amount", pa.decimal128(12, 2), "decimal(12,2)"),
        Column("created", pa.timestamp("us"), "datetime(6)"),
        Column("flag", pa.int8(), "tinyint"),
    ),
    ("id",),
)
# benchmarks/output_latency.py's bench.changes: no DECIMAL or DATETIME values to build
NARROW = TableSchema(
    "bench",
    "changes",
    (Column("id", pa.int64(), "bigint"), Column("name", pa.string(), "varchar(64)"), Column("v", pa.int32(), "int")),
    ("id",),
)


def land(zone: LandingZone, changes: int, narrow: bool = False) -> None:
    writer = LogWriter(zone, Checkpoint(Lsn(1), {}), flush_interval_s=3600, max_buffer_rows=10**7)
    now = datetime(2026, 11, 24, tzinfo=UTC)
    created = datetime(2026, 11, 24, 1, 2, 3, 456789)
    for start in range(0, changes, 1000):
        major = 1000 + start
        rows = [
            Change(
                Lsn(major, i),
                Op.CREATE,
                None,
                (n, f"row-{n}", n % 97)
                if narrow
                else (n, f"row-{n}", Decimal(n) / 100, created + timedelta(seconds=n), n % 2),
            )
            for i, n in enumerate(range(start, min(start + 1000, changes)))
        ]
        writer.add(ChangeBatch(NARROW if narrow else TABLE, str(major), now, False, rows))
        writer.end_transaction(TransactionEnd(Lsn(major + 1000), {}, now))
        if (start + 1000) % 10_000 == 0 or start + 1000 >= changes:
            writer.commit()


def nats_server_version() -> str:
    return subprocess.run([NATS_SERVER, "--version"], capture_output=True, text=True).stdout.strip()


def _cpu_s(pid: int) -> float:
    """A process's user and system CPU seconds so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--narrow", action="store_true", help="the output benchmark's 3-column table")
    parser.add_argument("--profile", help="write a cProfile of the relay's run to this file")
    parser.add_argument(
        "--no-fast-ingest", action="store_true", help="an acknowledgement a message even on nats-server 2.14+"
    )
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="logtide-bench-relay-"))
    broker = NatsServer(base / "nats")
    try:
        broker.start()
        zone = LandingZone(base / "landing", "bench")
        land(zone, args.changes, args.narrow)
        config = OutputConfig(
            source="bench",
            kind="nats",
            url=broker.url,
            start="beginning",
            batch_size=5000,
            fast_ingest=not args.no_fast_ingest,
        )
        output = NatsOutput("js", "bench", config)
        relay = Relay(zone, "mysql", "js", config, output)
        stop = threading.Event()
        profile = cProfile.Profile() if args.profile else None

        def run() -> None:
            if profile is not None:
                profile.enable()
            relay.run(stop)
            if profile is not None:
                profile.disable()

        load = os.getloadavg()[0]
        broker_cpu = _cpu_s(broker.process.pid)
        cpu, began = time.process_time(), time.perf_counter()
        thread = threading.Thread(target=run)
        thread.start()
        while relay.delivered < args.changes and thread.is_alive():
            time.sleep(0.01)
        wall, cpu = time.perf_counter() - began, time.process_time() - cpu
        broker_cpu = _cpu_s(broker.process.pid) - broker_cpu
        stop.set()
        thread.join()
        stored = stream_count(broker.url, config.stream)
        if profile is not None:
            profile.dump_stats(args.profile)
    finally:
        broker.destroy()
        shutil.rmtree(base, ignore_errors=True)
    mode = "fast-ingest batches" if output.fast_ingest else "an acknowledgement a message"
    print(
        f"relay replay ({nats_server_version()}, {mode}): {args.changes:,} changes, {stored:,} stored; "
        f"{args.changes / wall:,.0f} messages/s, "
        f"CPU-µs a message: relay {cpu / args.changes * 1e6:.1f}, nats-server {broker_cpu / args.changes * 1e6:.1f} "
        f"(load {load:.1f} to {os.getloadavg()[0]:.1f})"
    )
    return 0 if stored == args.changes else 1


if __name__ == "__main__":
    raise SystemExit(main())
