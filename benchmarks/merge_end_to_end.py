"""The merge end to end, as a user runs it, against the floors of issue 13.

Run from the repository root (needs var/jars and a private PostgreSQL: scripts/setup.sh)::

    .venv/bin/python -m benchmarks.merge_end_to_end                    # 1M rows, 10k changes, 6 tables
    .venv/bin/python -m benchmarks.merge_end_to_end --rows 100000      # a quicker run

One private PostgreSQL 15 (tests/servers.py; never the system server), `logtide capture` as a
child process, `logtide dump` and `logtide merge` (spark-submit, merge.spark_master local[2],
Hadoop catalog) as commands, each timed on the wall clock:

1. Dump start to Iceberg equal: `public.big` (N rows: bigint key, varchar, numeric(12,2),
   timestamptz, smallint) dumped, landed by capture, merged into an empty target. Floor 20 s.
2. 10,000 changes (7,000 updates, 2,000 inserts, 1,000 deletes) into that table, landed, then
   `logtide merge` of the table: wall time including spark-submit. Floor 10 s.
3. Seven tables of --small-rows rows dumped and landed; `logtide merge` of one of them, then of
   the six others in one run. Floor: six at most 1.5x one.

After each timed merge the target is compared with the source (row count and column sums,
outside the timing) by a Spark session of the benchmark's own.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from capture.config import load_config
from capture.landing import LandingZone
from capture.sources.postgres.connection import parse_lsn
from tests.servers import PostgreSQL, free_port, wait_for

ROOT = Path(__file__).resolve().parent.parent
SOURCE = "bench"
DATABASE = "bench"
FLOOR_LOAD_S = 20.0
FLOOR_CHANGES_S = 10.0
FLOOR_TABLES_RATIO = 1.5
SMALL_TABLES = 7  # small_0: one table; small_1 to small_6: six in one run
TABLE_DDL = (
    "CREATE TABLE {name} (id bigint PRIMARY KEY, name varchar(64) NOT NULL, amount numeric(12,2) NOT NULL,"
    " created timestamptz NOT NULL, flag smallint NOT NULL)"
)
ROWS_SQL = (
    "INSERT INTO {name} SELECT i, 'name-' || i, (i % 100000) / 100.0,"
    " timestamptz '2026-01-01' - i * interval '1 second', i % 2 FROM generate_series(1, {rows}) i"
)
# what the target must agree on with the source (sums of every column; timestamps as epoch microseconds)
CHECK_PG = (
    "SELECT count(*), sum(id), sum(length(name)), sum(amount), sum(extract(epoch FROM created) * 1000000),"
    " sum(flag) FROM {}"
)
CHECK_SPARK = (
    "SELECT count(*), sum(id), sum(length(name)), sum(amount), sum(cast(unix_micros(created) AS decimal(38,0))),"
    " sum(flag) FROM {}"
)


def _children_cpu() -> float:
    """CPU seconds (user + system) of the processes this one waited for: a `logtide merge` with its
    spark-submit, JVM and Python driver (each waits for its own child). Less sensitive than the
    wall clock to other work on the machine."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _load() -> str:
    return "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


class Bench:
    """The private server, the capture child process and the commands a user runs."""

    def __init__(
        self, work: Path, server: PostgreSQL, event_log: Path | None = None, parallel_tables: int | None = None
    ) -> None:
        self.work, self.server = work, server
        self.config_path = work / "logtide.yaml"
        self.config_path.write_text(
            yaml.safe_dump(
                {
                    "landing": {"path": str(work / "landing"), "flush_interval_s": 0.2},
                    "sources": {
                        SOURCE: {
                            "kind": "postgresql",
                            "host": "127.0.0.1",
                            "port": server.port,
                            "user": "postgres",
                            "database": DATABASE,
                            "slot": "lt_bench",
                            "include": ["public.*"],
                            "heartbeat_s": 0.2,
                            "metrics": {"port": free_port()},
                        }
                    },
                    "merge": {
                        "warehouse": str(work / "warehouse"),
                        "jars_dir": str(ROOT / "var" / "jars"),
                        "spark_master": "local[2]",
                        "class_archive_dir": str(work / "jvm"),  # fresh: step 0 writes it
                        **({"parallel_tables": parallel_tables} if parallel_tables else {}),
                        "spark_conf": {"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(event_log)}
                        if event_log
                        else {},
                    },
                }
            )
        )
        self.config = load_config(self.config_path, require_env=False)
        self.zone = LandingZone(self.config.landing.path, SOURCE)
        self.capture: subprocess.Popen[bytes] | None = None
        self.spark: Any = None

    def logtide(self, *args: str, log: str, code: Path = ROOT) -> subprocess.CompletedProcess[str]:
        """Run `logtide` from the checkout `code` (its `capture` package, also in spark-submit's driver)."""
        cmd = [sys.executable, "-m", "capture.cli", "--config", str(self.config_path), *args]
        # PYTHONPATH for this checkout too: spark-submit's driver runs capture/merge/__main__.py, whose
        # folder is no package root, so without it `capture` comes from wherever the venv installed it
        # (an editable install of another checkout: that one's merge code would run)
        env = {**os.environ, "PYTHONPATH": f"{code}{os.pathsep}{code / 'plugins'}"}
        done = subprocess.run(cmd, cwd=code, env=env, capture_output=True, text=True, timeout=900)
        (self.work / log).write_text(done.stdout + done.stderr)
        if done.returncode != 0:
            raise SystemExit(f"`logtide {' '.join(args)}` exited {done.returncode}:\n{done.stderr[-3000:]}")
        return done

    def start_capture(self) -> None:
        self.logtide("setup", "--source", SOURCE, log="setup.log")
        log = open(self.work / "capture.log", "ab")  # noqa: SIM115 - owned by the child
        cmd = [sys.executable, "-m", "capture.cli", "--config", str(self.config_path), "capture", "--source", SOURCE]
        self.capture = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=log)
        wait_for(lambda: "capture.first_start" in (self.work / "capture.log").read_text(), 60, what="capture")

    def stop(self) -> None:
        if self.capture is not None and self.capture.poll() is None:
            self.capture.terminate()
            self.capture.wait(60)
        if self.spark is not None:
            self.spark.stop()

    def wait_landed(self, timeout: float = 120) -> None:
        """Until everything committed so far has landed: a marker row is committed (`bench_marker`,
        created before capture started, so published) and capture's frontier must pass it."""
        conn = self.server.connect(DATABASE, autocommit=False)
        try:
            with conn.cursor() as cur:
                cur.execute("INSERT INTO bench_marker DEFAULT VALUES")
                cur.execute("SELECT pg_current_wal_insert_lsn()::text")
                target = parse_lsn(cur.fetchone()[0])
                conn.commit()
        finally:
            conn.close()

        def landed() -> bool:
            checkpoint = self.zone.checkpoint()
            return checkpoint is not None and checkpoint.frontier.major > target

        wait_for(landed, timeout, interval=0.05, what="capture to land")

    def merge(self, tables: Sequence[str], log: str, code: Path = ROOT) -> tuple[float, dict[str, Any]]:
        args = ["merge", "--source", SOURCE]
        for table in tables:
            args += ["--table", f"public.{table}"]
        began, cpu = time.perf_counter(), _children_cpu()
        done = self.logtide(*args, log=log, code=code)
        seconds = time.perf_counter() - began
        summary = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
        summary["cpu_seconds"] = _children_cpu() - cpu
        return seconds, summary

    def drop_targets(self, tables: Sequence[str]) -> None:
        """Remove the targets and changelogs of these tables (Hadoop catalog: a folder each), so
        that the next merge of them starts from an empty target again."""
        if self.spark is not None:
            for table in tables:
                for suffix in ("", "__changelog"):
                    self.spark.sql(f"DROP TABLE IF EXISTS logtide.{SOURCE}.public__{table}{suffix} PURGE")
        for table in tables:
            for suffix in ("", "__changelog"):
                shutil.rmtree(self.work / "warehouse" / SOURCE / f"public__{table}{suffix}", ignore_errors=True)

    def check_equal(self, table: str) -> None:
        """The target holds what the source holds (count and column sums), else SystemExit."""
        if self.spark is None:
            from capture.merge.session import build_session, session_conf

            self.spark = build_session(session_conf(self.config.merge), "local[1]", "logtide-bench-check")
            self.spark.sparkContext.setLogLevel("ERROR")
        target = f"logtide.{SOURCE}.public__{table}"
        self.spark.catalog.refreshTable(target)
        source = [tuple(Decimal(v) for v in self.server.query(CHECK_PG.format(table), database=DATABASE)[0])]
        iceberg = [tuple(Decimal(v) for v in self.spark.sql(CHECK_SPARK.format(target)).collect()[0])]
        if source != iceberg:
            raise SystemExit(f"{table}: the target differs from the source: {iceberg} != {source}")


def _steps(summary: dict[str, Any]) -> str:
    parts = []
    for report in summary["tables"]:
        steps = ", ".join(f"{k} {v:.1f}" for k, v in report.get("step_seconds", {}).items())
        parts.append(f"{report['table']}: {report.get('seconds', 0):.1f} s in Spark [{steps}]")
    return "; ".join(parts)


def _big(args: argparse.Namespace, bench: Bench, results: list[tuple[str, float, str, bool]]) -> None:
    print(f"-- 1. dump start to Iceberg equal, {args.rows:,d} rows; {_load()}", flush=True)
    began = time.perf_counter()
    bench.logtide("dump", "--source", SOURCE, "--table", "public.big", log="dump-big.log")
    dumped = time.perf_counter() - began
    bench.wait_landed()
    landed = time.perf_counter() - began
    merged, summary = bench.merge(["big"], "merge-big.log")
    total = time.perf_counter() - began
    bench.check_equal("big")
    note = f"dump {dumped:.1f} s, landed +{landed - dumped:.1f} s, logtide merge {merged:.1f} s ({_steps(summary)})"
    print(f"   {total:.1f} s: {note}; {_load()}", flush=True)
    results.append(
        (f"dump start to Iceberg equal, {args.rows:,d} rows", total, f"<= {FLOOR_LOAD_S:.0f} s", total <= FLOOR_LOAD_S)
    )

    print(f"-- 2. {args.changes:,d} changes into it; {_load()}", flush=True)
    updates, inserts = args.changes * 7 // 10, args.changes * 2 // 10
    deletes = args.changes - updates - inserts
    bench.server.execute(
        f"UPDATE big SET name = name || '+', amount = amount + 1 WHERE id IN"
        f" (SELECT i * {args.rows // updates} FROM generate_series(1, {updates}) i)",
        f"INSERT INTO big SELECT i, 'new-' || i, 1.5, now(), 1"
        f" FROM generate_series({args.rows + 1}, {args.rows + inserts}) i",
        f"DELETE FROM big WHERE id IN (SELECT i * {args.rows // deletes} - 1 FROM generate_series(1, {deletes}) i)",
        database=DATABASE,
    )
    bench.wait_landed()
    merged, summary = bench.merge(["big"], "merge-changes.log")
    bench.check_equal("big")
    print(f"   {merged:.1f} s: {_steps(summary)}; {_load()}", flush=True)
    results.append(
        (
            f"{args.changes:,d} changes into {args.rows:,d} rows",
            merged,
            f"<= {FLOOR_CHANGES_S:.0f} s",
            merged <= FLOOR_CHANGES_S,
        )
    )


def run(args: argparse.Namespace, bench: Bench) -> list[tuple[str, float, str, bool]]:
    server = bench.server
    server.execute(f"CREATE DATABASE {DATABASE}")
    statements = [
        "CREATE TABLE bench_marker (id bigserial PRIMARY KEY)",
        TABLE_DDL.format(name="big"),
        ROWS_SQL.format(name="big", rows=args.rows),
    ]
    statements += [TABLE_DDL.format(name="first"), ROWS_SQL.format(name="first", rows=args.small_rows)]
    for i in range(SMALL_TABLES):
        statements += [TABLE_DDL.format(name=f"small_{i}"), ROWS_SQL.format(name=f"small_{i}", rows=args.small_rows)]
    server.execute(*statements, "VACUUM ANALYZE", database=DATABASE)
    bench.start_capture()
    results = []

    print(f"-- 0. the first merge on this host (writes the driver JVM's class archive, once); {_load()}", flush=True)
    bench.logtide("dump", "--source", SOURCE, "--table", "public.first", log="dump-first.log")
    bench.wait_landed()
    first, summary = bench.merge(["first"], "merge-first.log")
    print(f"   {first:.1f} s: {_steps(summary)}; {_load()}", flush=True)

    if not args.skip_big:
        _big(args, bench, results)

    print(f"-- 3. one {args.small_rows:,d}-row table, then six in one run; {_load()}", flush=True)
    bench.logtide(
        "dump",
        "--source",
        SOURCE,
        *(a for i in range(SMALL_TABLES) for a in ("--table", f"public.small_{i}")),
        log="dump-small.log",
    )
    bench.wait_landed()
    ratios: dict[Path, list[float]] = {code: [] for code in [ROOT, *args.compare]}
    cpu_ratios: dict[Path, list[float]] = {code: [] for code in ratios}
    further: dict[Path, list[float]] = {code: [] for code in ratios}  # CPU-s of each table past the first
    for round_ in range(args.rounds):
        for code in ratios:  # each checkout in turn, on the same landing zone
            if round_ or code != ROOT:  # the same merges again: the targets dropped, the landing zone as it was
                bench.drop_targets([f"small_{i}" for i in range(SMALL_TABLES)])
            name = "" if code == ROOT else f" ({code})"
            one, summary = bench.merge(["small_0"], f"merge-one-{round_}{code.name}.log", code)
            one_cpu = summary["cpu_seconds"]
            print(f"   one table{name} {one:.1f} s, CPU {one_cpu:.1f} s: {_steps(summary)}; {_load()}", flush=True)
            six_tables = [f"small_{i}" for i in range(1, SMALL_TABLES)]
            six, summary = bench.merge(six_tables, f"merge-six-{round_}{code.name}.log", code)
            six_cpu = summary["cpu_seconds"]
            print(f"   six tables{name} {six:.1f} s, CPU {six_cpu:.1f} s: {_steps(summary)}; {_load()}", flush=True)
            for i in range(SMALL_TABLES):
                bench.check_equal(f"small_{i}")
            ratios[code].append(six / one)
            cpu_ratios[code].append(six_cpu / one_cpu)
            further[code].append((six_cpu - one_cpu) / (len(six_tables) - 1))
            print(
                f"   round {round_ + 1}{name}: six / one = {six:.2f} / {one:.2f} s = {six / one:.2f}x"
                f" (CPU {six_cpu:.1f} / {one_cpu:.1f} s = {six_cpu / one_cpu:.2f}x)",
                flush=True,
            )
    for code, found in ratios.items():
        ratio, cpu_ratio, per_table = _median(found), _median(cpu_ratios[code]), _median(further[code])
        median = f", median of {len(found)}" if len(found) > 1 else ""
        print(
            f"   {'this checkout' if code == ROOT else code}: wall {', '.join(f'{r:.2f}x' for r in found)}"
            f" (median {ratio:.2f}x); CPU {', '.join(f'{r:.2f}x' for r in cpu_ratios[code])}"
            f" (median {cpu_ratio:.2f}x); CPU-s per table past the first"
            f" {', '.join(f'{r:.2f}' for r in further[code])} (median {per_table:.2f})",
            flush=True,
        )
        if code != ROOT:
            continue
        results.append(
            (
                f"six tables / one table (logtide merge wall{median})",
                ratio,
                f"<= {FLOOR_TABLES_RATIO}x",
                ratio <= FLOOR_TABLES_RATIO,
            )
        )
        results.append(
            (
                f"six tables / one table (CPU seconds{median})",
                cpu_ratio,
                f"<= {FLOOR_TABLES_RATIO}x",
                cpu_ratio <= FLOOR_TABLES_RATIO,
            )
        )
    return results


def _median(values: list[float]) -> float:
    """The median (of an even count, the mean of the middle two)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the big table (1,000,000)")
    parser.add_argument("--changes", type=int, default=10_000, help="changes merged into it (10,000)")
    parser.add_argument("--small-rows", type=int, default=10_000, help="rows of each of the 7 small tables (10,000)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs of every command)")
    parser.add_argument("--parallel-tables", type=int, help="merge.parallel_tables (default: the config's)")
    parser.add_argument("--rounds", type=int, default=1, help="step 3 this many times (targets dropped between)")
    parser.add_argument(
        "--compare", type=Path, action="append", default=[], help="another checkout whose step 3 runs in turn"
    )
    parser.add_argument("--skip-big", action="store_true", help="steps 3 only (after step 0)")
    parser.add_argument("--event-log", type=Path, help="write Spark's event log of every merge into this folder")
    args = parser.parse_args(argv)
    args.compare = [c.resolve() for c in args.compare]
    if not any((ROOT / "var" / "jars").glob("iceberg-spark-runtime-*.jar")):
        raise SystemExit("no Iceberg jars in var/jars: run scripts/jars.sh (or scripts/setup.sh) first")
    work = Path(tempfile.mkdtemp(prefix="logtide-merge-e2e-"))
    server = PostgreSQL(work / "pg")
    server.start()
    if args.event_log:
        args.event_log.mkdir(parents=True, exist_ok=True)
    bench = Bench(work, server, args.event_log.resolve() if args.event_log else None, args.parallel_tables)
    started = time.perf_counter()
    try:
        results = run(args, bench)
    finally:
        bench.stop()
        server.destroy()
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n== results (PostgreSQL 15, logtide merge = spark-submit local[2], Hadoop catalog); {_load()}")
    for label, value, floor, ok in results:
        unit = "x" if floor.endswith("x") else " s"
        print(f"  {label:50s} {value:7.2f}{unit}  floor {floor:8s} {'ok' if ok else 'MISSED'}")
    print(f"\ntotal benchmark time {time.perf_counter() - started:.0f} s")
    return 0 if all(ok for *_, ok in results) else 1


if __name__ == "__main__":
    sys.exit(main())
