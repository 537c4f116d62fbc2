"""Capture of many small transactions (OLTP) against the raw decoder, one command per source.

Run from the repository root::

    .venv/bin/python -m benchmarks.oltp_capture postgresql                  # 20,000 transactions a shape
    .venv/bin/python -m benchmarks.oltp_capture mariadb --transactions 5000  # quick smoke run

Against one private server (tests/servers.py; never the system server), with a table of
`--writers` x 1,000 rows, for each shape (single-row transactions, five-row transactions),
each burst being N UPDATE transactions committed by `--writers` separate processes
(`benchmarks.oltp_writer`) as fast as the server takes them:

1. Live: capture runs (a real ``python -m capture.cli capture`` process, default landing
   settings: a commit every 0.5 s at most) during burst A. Reported: the writers' rate;
   transactions/s captured, from the first commit to the checkpoint covering the last (landed
   events counted from committed Parquet footers, polled every 10 ms); the lag at the end of
   the burst (last commit to that checkpoint); capture CPU per transaction (/proc).
2. Raw decoder, live: capture is stopped; the raw decoder (below) runs in this process during
   burst B, from the position in capture's checkpoint: first commit to the last transaction
   read. Live ratio: captured transactions/s (A) over the raw decoder's (B).
3. Raw decoder, backlog: the raw decoder reads burst B again, now written. MariaDB: then
   capture's own log reader alone (`BinlogReader`: decoded and typed, nothing landed) too.
4. Catch-up: capture is started and timed from `running` (the ``capture.resuming`` log line;
   its startup is printed too) to the checkpoint covering burst B. Catch-up ratio: over (3).
5. Latency: a probe commits one row every 10 ms into ``pulse`` and sees each land
   (`dump_throughput.Pulse`); p50/p99 commit-to-landed idle, then while the writers commit
   2,000 single-row transactions/s for 10 s.

The raw decoder: for MariaDB, mysql-replication iterating the binlog events capture read with it
before it had its own decoder (every row decoded); for PostgreSQL, pgoutput slots created before burst A (so the
server decodes as much WAL for them as for capture's slot, whose restart LSN trails), their
messages read with psycopg2 and decoded message by message (`pgoutput.begin_fields`,
`parse_change`, `commit_fields`): no typing, no landing.

Floors (README, Benchmarks): single-row transactions captured >= 5,000/s (live, as far as the
writers reach it, and catch-up), capture CPU <= 0.2 ms a transaction, >= 0.5 x the raw
decoder (live and catch-up). The machine's load average is printed with the results: other
work on the machine moves the absolute figures, the ratios much less.
"""

from __future__ import annotations

import argparse
import os
import select
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.capture_throughput import BenchmarkError, CaptureProcess, LandedCounter
from benchmarks.dump_throughput import Pulse
from benchmarks.oltp_writer import Burst, Writers
from capture.landing import LandingZone
from tests.servers import MariaDB, PostgreSQL

SOURCE = "bench"  # CaptureProcess runs this source
IDS_PER_WRITER = 1_000
POLL_S = 0.01
RAW_TIMEOUT_S = 300
CAPTURE_SERVER_ID, RAW_SERVER_ID = 911, 912
RATE_FLOOR, CPU_FLOOR_MS, RATIO_FLOOR = 5_000.0, 0.2, 0.5
COLUMNS = "id bigint PRIMARY KEY, name varchar(64) NOT NULL, balance numeric(12,2) NOT NULL, touched {ts} NOT NULL"
PULSE_DDL = "CREATE TABLE pulse (id bigint PRIMARY KEY)"
LATENCY_RATE, LATENCY_S = 2_000, 10  # the latency probe's load: single-row transactions/s, for seconds


def step(text: str) -> None:
    print(f"-- {text}", flush=True)


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


@dataclass(frozen=True)
class Measured:
    transactions: int
    seconds: float
    cpu_s: float

    @property
    def rate(self) -> float:
        return self.transactions / max(1e-9, self.seconds)

    @property
    def cpu_ms(self) -> float:
        """CPU milliseconds a transaction."""
        return 1000 * self.cpu_s / self.transactions


@dataclass(frozen=True)
class RawRead:
    """One read of the raw decoder: wall clock when it began and when it had read the last
    transaction, and the CPU seconds of its thread."""

    began: float
    done: float
    cpu_s: float


@dataclass(frozen=True)
class Latency:
    """Commit-to-landed seconds of the pulse's commits: median, 99th percentile, how many."""

    p50: float
    p99: float
    count: int


@dataclass(frozen=True)
class ShapeResult:
    rows: int
    write: Burst  # burst A
    live: Measured  # first commit to the checkpoint covering the last
    lag_s: float  # last commit to that checkpoint
    raw_live: Measured  # burst B: first commit to the raw decoder's last transaction
    raw_backlog: Measured
    catch_up: Measured
    startup_s: float
    own_backlog: Measured | None  # capture's own reader alone over burst B (MariaDB)


class Source:
    """The server of one source kind, its tables (`accounts` for the writers, `pulse` for the
    latency probe), and its raw decoder."""

    kind: str
    database: str  # where the writers connect
    schema: str  # the tables' schema (landing folder `schema.table`)
    server: Any

    def start(self, work: Path, ids: int) -> None:
        """Start the server; create `accounts` with `ids` rows and an empty `pulse`."""

    def capture_config(self) -> dict[str, Any]: ...

    def connect(self) -> Any:
        """An autocommit connection to `database`."""

    def mark(self, name: str) -> Any:
        """What one `raw` read needs besides the resume position, made before burst A."""

    def raw(self, mark: Any, resume: dict[str, Any], transactions: int, ready: threading.Event) -> RawRead:
        """Read and decode the log from capture's checkpoint position `resume` until
        `transactions` transactions are seen; `ready` is set once the stream is open."""

    def own(self, resume: dict[str, Any], transactions: int) -> RawRead | None:
        """Capture's own log reader alone over the backlog (decoded and typed, nothing landed),
        where the raw decoder is another library's; None where it is the same decoding."""
        return None

    def stop(self) -> None:
        self.server.destroy()


class PostgresSource(Source):
    kind, database, schema = "postgresql", "postgres", "public"

    def start(self, work: Path, ids: int) -> None:
        self.server = PostgreSQL(work / "pg")
        self.server.start()
        self.server.execute(
            f"CREATE TABLE accounts ({COLUMNS.format(ts='timestamptz')})",
            f"INSERT INTO accounts SELECT i, 'name-' || i, i % 1000, now() FROM generate_series(0, {ids - 1}) i",
            PULSE_DDL,
        )

    def capture_config(self) -> dict[str, Any]:
        return {"kind": "postgresql", "port": self.server.port, "user": "postgres", "database": "postgres"}

    def connect(self) -> Any:
        return self.server.connect()

    def mark(self, name: str) -> str:
        """A slot made when capture's is as old: the server decodes the same WAL for both
        (a slot restarts decoding at its restart LSN, which trails the confirmed position)."""
        self.server.query("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (name,))
        return name

    def raw(self, mark: Any, resume: dict[str, Any], transactions: int, ready: threading.Event) -> RawRead:
        import psycopg2.extras

        from capture.sources.postgres import pgoutput
        from capture.sources.postgres.connection import parse_lsn

        began, cpu = time.time(), time.thread_time()
        conn = psycopg2.connect(
            host="127.0.0.1",
            port=self.server.port,
            dbname="postgres",
            user="postgres",
            connection_factory=psycopg2.extras.LogicalReplicationConnection,
        )
        cursor = conn.cursor()
        cursor.start_replication(
            slot_name=mark,
            decode=False,
            start_lsn=parse_lsn(resume["lsn"]),
            options={"proto_version": "1", "publication_names": f"logtide_{SOURCE}"},
        )
        ready.set()
        seen, changed = 0, False
        deadline = time.monotonic() + RAW_TIMEOUT_S
        while seen < transactions:
            message = cursor.read_message()
            if message is None:
                if time.monotonic() > deadline:
                    raise BenchmarkError(f"raw pgoutput read saw {seen} of {transactions} transactions")
                select.select([cursor], [], [], 0.5)
                continue
            buf = message.payload
            kind = buf[0]
            if kind in (73, 85, 68):  # I U D
                pgoutput.parse_change(buf)
                changed = True
            elif kind == 66:
                pgoutput.begin_fields(buf)
            elif kind == 67:
                pgoutput.commit_fields(buf)
                seen += changed
                changed = False
            elif kind == 82:
                pgoutput.parse_relation(buf)
        read = RawRead(began, time.time(), time.thread_time() - cpu)
        conn.close()
        self.server.query("SELECT pg_drop_replication_slot(%s)", (mark,))
        return read


class MariaDBSource(Source):
    kind, database, schema = "mariadb", "oltp", "oltp"

    def start(self, work: Path, ids: int) -> None:
        self.server = MariaDB(work / "mariadb")
        self.server.start(timeout=60)
        self.server.execute("CREATE DATABASE oltp")
        self.server.execute(
            f"CREATE TABLE accounts ({COLUMNS.format(ts='datetime(6)')})",
            f"INSERT INTO accounts SELECT seq, CONCAT('name-', seq), seq % 1000, NOW(6) FROM seq_0_to_{ids - 1}",
            PULSE_DDL,
            database="oltp",
        )

    def capture_config(self) -> dict[str, Any]:
        return {"kind": "mariadb", "port": self.server.port, "user": "root", "server_id": CAPTURE_SERVER_ID}

    def connect(self) -> Any:
        return self.server.connect("oltp")

    def mark(self, name: str) -> None:
        """Nothing: the binlog is read from a GTID position alone."""

    def raw(self, mark: Any, resume: dict[str, Any], transactions: int, ready: threading.Event) -> RawRead:
        from pymysqlreplication import BinLogStreamReader
        from pymysqlreplication.event import HeartbeatLogEvent, MariadbGtidEvent, QueryEvent, RotateEvent, XidEvent
        from pymysqlreplication.row_event import (
            DeleteRowsEvent,
            RowsEvent,
            TableMapEvent,
            UpdateRowsEvent,
            WriteRowsEvent,
        )

        # the events capture read through mysql-replication before it had its own decoder
        events = [RotateEvent, MariadbGtidEvent, QueryEvent, XidEvent, HeartbeatLogEvent, TableMapEvent]
        events += [WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent]

        began, cpu = time.time(), time.thread_time()
        stream = BinLogStreamReader(
            connection_settings={"host": "127.0.0.1", "port": self.server.port, "user": "root", "passwd": ""},
            server_id=RAW_SERVER_ID,
            is_mariadb=True,
            auto_position=resume["gtid"],
            blocking=True,
            only_events=events,
            enable_logging=False,
        )
        ready.set()
        seen = 0
        try:
            for event in stream:
                if isinstance(event, RowsEvent):
                    for _row in event.rows:
                        pass
                elif isinstance(event, XidEvent):
                    seen += 1
                    if seen == transactions:
                        break
        finally:
            stream.close()
        return RawRead(began, time.time(), time.thread_time() - cpu)

    def own(self, resume: dict[str, Any], transactions: int) -> RawRead:
        from capture.config import SourceConfig
        from capture.events import TransactionEnd
        from capture.sources.mysql.reader import BinlogReader

        config = SourceConfig(**{**self.capture_config(), "server_id": RAW_SERVER_ID, "include": ["oltp.*"]})
        began, cpu = time.time(), time.thread_time()
        seen = 0
        for item in BinlogReader("raw", config, resume, threading.Event()):
            if isinstance(item, TransactionEnd):
                seen += 1
                if seen == transactions:
                    break
        return RawRead(began, time.time(), time.thread_time() - cpu)


SOURCES: dict[str, Callable[[], Source]] = {"postgresql": PostgresSource, "mariadb": MariaDBSource}


class Counter(LandedCounter):
    """Events of the table below the checkpoint's frontier, and a wait for a number of them."""

    def wait(self, target: int, capture: CaptureProcess, timeout: float) -> float:
        """Poll until `target` events are committed; the wall clock then."""
        deadline = time.monotonic() + timeout
        while (landed := self.count()) < target:
            capture.check_alive()
            if time.monotonic() > deadline:
                raise BenchmarkError(f"{landed} of {target} events landed after {timeout:.0f} s:\n{capture.tail()}")
            time.sleep(POLL_S)
        if landed != target:
            raise BenchmarkError(f"{landed} events landed, {target} expected")
        return time.time()


def write_config(work: Path, source: Source) -> Path:
    settings = {**source.capture_config(), "include": [f"{source.schema}.*"], "heartbeat_s": 0.5}
    settings["metrics"] = {"port": 0}
    path = work / "logtide.yaml"
    path.write_text(yaml.safe_dump({"landing": {"path": str(work / "landing")}, "sources": {SOURCE: settings}}))
    return path


def raw_during(
    source: Source, mark: Any, resume: dict[str, Any], writers: Writers, transactions: int, rows: int
) -> tuple[Burst, RawRead]:
    """The raw decoder reading (in a thread) while the writers commit a burst: (burst, read)."""
    ready, result = threading.Event(), []

    def read() -> None:
        result.append(source.raw(mark, resume, transactions, ready))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not ready.wait(60):
        raise BenchmarkError("the raw decoder did not start")
    burst = writers.write(transactions, rows)
    reader.join(RAW_TIMEOUT_S)
    if not result:
        raise BenchmarkError("the raw decoder did not finish (see its error above)")
    return burst, result[0]


def measure_shape(
    source: Source,
    writers: Writers,
    capture: CaptureProcess,
    counter: Counter,
    transactions: int,
    rows: int,
    timeout: float,
    profile_base: Path | None,
) -> tuple[ShapeResult, CaptureProcess]:
    events = transactions * rows
    marks = source.mark(f"raw_live_{rows}"), source.mark(f"raw_backlog_{rows}")
    step(f"A: {transactions:,d} transactions of {rows} row(s), capture running")
    landed, cpu = counter.count(), capture.cpu_s()
    write = writers.write(transactions, rows)
    landed_at = counter.wait(landed + events, capture, timeout)
    live = Measured(transactions, landed_at - write.first, capture.cpu_s() - cpu)
    lag = landed_at - write.last

    step("B: capture stopped, the raw decoder reading during the same burst")
    capture.stop()
    checkpoint = counter.zone.checkpoint()
    assert checkpoint is not None
    landed = counter.count()
    burst, read = raw_during(source, marks[0], checkpoint.resume, writers, transactions, rows)
    raw_live = Measured(transactions, read.done - burst.first, read.cpu_s)
    step("the raw decoder reading burst B again, as a backlog")
    read = source.raw(marks[1], checkpoint.resume, transactions, threading.Event())
    raw_backlog = Measured(transactions, read.done - read.began, read.cpu_s)
    own = source.own(checkpoint.resume, transactions)
    own_backlog = None if own is None else Measured(transactions, own.done - own.began, own.cpu_s)

    step("capture started: catching up with burst B")
    profile = None if profile_base is None else profile_base.with_suffix(f".catch-up-{rows}.json")
    capture = CaptureProcess(capture.config, capture.log_path, profile)
    capture.start()
    startup = capture.wait_log("capture.resuming", timeout=60)
    running, cpu = time.time(), capture.cpu_s()
    landed_at = counter.wait(landed + events, capture, timeout)
    catch_up = Measured(transactions, landed_at - running, capture.cpu_s() - cpu)
    return ShapeResult(rows, write, live, lag, raw_live, raw_backlog, catch_up, startup, own_backlog), capture


def measure_latency(source: Source, writers: Writers, zone: LandingZone) -> tuple[Latency, Latency, float]:
    """Commit-to-landed latency of a commit every 10 ms (`dump_throughput.Pulse`): idle, then
    while the writers commit LATENCY_RATE single-row transactions/s for LATENCY_S seconds; and
    the rate they reached."""
    step(f"latency: idle, then at {LATENCY_RATE:,d} transactions/s")
    pulse = Pulse(source.connect, zone, f"{source.schema}.pulse")
    pulse.start()
    transactions, bursts = LATENCY_RATE * LATENCY_S, []
    try:
        time.sleep(1)
        idle = Latency(*pulse.measure(LATENCY_S))
        load = threading.Thread(target=lambda: bursts.append(writers.write(transactions, 1, LATENCY_RATE)))
        busy = Latency(*pulse.measure(None, load))
    finally:
        pulse.stop.set()
    return idle, busy, bursts[0].rate(transactions) if bursts else float("nan")


def print_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    print("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
    for row in rows:
        print("  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)))


def report(
    kind: str, transactions: int, results: list[ShapeResult], latency: tuple[Latency, Latency, float], load: list[str]
) -> bool:
    print(f"\n== {kind}: {transactions:,d} transactions a shape; load average {' -> '.join(load)}")
    print_table(
        ("rows/txn", "written txn/s", "captured txn/s", "lag at end s", "CPU ms/txn", "raw live txn/s", "ratio"),
        [
            (
                str(r.rows),
                f"{r.write.rate(transactions):,.0f}",
                f"{r.live.rate:,.0f}",
                f"{r.lag_s:.2f}",
                f"{r.live.cpu_ms:.3f}",
                f"{r.raw_live.rate:,.0f}",
                f"{r.live.rate / r.raw_live.rate:.2f}",
            )
            for r in results
        ],
    )
    print()
    print_table(
        ("rows/txn", "catch-up txn/s", "CPU ms/txn", "raw backlog txn/s", "raw CPU ms/txn", "ratio", "startup s"),
        [
            (
                str(r.rows),
                f"{r.catch_up.rate:,.0f}",
                f"{r.catch_up.cpu_ms:.3f}",
                f"{r.raw_backlog.rate:,.0f}",
                f"{r.raw_backlog.cpu_ms:.3f}",
                f"{r.catch_up.rate / r.raw_backlog.rate:.2f}",
                f"{r.startup_s:.2f}",
            )
            for r in results
        ],
    )
    own = [r for r in results if r.own_backlog is not None]
    if own:
        print()
        print_table(
            ("rows/txn", "capture's reader alone, backlog txn/s", "CPU ms/txn"),
            [(str(r.rows), f"{r.own_backlog.rate:,.0f}", f"{r.own_backlog.cpu_ms:.3f}") for r in own],  # type: ignore[union-attr]
        )
    print()
    idle, busy, reached = latency
    for label, measured in (("idle", idle), (f"at {LATENCY_RATE:,d} txn/s", busy)):
        figures = f"p50 {measured.p50:.3f} s  p99 {measured.p99:.3f} s  ({measured.count} commits)"
        print(f"commit -> landed {label:<16} {figures}")
    print(f"(the writers reached {reached:,.0f} transactions/s)")
    single = results[0]
    checks = [
        (f"single-row captured >= {RATE_FLOOR:,.0f} txn/s", single.live.rate >= RATE_FLOOR),
        (f"single-row catch-up >= {RATE_FLOOR:,.0f} txn/s", single.catch_up.rate >= RATE_FLOOR),
        (f"capture CPU <= {CPU_FLOOR_MS} ms/txn", max(single.live.cpu_ms, single.catch_up.cpu_ms) <= CPU_FLOOR_MS),
        (f"live >= {RATIO_FLOOR} x raw decoder", single.live.rate / single.raw_live.rate >= RATIO_FLOOR),
        (f"catch-up >= {RATIO_FLOOR} x raw decoder", single.catch_up.rate / single.raw_backlog.rate >= RATIO_FLOOR),
    ]
    print()
    for label, ok in checks:
        print(f"floor {label:<40} {'PASS' if ok else 'MISS'}")
    return all(ok for _, ok in checks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.oltp_capture", description=__doc__.split("\n")[0])
    parser.add_argument("source", choices=sorted(SOURCES))
    parser.add_argument("--transactions", type=int, default=20_000, help="transactions a shape (default 20,000)")
    parser.add_argument("--writers", type=int, default=3, help="writer processes (connections), default 3")
    parser.add_argument("--shapes", type=int, nargs="+", default=[1, 5], help="rows a transaction (default: 1 5)")
    parser.add_argument("--profile", type=Path, help="py-spy the capture processes into FILE (speedscope)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a floor is missed")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="logtide-oltp-"))
    os.chmod(work, 0o755)  # the PostgreSQL server runs as its own user
    source = SOURCES[args.source]()
    capture: CaptureProcess | None = None
    load = [load_average()]
    try:
        step(f"starting a private {args.source} server in {work}")
        source.start(work, args.writers * IDS_PER_WRITER)
        config = write_config(work, source)
        capture = CaptureProcess(config, work / "capture.log", args.profile)
        capture.start()
        capture.wait_log("capture.first_start", timeout=60)
        zone = LandingZone(work / "landing", SOURCE)
        counter = Counter(zone, f"{source.schema}.accounts")
        writers = Writers(source.kind, source.server.port, source.database, "accounts", args.writers, IDS_PER_WRITER)
        timeout = max(300.0, args.transactions / 20)
        results = []
        for rows in args.shapes:
            result, capture = measure_shape(
                source, writers, capture, counter, args.transactions, rows, timeout, args.profile
            )
            results.append(result)
        latency = measure_latency(source, writers, zone)
        load.append(load_average())
        capture.stop()
        ok = report(args.source, args.transactions, results, latency, load)
    except BenchmarkError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 2
    finally:
        if capture is not None:
            capture.kill()
        source.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
