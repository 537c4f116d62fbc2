"""Real-time output to NATS JetStream: commit-to-delivered latency (idle and during a dump) and throughput
against capture alone into the landing zone.

Run from the repository root::

    .venv/bin/python -m benchmarks.output_latency                      # 1,000,000-row dump, 200,000 changes
    .venv/bin/python -m benchmarks.output_latency --rows 100000 --changes 50000   # quicker
    .venv/bin/python -m benchmarks.output_latency --timeline   # rows landed, stored and CPU every 0.5 s

One private MariaDB and one private nats-server -js (tests/servers.py), the capture service and
`logtide relay` (NATS output, Logtide JSON, default settings) as real processes:

1. Throughput: N changed rows are inserted into ``bench.changes`` (1,000-row INSERTs, a commit every
   10,000), with capture and relay running. Timed from the first INSERT: until the capture checkpoint
   covers every row (landing only), and until JetStream holds a message for every row (delivered).
   The ratio landing time / delivered time says what the relay costs on top. Target: >= 0.7.
2. Latency: a writer commits one row every ~10 ms into ``bench.pulse`` with its commit time; a JetStream
   ordered consumer on the pulse subject records when each message arrives. p50/p99 idle (10 s), then
   while a dump of ``bench.big`` (M rows, chunk 1,000, the default, or ``--chunk-size``) runs; the dump
   waits for the output (backpressure, on by default: README Outputs), so its rows delay the pulse by
   about a chunk's delivery. Target: p99 during the dump <= 2x idle.

The load average is printed with the figures (the machine's other work changes them a lot). nats-server
inherits the environment: ``GOGC=400 .venv/bin/python -m benchmarks.output_latency`` runs it with less
garbage collection (README Outputs, "The per-message path trimmed").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import nats
import pyarrow.parquet as pq

from benchmarks.dump_throughput import write_config
from capture.config import load_config
from capture.dump.control import DumpSettings
from capture.dump.engine import DumpEngine, DumpRequest
from capture.landing import LandingZone
from capture.sources import open_chunk_source
from tests.servers import NATS_SERVER, MariaDB, NatsServer, free_port

ROOT = Path(__file__).resolve().parent.parent
STREAM, PREFIX = "BENCH", "bench"


def _config(base: Path, server: MariaDB, nats_url: str, fast_ingest: bool = True) -> Path:
    output = {
        "fast_ingest": fast_ingest,
        "source": "bench",
        "kind": "nats",
        "url": nats_url,
        "stream": STREAM,
        "subject_prefix": PREFIX,
        "start": "beginning",
        "poll_interval_s": 0.05,
    }
    return write_config(base, server, 78, outputs={"js": output}, relay={"metrics": {"port": free_port()}})


class Consumer:
    """In its own thread: the stream's message count, and a JetStream ordered consumer of the pulse
    table's subject recording when each pulse id arrives."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stored = 0  # messages in the stream
        self.pulses: dict[int, float] = {}
        self.ready = threading.Event()
        self.stop = threading.Event()
        threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True).start()
        self.ready.wait(30)

    async def _run(self) -> None:
        nc = await nats.connect(self.url)
        js = nc.jetstream()
        while True:
            try:
                await js.stream_info(STREAM)
                break
            except Exception:
                await asyncio.sleep(0.1)

        async def on_msg(msg) -> None:
            self.pulses.setdefault(json.loads(msg.data)["key"]["id"], time.time())

        # only the pulse table's messages come here; the others are counted from the stream's state
        await js.subscribe(f"{PREFIX}.bench.bench.pulse", cb=on_msg, ordered_consumer=True)
        self.ready.set()
        while not self.stop.is_set():
            self.stored = (await js.stream_info(STREAM)).state.messages
            await asyncio.sleep(0.05)
        await nc.close()


def landed_rows(zone: LandingZone, folder: str, seen: dict[Path, int]) -> int:
    for path in zone.committed_files(folder):
        if path not in seen:
            seen[path] = pq.read_metadata(path).num_rows
    return sum(seen.values())


def cpu_s(pid: int) -> float:
    """A process's user and system CPU seconds so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Cpu:
    """CPU seconds of named processes from now on, read at moments (`mark`)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.start = {name: cpu_s(pid) for name, pid in pids.items()}
        self.marks: dict[str, dict[str, float]] = {}

    def mark(self, moment: str) -> None:
        self.marks[moment] = {name: cpu_s(pid) - self.start[name] for name, pid in self.pids.items()}


def throughput(
    server: MariaDB, zone: LandingZone, consumer: Consumer, rows: int, cpu: Cpu | None = None, timeline: bool = False
) -> tuple[float, float]:
    began = time.perf_counter()
    conn = server.connect("bench")
    with conn, conn.cursor() as cur:
        for start in range(0, rows, 10_000):
            for first in range(start, min(start + 10_000, rows), 1000):
                values = ",".join(f"({i},'row-{i}',{i % 97})" for i in range(first, min(first + 1000, rows)))
                cur.execute(f"INSERT INTO changes (id, name, v) VALUES {values}")
            conn.commit()
    inserted_at = time.perf_counter() - began
    landed_at = delivered_at = None
    seen: dict[Path, int] = {}
    next_sample = 0.0
    while landed_at is None or delivered_at is None:
        now = time.perf_counter() - began
        if timeline and now >= next_sample:
            next_sample = now + 0.5
            used = {name: cpu_s(pid) - cpu.start[name] for name, pid in cpu.pids.items()} if cpu else {}
            print(
                f"  {now:6.2f} s  landed {landed_rows(zone, 'bench.changes', seen):7,}  stored {consumer.stored:7,}  "
                + " ".join(f"{name} {seconds:.2f}" for name, seconds in used.items()),
                flush=True,
            )
        if landed_at is None and landed_rows(zone, "bench.changes", seen) >= rows:
            landed_at = time.perf_counter() - began
            if cpu is not None:
                cpu.mark("landed")
        if delivered_at is None and consumer.stored >= rows:  # the stream holds only these so far
            delivered_at = time.perf_counter() - began
            if cpu is not None:
                cpu.mark("delivered")
        time.sleep(0.02)
    if timeline:
        print(f"  inserted at {inserted_at:.2f} s, landed at {landed_at:.2f} s, delivered at {delivered_at:.2f} s")
    return rows / landed_at, rows / delivered_at


class Pulse:
    def __init__(self, server: MariaDB, consumer: Consumer) -> None:
        self.server, self.consumer = server, consumer
        self.committed: dict[int, float] = {}
        self.next_id = 1
        self.stop = threading.Event()
        threading.Thread(target=self._write, daemon=True).start()

    def _write(self) -> None:
        conn = self.server.connect("bench")
        with conn, conn.cursor() as cur:
            while not self.stop.is_set():
                cur.execute("INSERT INTO pulse (id) VALUES (%s)", (self.next_id,))
                conn.commit()
                self.committed[self.next_id] = time.time()
                self.next_id += 1
                time.sleep(0.01)

    def measure(self, seconds: float | None = None, during: threading.Thread | None = None) -> tuple[float, float, int]:
        start = self.next_id
        if during is not None:
            during.start()
            during.join()
        else:
            time.sleep(seconds or 0)
        end = self.next_id
        deadline = time.time() + 120
        while any(i not in self.consumer.pulses for i in range(start, end)) and time.time() < deadline:
            time.sleep(0.05)
        latencies = sorted(
            self.consumer.pulses[i] - self.committed[i] for i in range(start, end) if i in self.consumer.pulses
        )
        if not latencies:
            return float("nan"), float("nan"), 0
        return (
            latencies[len(latencies) // 2],
            latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            len(latencies),
        )


def dump(config_path: Path, rows: int, chunk_size: int = 1000) -> None:
    config = load_config(config_path)
    source = open_chunk_source("bench", config.source("bench"))
    try:
        DumpEngine(source, LandingZone(config.landing.path, "bench")).run(
            DumpRequest(dump_id="bench", tables=["bench.big"], settings=DumpSettings(chunk_size=chunk_size))
        )
    finally:
        source.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the dumped table")
    parser.add_argument("--changes", type=int, default=200_000, help="rows inserted for the throughput")
    parser.add_argument("--chunk-size", type=int, default=1000, help="chunk size of the dump")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "--no-fast-ingest", action="store_true", help="an acknowledgement a message even on nats-server 2.14+"
    )
    parser.add_argument("--timeline", action="store_true", help="print rows landed, stored and CPU every 0.5 s")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="logtide-bench-output-"))
    server, broker = MariaDB(base / "mariadb"), NatsServer(base / "nats")
    processes: list[subprocess.Popen[bytes]] = []
    try:
        server.start()
        broker.start()
        server.execute(
            "CREATE DATABASE bench",
            "CREATE TABLE bench.big (id BIGINT PRIMARY KEY, name VARCHAR(64), amount DECIMAL(12,2),"
            " created DATETIME(6), flag TINYINT)",
            "CREATE TABLE bench.changes (id BIGINT PRIMARY KEY, name VARCHAR(64), v INT)",
            "CREATE TABLE bench.pulse (id BIGINT PRIMARY KEY, at TIMESTAMP(6) DEFAULT CURRENT_TIMESTAMP(6))",
        )
        server.execute(
            f"INSERT INTO big SELECT seq, CONCAT('name-', seq), seq / 100, NOW(6), seq % 2 FROM seq_1_to_{args.rows}",
            database="bench",
        )
        config_path = _config(base, server, broker.url, not args.no_fast_ingest)
        for command in ("capture", "relay"):
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "capture.cli", "--config", str(config_path), command, "--source", "bench"],
                    cwd=ROOT,
                    stderr=(base / f"{command}.log").open("wb"),
                )
            )
        time.sleep(3)
        load_at_start = os.getloadavg()[0]
        consumer = Consumer(broker.url)
        zone = LandingZone(load_config(config_path).landing.path, "bench")
        assert server.process is not None and broker.process is not None
        pids = {"capture": processes[0].pid, "relay": processes[1].pid, "nats-server": broker.process.pid}
        cpu = Cpu({**pids, "mariadb": server.process.pid, "benchmark": os.getpid()})
        landing_rate, delivered_rate = throughput(server, zone, consumer, args.changes, cpu, args.timeline)
        pulse = Pulse(server, consumer)
        time.sleep(1)
        idle_p50, idle_p99, idle_n = pulse.measure(10)
        began = time.perf_counter()
        busy_p50, busy_p99, busy_n = pulse.measure(
            during=threading.Thread(target=dump, args=(config_path, args.rows, args.chunk_size))
        )
        dump_s = time.perf_counter() - began
        pulse.stop.set()
        consumer.stop.set()
        loads = (load_at_start, os.getloadavg()[0])
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
        broker.destroy()
        server.destroy()
        shutil.rmtree(base, ignore_errors=True)

    ratio = delivered_rate / landing_rate
    print(f"\nOutput benchmark (NATS JetStream, Logtide JSON): {args.changes:,} changes,", end=" ")
    print(f"dump of {args.rows:,} rows, chunk {args.chunk_size:,}; load average {loads[0]:.1f} to {loads[1]:.1f}")
    version = subprocess.run([NATS_SERVER, "--version"], capture_output=True, text=True).stdout.strip()
    gogc = os.environ.get("GOGC", "100 (Go's default)")  # nats-server inherits it: its GC trades memory for CPU
    print(f"  {version}, fast ingest {'off' if args.no_fast_ingest else 'on (2.14+: used)'}, GOGC {gogc}")
    print(f"  capture into the landing zone   {landing_rate:10,.0f} rows/s")
    print(f"  delivered to JetStream          {delivered_rate:10,.0f} rows/s")
    print(f"  ratio                           {ratio:10.2f}   (target >= 0.70: {'PASS' if ratio >= 0.7 else 'MISS'})")
    for moment, rate in (("landed", landing_rate), ("delivered", delivered_rate)):
        used = cpu.marks.get(moment, {})
        print(
            f"  CPU s until {moment:9} (wall {args.changes / rate:.2f} s, 2 cores): "
            + ", ".join(f"{name} {seconds:.2f}" for name, seconds in used.items())
        )
    relay_cpu = cpu.marks["delivered"]["relay"]
    server_cpu = cpu.marks["delivered"]["nats-server"]
    per = 1e6 / args.changes
    print(f"  CPU-µs a message: relay {relay_cpu * per:.1f}, nats-server {server_cpu * per:.1f}")
    print(f"  latency idle          p50 {idle_p50:.3f} s  p99 {idle_p99:.3f} s  ({idle_n} commits)")
    print(
        f"  latency during dump   p50 {busy_p50:.3f} s  p99 {busy_p99:.3f} s  ({busy_n} commits, dump {dump_s:.1f} s)"
        f"   (target p99 <= 2x idle: {'PASS' if busy_p99 <= 2 * idle_p99 else 'MISS'})"
    )
    missed = ratio < 0.7 or busy_p99 > 2 * idle_p99
    return 1 if (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
