"""Capture throughput against the raw binlog read, and capture memory on one huge transaction.

Run from the repository root::

    .venv/bin/python -m benchmarks.capture_throughput              # 1,000,000 rows
    .venv/bin/python -m benchmarks.capture_throughput --rows 20000 # quick smoke run
    .venv/bin/python -m benchmarks.capture_throughput --strict     # exit 1 when a target is missed

Everything runs against one private MariaDB (tests/servers.py; never the system server),
in this order:

1. Capture is started once and stopped (SIGTERM): its first start records a checkpoint at
   the current binlog position, before any benchmark rows exist.
2. N rows are inserted into ``bench.changes`` with multi-row INSERTs (1,000 rows a
   statement, a commit every 10,000 rows): these are the N changed rows.
3. Baseline: mysql-replication alone reads the same binlog range (``auto_position`` = the
   checkpoint's GTID position, up to the binlog's end) and touches every row: a plain Python
   binlog reader (capture decodes the binlog itself since 2026-11-24, `capture/sources/mysql/rows.py`).
4. Logtide: ``python -m capture.cli capture`` is started as a real process and timed from
   process start until the checkpoint's frontier covers all N rows (committed Parquet files
   counted from their footers, each file read once, so polling costs next to nothing).
   Target: capture/raw >= 0.7.
5. Memory: capture is stopped, N rows are inserted into ``bench.big`` in ONE transaction,
   and a fresh capture process lands it. Its peak RSS (VmHWM) must stay <= 500 MB: a
   transaction larger than ``landing.max_buffer_rows`` must be spilled, not held in memory.

Landing settings are the defaults except ``flush_interval_s: 0.5``; ``heartbeat_s: 0.5``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import yaml
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, RotateEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

from capture.landing import LandingZone
from capture.landing.zone import table_folder
from tests.servers import MariaDB

ROOT = Path(__file__).resolve().parent.parent
SOURCE = "bench"
DATABASE = "bench"
CHANGES_TABLE = "changes"
BIG_TABLE = "big"
CAPTURE_SERVER_ID = 901
RAW_SERVER_ID = 902
ROWS_PER_STATEMENT = 1_000
ROWS_PER_COMMIT = 10_000
POLL_S = 0.2
FULL_ROWS = 1_000_000
RATIO_TARGET = 0.7
RSS_TARGET_MB = 500.0
TABLE_DDL = """CREATE TABLE `{name}` (
  id BIGINT NOT NULL PRIMARY KEY, name VARCHAR(64) NOT NULL, amount DECIMAL(12,2) NOT NULL,
  created DATETIME(6) NOT NULL, flag TINYINT NOT NULL
)"""
RAW_EVENTS = [
    WriteRowsEvent,
    UpdateRowsEvent,
    DeleteRowsEvent,
    XidEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    TableMapEvent,
]


class BenchmarkError(Exception):
    """The benchmark could not measure (a process died, a wait timed out)."""


@dataclass(frozen=True)
class Timed:
    rows: int
    seconds: float
    cpu_s: float | None = None  # CPU time of the reading process: steadier than wall time on a busy machine

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else float("inf")


@dataclass(frozen=True, kw_only=True)
class CaptureResult(Timed):
    startup_s: float  # process start until the capture loop resumed from the checkpoint
    peak_rss_mb: float  # VmHWM of the capture process

    @property
    def streaming_rate(self) -> float:
        """Rows per second once started (imports, preflight and connection setup left out)."""
        return self.rows / max(1e-9, self.seconds - self.startup_s)


# -- the source database ------------------------------------------------------------------------


def create_tables(server: MariaDB) -> None:
    server.execute(f"CREATE DATABASE {DATABASE}")
    server.execute(TABLE_DDL.format(name=CHANGES_TABLE), TABLE_DDL.format(name=BIG_TABLE), database=DATABASE)


def row_sql(i: int) -> str:
    day = f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}"
    created = f"{day} {i % 24:02d}:{i % 60:02d}:{i % 59:02d}.{i % 999_999:06d}"
    return f"({i},'name-{i}',{i % 100_000}.{i % 100:02d},'{created}',{i % 2})"


def insert_statements(table: str, rows: int) -> Iterator[str]:
    """Multi-row INSERTs of ROWS_PER_STATEMENT rows (ids 1..rows)."""
    for first in range(1, rows + 1, ROWS_PER_STATEMENT):
        last = min(rows, first + ROWS_PER_STATEMENT - 1)
        yield f"INSERT INTO `{table}` VALUES " + ",".join(row_sql(i) for i in range(first, last + 1))


def write_rows(server: MariaDB, table: str, rows: int, rows_per_commit: int) -> Timed:
    """Insert `rows` rows, committing every `rows_per_commit` rows (or once, at the end)."""
    started = time.perf_counter()
    with server.connect(DATABASE, autocommit=False) as conn, conn.cursor() as cursor:
        since_commit = 0
        for statement in insert_statements(table, rows):
            cursor.execute(statement)
            since_commit += ROWS_PER_STATEMENT
            if since_commit >= rows_per_commit:
                conn.commit()
                since_commit = 0
        conn.commit()
    return Timed(rows, time.perf_counter() - started)


# -- the baseline: mysql-replication alone --------------------------------------------------------


def binlog_end(server: MariaDB) -> tuple[str, int]:
    with server.connect() as conn, conn.cursor() as cursor:
        cursor.execute("SHOW MASTER STATUS")
        file, pos = cursor.fetchone()[:2]
    return file, int(pos)


def raw_read(server: MariaDB, gtid: str, end: tuple[str, int]) -> Timed:
    """Read the binlog from `gtid` up to `end` (file, pos) and touch every row of every rows event.

    Blocking mode, stopped at `end` by us: with ``blocking=False`` mysql-replication 1.0.17
    declares its MariaDB COM_BINLOG_DUMP packet one byte short, the server closes the
    connection at the end of the log with that byte unread, the kernel answers with a reset
    that drops the stream's unread tail, and the library reconnects and replays forever.
    """
    end_file, end_pos = end
    started, cpu_started = time.perf_counter(), time.process_time()
    stream = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": server.port, "user": "root", "passwd": ""},
        server_id=RAW_SERVER_ID,
        is_mariadb=True,
        auto_position=gtid,
        blocking=True,
        only_events=RAW_EVENTS,
        enable_logging=False,  # as capture runs it
    )
    rows = 0
    try:
        for event in stream:
            if isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
                for _row in event.rows:
                    rows += 1
            if stream.log_file == end_file and stream.log_pos >= end_pos:
                break
    finally:
        stream.close()
    return Timed(rows, time.perf_counter() - started, time.process_time() - cpu_started)


# -- Logtide, as an operator runs it ------------------------------------------------------------


def write_config(work: Path, server: MariaDB) -> Path:
    config = {
        "landing": {"path": str(work / "landing"), "flush_interval_s": 0.5},
        "sources": {
            SOURCE: {
                "kind": "mariadb",
                "host": "127.0.0.1",
                "port": server.port,
                "user": "root",
                "password": "",
                "server_id": CAPTURE_SERVER_ID,
                "include": [f"{DATABASE}.*"],
                "heartbeat_s": 0.5,
                "metrics": {"port": 0},
            }
        },
    }
    path = work / "logtide.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


class CaptureProcess:
    """`python -m capture.cli capture` as a child process; its output goes to one log file."""

    def __init__(self, config: Path, log_path: Path, profile: Path | None = None) -> None:
        self.config = config
        self.log_path = log_path
        self.profile = profile
        self.process: subprocess.Popen[bytes] | None = None
        self.profiler: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    def start(self) -> None:
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        command = [sys.executable, "-m", "capture.cli", "--config", str(self.config), "capture", "--source", SOURCE]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=log)
        if self.profile is not None:
            self.profiler = start_profiler(self.process.pid, self.profile)

    def log(self) -> str:
        """What this run (not earlier ones) wrote to the log."""
        with open(self.log_path, "rb") as handle:
            handle.seek(self._log_offset)
            return handle.read().decode(errors="replace")

    def tail(self) -> str:
        return self.log()[-4000:]

    def check_alive(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise BenchmarkError(f"capture exited with {self.process.returncode}:\n{self.tail()}")

    def wait_log(self, marker: str, timeout: float) -> float:
        """Wait for `marker` in this run's log; seconds waited."""
        started = time.perf_counter()
        while marker not in self.log():
            self.check_alive()
            if time.perf_counter() - started > timeout:
                raise BenchmarkError(f"no {marker!r} in the capture log after {timeout}s:\n{self.tail()}")
            time.sleep(0.05)
        return time.perf_counter() - started

    def peak_rss_mb(self) -> float:
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        raise BenchmarkError("no VmHWM in /proc/<pid>/status")

    def cpu_s(self) -> float:
        """User + system CPU seconds the capture process has used so far."""
        assert self.process is not None
        stat = Path(f"/proc/{self.process.pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "; utime, stime are fields 14, 15
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self, timeout: float = 60) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=timeout)
        if self.profiler is not None:
            self.profiler.wait(timeout=60)
        if code != 0:
            raise BenchmarkError(f"capture exited with {code} on SIGTERM:\n{self.tail()}")

    def kill(self) -> None:
        for process in (self.process, self.profiler):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


def start_profiler(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy attached to the capture process until it exits (`pip install py-spy`)."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        raise BenchmarkError("--profile needs py-spy: .venv/bin/pip install py-spy")
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [py_spy, "record", "--pid", str(pid), "--rate", "200", "--format", "speedscope", "--output", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


class LandedCounter:
    """Rows of one table (its landing folder) below the checkpoint's frontier, from Parquet footers
    (each file read once)."""

    def __init__(self, zone: LandingZone, folder: str) -> None:
        self.zone, self.folder = zone, folder
        self._rows: dict[Path, int] = {}

    def count(self) -> int:
        total = 0
        for path in self.zone.committed_files(self.folder):
            rows = self._rows.get(path)
            if rows is None:
                rows = self._rows[path] = pq.read_metadata(path).num_rows
            total += rows
        return total


def record_first_start(capture: CaptureProcess) -> None:
    """Start capture once and stop it: its checkpoint now sits before the benchmark rows."""
    capture.start()
    capture.wait_log("capture.first_start", timeout=60)
    capture.stop()


def capture_backlog(capture: CaptureProcess, counter: LandedCounter, rows: int, timeout: float) -> CaptureResult:
    """Start capture and time it until `rows` more rows of the counter's table are committed."""
    already = counter.count()
    started = time.perf_counter()
    capture.start()
    startup_s = capture.wait_log("capture.resuming", timeout=60)
    while (landed := counter.count() - already) < rows:
        capture.check_alive()
        if time.perf_counter() - started > timeout:
            raise BenchmarkError(f"only {landed} of {rows} rows landed after {timeout}s:\n{capture.tail()}")
        time.sleep(POLL_S)
    seconds = time.perf_counter() - started
    cpu_s, peak = capture.cpu_s(), capture.peak_rss_mb()
    capture.stop()
    if landed != rows:
        raise BenchmarkError(f"{landed} rows landed, {rows} were written")
    return CaptureResult(rows, seconds, cpu_s, startup_s=startup_s, peak_rss_mb=peak)


# -- report ---------------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def timing_line(label: str, timed: Timed, note: str) -> str:
    figures = f"{timed.rows:>10,d} rows in {timed.seconds:7.2f} s {timed.rate:>10,.0f} rows/s"
    return f"{label:<18} {figures}  ({note})"


def print_report(write: Timed, raw: Timed, capture: CaptureResult, big_write: Timed, big: CaptureResult) -> bool:
    """Print the details and the summary; True when every target is met."""
    ratio = capture.rate / raw.rate
    ratio_ok, rss_ok = ratio >= RATIO_TARGET, big.peak_rss_mb <= RSS_TARGET_MB
    print("\n== details")
    print(
        timing_line("source writes", write, f"{ROWS_PER_STATEMENT} rows/INSERT, commit every {ROWS_PER_COMMIT:,d} rows")
    )
    print(timing_line("raw binlog read", raw, "mysql-replication alone, in-process"))
    print(
        timing_line(
            "logtide capture",
            capture,
            f"from process start; startup {capture.startup_s:.2f} s, then "
            f"{capture.streaming_rate:,.0f} rows/s; peak RSS {capture.peak_rss_mb:.0f} MB",
        )
    )
    if raw.cpu_s and capture.cpu_s:
        print(
            f"{'CPU seconds':<18} raw {raw.cpu_s:.2f} s, capture {capture.cpu_s:.2f} s: ratio "
            f"{raw.cpu_s / capture.cpu_s:.2f} (informational; less sensitive to other load on the machine)"
        )
    print(timing_line("big txn write", big_write, "one transaction"))
    print(
        timing_line(
            "big txn capture",
            big,
            f"from process start; startup {big.startup_s:.2f} s; peak RSS {big.peak_rss_mb:.0f} MB",
        )
    )
    print("\n== summary")
    header = ["rows", "raw rows/s", "capture rows/s", "ratio", "big-txn peak RSS MB", "big-txn capture s"]
    values = [
        f"{capture.rows:,d}",
        f"{raw.rate:,.0f}",
        f"{capture.rate:,.0f}",
        f"{ratio:.2f}",
        f"{big.peak_rss_mb:.0f}",
        f"{big.seconds:.1f}",
    ]
    widths = [max(len(h), len(v)) for h, v in zip(header, values, strict=True)]
    print("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join(v.rjust(w) for v, w in zip(values, widths, strict=True)))
    print()
    print(f"target capture/raw ratio >= {RATIO_TARGET}:     {ratio:6.2f}     {verdict(ratio_ok)}")
    print(f"target big-txn peak RSS <= {RSS_TARGET_MB:.0f} MB:  {big.peak_rss_mb:6.0f} MB  {verdict(rss_ok)}")
    return ratio_ok and rss_ok


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.capture_throughput", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--rows", type=int, default=FULL_ROWS, help="changed rows, and rows of the big transaction (default 1,000,000)"
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "--keep", action="store_true", help="keep the work folder (server data, landing zone, capture log)"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="FILE",
        help="record the throughput capture run with py-spy into FILE (speedscope JSON)",
    )
    args = parser.parse_args(argv)
    if args.rows < 1:
        parser.error("--rows must be at least 1")
    return args


def step(text: str) -> None:
    print(f"-- {text}", flush=True)


@dataclass
class Bench:
    """One private MariaDB, a capture configuration for it, and what to undo at the end."""

    work: Path
    rows: int
    profile: Path | None
    cleanup: list[Callable[[], None]]
    server: MariaDB | None = None
    config: Path | None = None

    @property
    def timeout(self) -> float:
        return max(120.0, self.rows / 2_000)

    @property
    def zone(self) -> LandingZone:
        return LandingZone(self.work / "landing", SOURCE)

    def capture(self, profile: Path | None = None) -> CaptureProcess:
        assert self.config is not None
        process = CaptureProcess(self.config, self.work / "capture.log", profile)
        self.cleanup.append(process.kill)
        return process


def setup(bench: Bench, keep: bool) -> str:
    """Start the server, create the tables, record capture's first checkpoint; its GTID position."""
    step(f"starting a private MariaDB in {bench.work}")
    server = bench.server = MariaDB(bench.work / "mariadb")
    bench.cleanup.append(server.stop if keep else server.destroy)
    server.start(timeout=60)
    create_tables(server)
    bench.config = write_config(bench.work, server)
    step("first capture start: checkpoint before the benchmark rows")
    record_first_start(bench.capture())
    checkpoint = bench.zone.checkpoint()
    if checkpoint is None:
        raise BenchmarkError("capture's first start wrote no checkpoint")
    return str(checkpoint.resume["gtid"])


def measure_throughput(bench: Bench, gtid: str) -> tuple[Timed, Timed, CaptureResult]:
    """Write the changed rows, then read them raw and with Logtide."""
    assert bench.server is not None
    step(f"writing {bench.rows:,d} rows into {DATABASE}.{CHANGES_TABLE}")
    write = write_rows(bench.server, CHANGES_TABLE, bench.rows, ROWS_PER_COMMIT)
    step(f"raw read of the binlog from GTID {gtid!r} with mysql-replication")
    raw = raw_read(bench.server, gtid, binlog_end(bench.server))
    if raw.rows != bench.rows:
        raise BenchmarkError(f"the raw read saw {raw.rows} rows, {bench.rows} were written")
    step("logtide capture of the backlog")
    counter = LandedCounter(bench.zone, table_folder(DATABASE, CHANGES_TABLE))
    captured = capture_backlog(bench.capture(bench.profile), counter, bench.rows, bench.timeout)
    return write, raw, captured


def measure_big_transaction(bench: Bench) -> tuple[Timed, CaptureResult]:
    """Write one transaction of `rows` rows, then land it with a fresh capture process."""
    assert bench.server is not None
    step(f"writing {bench.rows:,d} rows into {DATABASE}.{BIG_TABLE} in one transaction")
    write = write_rows(bench.server, BIG_TABLE, bench.rows, rows_per_commit=bench.rows)
    step("logtide capture of the big transaction (fresh process, for its peak RSS)")
    counter = LandedCounter(bench.zone, table_folder(DATABASE, BIG_TABLE))
    return write, capture_backlog(bench.capture(), counter, bench.rows, bench.timeout)


def run(args: argparse.Namespace, bench: Bench) -> bool:
    gtid = setup(bench, args.keep)
    write, raw, captured = measure_throughput(bench, gtid)
    big_write, big = measure_big_transaction(bench)
    ok = print_report(write, raw, captured, big_write, big)
    if bench.rows < FULL_ROWS:
        print(
            f"(the targets are set for {FULL_ROWS:,d} rows: in smaller runs the fixed startup and "
            "flush delays weigh more)"
        )
    if args.profile is not None:
        print(f"\nprofile of the throughput capture run: {args.profile} (speedscope JSON)")
    return ok


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="logtide-bench-"))
    bench = Bench(work, args.rows, args.profile, cleanup=[])
    started = time.perf_counter()
    try:
        ok = run(args, bench)
    except BenchmarkError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 2
    finally:
        for action in reversed(bench.cleanup):
            action()
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\ntotal benchmark time {time.perf_counter() - started:.0f} s")
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
