"""Spark merge throughput, against a plain Spark INSERT INTO of the same rows, same run.

Run from the repository root (needs var/jars: scripts/setup.sh or scripts/jars.sh)::

    .venv/bin/python -m benchmarks.merge_throughput                     # 1M-row dump, 100k log events, x10
    .venv/bin/python -m benchmarks.merge_throughput --rows 20000 --log-events 2000 --changes 500 --scale 2

No database: the landing zone is generated as capture and a dump would have written it
(same files, names, watermarks, chunk metadata), for a table ``bench.orders`` of 7 columns
(BIGINT key, INT, DECIMAL(12,2), VARCHAR, DATETIME(6), TIMESTAMP(6), VARCHAR), into a
Hadoop-catalog warehouse in a temporary folder, Spark local[2].

1. Initial load: a full dump of N rows in chunks of --chunk-size, with --log-events log
   events (updates, inserts, deletes on random keys) interleaved, some inside the chunks'
   windows, merged into an empty table. Baseline: INSERT INTO a fresh Iceberg table of the
   same input rows (chunk rows and the log's after images), nothing reconciled.
2. Changes: --changes log events (70% updates, 20% inserts of new keys at the end of the key
   space, 10% deletes) merged into that N-row table, twice: updates and deletes at uniformly
   random keys, then skewed towards the newest keys (distance from the newest key exponential,
   mean 1% of the keys). Baseline: INSERT INTO (append) of the same rows into the N-row
   baseline table.
3. The same two merges into a table --scale times larger (built by a dump merge first). The
   target's files hold narrow key ranges and a MERGE reads only the files its keys can be in:
   recent changes should cost about the same at either size; uniformly random keys touch every
   file, so that merge still reads the key columns of the whole table.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from capture.config import parse_config
from capture.events import LSN_ARROW_TYPE, Column, Lsn, TableSchema
from capture.landing import Checkpoint, LandingZone
from capture.landing.chunks import ChunkMeta, write_chunk
from capture.landing.files import fsync_dir, segment_name, write_parquet_atomic
from capture.landing.log_writer import ENVELOPE
from capture.landing.zone import table_folder
from capture.merge.app import run_merge
from capture.merge.iceberg import applied_frontier
from capture.merge.session import build_session, session_conf

ROOT = Path(__file__).resolve().parent.parent
SOURCE = "bench"
ORDERS = TableSchema(
    "bench",
    "orders",
    (
        Column("id", pa.int64(), "bigint"),
        Column("customer", pa.int32(), "int"),
        Column("amount", pa.decimal128(12, 2), "decimal(12,2)"),
        Column("status", pa.string(), "varchar(16)"),
        Column("created", pa.timestamp("us"), "datetime(6)"),
        Column("updated", pa.timestamp("us", tz="UTC"), "timestamp(6)"),
        Column("note", pa.string(), "varchar(64)"),
    ),
    ("id",),
)
WATERMARKS = TableSchema(
    "logtide",
    "watermarks",
    (
        Column("slot", pa.string(), "varchar(255)"),
        Column("dump_id", pa.string(), "varchar(64)"),
        Column("table_name", pa.string(), "varchar(200)"),
        Column("chunk", pa.int32(), "int"),
        Column("kind", pa.string(), "enum('LOW','HIGH')"),
        Column("watermark_id", pa.string(), "char(36)"),
        Column("written_at", pa.timestamp("us", tz="UTC"), "timestamp(6)"),
    ),
    ("slot",),
)
STATUS = pa.array(["new", "paid", "shipped", "done"])
EPOCH_US = 1_700_000_000_000_000


def order_rows(ids: pa.Array, version: int) -> pa.StructArray:
    """Rows of bench.orders for these keys (int64); `version` changes every non-key value."""
    ids = ids.cast(pa.int64())

    def mix(factor: int, modulo: int) -> pa.Array:
        return pc.modulo(pc.add(pc.multiply(ids, factor), version), modulo)

    stamp = pc.add(pc.multiply(ids, 1000), EPOCH_US)
    arrays = [
        ids,
        mix(7919, 100_000).cast(pa.int32()),
        mix(13, 10_000_000).cast(pa.decimal128(21, 2)).cast(pa.decimal128(12, 2)),
        pc.take(STATUS, mix(1, 4)),
        stamp.cast(pa.timestamp("us")),
        pc.add(stamp, version).cast(pa.timestamp("us", tz="UTC")),
        pc.binary_join_element_wise("order ", ids.cast(pa.string()), f" v{version}", ""),
    ]
    return pa.StructArray.from_arrays(arrays, fields=list(ORDERS.row_type))


def _with_nulls(rows: pa.StructArray, null: list[bool]) -> pa.StructArray:
    return pa.StructArray.from_arrays(rows.flatten(), fields=list(rows.type), mask=pa.array(null, pa.bool_()))


class Landing:
    """Writes a landing zone the way capture and a dump do: LSN-named event files per table,
    watermark events, chunk files written before their HIGH watermark, a checkpoint."""

    def __init__(self, root: Path, rng: random.Random) -> None:
        self.zone = LandingZone(root, SOURCE)
        self.rng = rng
        self.lsn = 1 << 40
        self.buffers: dict[str, list[pa.Table]] = {}
        self.version = 0
        self.next_id = 0
        self.events = 0

    def _envelope(self, table: TableSchema, n: int, ops: Any, before: pa.Array, after: pa.Array) -> pa.Table:
        lsns = range(self.lsn + 1, self.lsn + 1 + n)
        self.lsn += n
        now = int(time.time() * 1_000_000)
        arrays = [
            pa.array(lsns, pa.int64()).cast(LSN_ARROW_TYPE),
            pa.array(ops, pa.string()),
            pa.array([f"0-1-{self.lsn}"] * n, pa.string()),
            pa.array([now] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            pa.array([table is WATERMARKS] * n, pa.bool_()),
            before,
            after,
        ]
        fields = [*ENVELOPE, pa.field("before", table.row_type), pa.field("after", table.row_type)]
        metadata = {"logtide.table": table.qualified_name, "logtide.key": ",".join(table.key)}
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=metadata))

    def _old_key(self, key_space: int, recent: bool) -> int:
        if not recent:
            return self.rng.randint(1, key_space)
        newest = self.next_id - 1  # distance from the newest key: exponential, mean 1% of the keys
        return max(1, newest - int(self.rng.expovariate(100 / newest)))

    def changes(self, n: int, key_space: int, recent: bool = False) -> None:
        """n log events on bench.orders: 70% updates, 20% inserts of new keys (at the end of the
        key space), 10% deletes; updates and deletes at uniformly random keys, or with `recent`
        skewed towards the newest keys (as most OLTP tables change)."""
        if n == 0:
            return
        self.version += 1
        ops, keys = [], []
        for _ in range(n):
            kind = self.rng.random()
            if kind < 0.7:
                ops.append("u")
                keys.append(self._old_key(key_space, recent))
            elif kind < 0.9:
                ops.append("c")
                keys.append(self.next_id)
                self.next_id += 1
            else:
                ops.append("d")
                keys.append(self._old_key(key_space, recent))
        inserts = [op == "c" for op in ops]
        deletes = [op == "d" for op in ops]
        ids = pa.array(keys, pa.int64())
        before = _with_nulls(order_rows(ids, self.version - 1), inserts)
        after = _with_nulls(order_rows(ids, self.version), deletes)
        self.buffers.setdefault(table_folder("bench", "orders"), []).append(
            self._envelope(ORDERS, n, ops, before, after)
        )
        self.events += n

    def watermark(self, dump_id: str, chunk: int, kind: str, watermark_id: str) -> None:
        row = {
            "slot": f"{dump_id}/bench.orders",
            "dump_id": dump_id,
            "table_name": "bench.orders",
            "chunk": chunk,
            "kind": kind,
            "watermark_id": watermark_id,
            "written_at": datetime.now(UTC),
        }
        after = pa.array([row], WATERMARKS.row_type)
        table = self._envelope(WATERMARKS, 1, ["u"], pa.nulls(1, WATERMARKS.row_type), after)
        self.buffers.setdefault(table_folder("logtide", "watermarks"), []).append(table)

    def flush(self) -> None:
        for folder, tables in self.buffers.items():
            if not tables:
                continue
            data = pa.concat_tables(tables)
            path = self.zone.log_dir / folder
            path.mkdir(parents=True, exist_ok=True)
            first, last = int(data["_lsn"][0].as_py()), int(data["_lsn"][-1].as_py())
            write_parquet_atomic(data, path / segment_name(first, last))
            fsync_dir(path)
            tables.clear()

    def checkpoint(self) -> None:
        self.flush()
        self.zone.write_checkpoint(Checkpoint(Lsn.decode(self.lsn + 1), {"bench": True}))

    def dump(self, rows: int, chunk_size: int, log_events: int) -> None:
        """A full dump of keys 1..rows with log events interleaved (a twentieth inside windows)."""
        dump_id = f"bench-{uuid.uuid4().hex[:8]}"
        self.next_id = max(self.next_id, rows + 1)
        chunks = -(-rows // chunk_size)
        per_chunk = log_events // chunks
        window = per_chunk // 20
        flush_every = max(1, chunks // 40)  # capture would flush about 40 times during such a dump
        for number in range(1, chunks + 1):
            first = (number - 1) * chunk_size + 1
            last = min(rows, number * chunk_size)
            self.changes(per_chunk - window, rows)  # between chunks
            low, high = str(uuid.uuid4()), str(uuid.uuid4())
            self.watermark(dump_id, number, "LOW", low)
            self.changes(window, rows)
            meta = ChunkMeta(
                dump_id=dump_id,
                table="bench.orders",
                chunk=number,
                low_id=low,
                high_id=high,
                key=("id",),
                after=None if number == 1 else (first - 1,),
                start=None,
                stop=None,
                last=number == chunks,
                keys=None,
                rows=last - first + 1,
                exact_order=True,  # an integer key, as a real dump records it: the merge repairs its ranges
                clamped_keys=False,  # every key landed as itself, as a real dump records it
            )
            write_chunk(self.zone, ORDERS, meta, order_rows(pa.array(range(first, last + 1), pa.int64()), 0))
            self.watermark(dump_id, number, "HIGH", high)
            if number % flush_every == 0:
                self.flush()
        self.checkpoint()


@dataclass
class Timing:
    label: str
    rows: int
    seconds: float
    note: str = ""

    def line(self) -> str:
        rate = self.rows / self.seconds if self.seconds else 0.0
        return f"  {self.label:44s} {self.rows:>10,d} rows {self.seconds:8.2f} s {rate:>11,.0f} rows/s  {self.note}"


def _config(landing: Path, warehouse: Path, namespace: str = "bench") -> Any:
    return parse_config(
        {
            "landing": {"path": str(landing)},
            "sources": {SOURCE: {"kind": "mariadb", "user": "bench", "server_id": 9}},
            "merge": {"warehouse": str(warehouse), "jars_dir": str(ROOT / "var" / "jars"), "namespace": namespace},
        },
        require_env=False,
    )


def _merge(spark: Any, config: Any, label: str, rows: int) -> tuple[Timing, dict[str, Any]]:
    began = time.perf_counter()
    report = run_merge(spark, config, SOURCE)["tables"][0]
    seconds = time.perf_counter() - began
    steps = ", ".join(f"{k} {v:.1f}" for k, v in report["step_seconds"].items())
    timing = Timing(label, rows or report["chunk_rows"] + report["log_events"], seconds, f"[{steps}]")
    print(timing.line(), flush=True)
    return timing, report


def _insert(spark: Any, table: str, frame: Any, label: str, create: bool) -> Timing:
    rows = frame.count()
    began = time.perf_counter()
    if create:
        frame.limit(0).writeTo(table).using("iceberg").tableProperty("format-version", "2").create()
        began = time.perf_counter()
    frame.createOrReplaceTempView("bench_input")
    columns = ", ".join(frame.columns)
    spark.sql(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM bench_input")
    timing = Timing(label, rows, time.perf_counter() - began, "(plain INSERT INTO, nothing reconciled)")
    print(timing.line(), flush=True)
    return timing


def _input_rows(spark: Any, landing: Landing, since: int = 0) -> Any:
    """What the merge read: chunk rows and the log's after images (inserts and updates)."""
    from pyspark.sql import functions as sf

    log_files = sorted((landing.zone.log_dir / table_folder("bench", "orders")).glob("*.parquet"))
    log = spark.read.parquet(*[str(p) for p in log_files])
    log = log.where((sf.col("_op") != "d") & (sf.col("_lsn") >= since)).select("after.*")
    chunk_files = sorted((landing.zone.root / "chunks").glob("*/*/*.parquet"))
    if since or not chunk_files:
        return log
    return spark.read.parquet(*[str(p) for p in chunk_files]).select("after.*").unionByName(log)


def _files(spark: Any, table: str) -> str:
    """How the target's data files are laid out: count and rows per file (what a MERGE may skip)."""
    row = spark.sql(f"SELECT count(*), max(record_count) FROM {table}.files WHERE content = 0").collect()[0]
    return f"{row[0]} data files, at most {row[1]:,d} rows each"


def _changes(
    spark: Any, config: Any, landing: Landing, rows: int, n: int, recent: bool, baseline: str | None
) -> dict[str, Timing]:
    """n changes (uniform or recent keys) merged into the `rows`-row table; with `baseline`, the
    same rows appended to that table by a plain INSERT INTO."""
    kind = "recent" if recent else "uniform"
    applied = int(applied_frontier(spark, f"logtide.{config.merge.namespace}.bench__orders"))
    landing.changes(n, rows, recent=recent)
    landing.checkpoint()
    merged, _ = _merge(spark, config, f"merge: {n:,d} {kind} changes into {rows:,d}", n)
    out = {f"merge {kind} x1" if baseline else f"merge {kind} xN": merged}
    if baseline:
        frame = _input_rows(spark, landing, since=applied)
        out[f"insert {kind}"] = _insert(spark, baseline, frame, "INSERT INTO (append) the same rows", False)
    return out


def _load() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def run(args: argparse.Namespace, work: Path) -> dict[str, Timing]:
    jars = ROOT / "var" / "jars"
    if not any(jars.glob("iceberg-spark-runtime-*.jar")):
        raise SystemExit(f"no Iceberg jars in {jars}: run scripts/jars.sh (or scripts/setup.sh) first")
    warehouse = work / "warehouse"
    config = _config(work / "landing", warehouse)
    conf = session_conf(config.merge)
    conf.update({"spark.driver.memory": args.driver_memory, "spark.sql.shuffle.partitions": "8"})
    spark = build_session(conf, master="local[2]", app_name="logtide-merge-benchmark")
    spark.sparkContext.setLogLevel("ERROR")
    timings: dict[str, Timing] = {}
    try:
        print(f"-- warming up the JVM (a small dump merged into another namespace); {_load()}", flush=True)
        warm = Landing(work / "warm", random.Random(1))
        warm.dump(20_000, 1000, 2000)
        warm.changes(500, 20_000)
        warm.checkpoint()
        run_merge(spark, _config(work / "warm", warehouse, "warm_up"), SOURCE)
        rng = random.Random(7)
        print(f"-- generating a {args.rows:,d}-row dump with {args.log_events:,d} log events", flush=True)
        landing = Landing(work / "landing", rng)
        landing.dump(args.rows, args.chunk_size, args.log_events)
        spark.sql("CREATE NAMESPACE IF NOT EXISTS logtide.baseline")

        print("-- 1. initial load", flush=True)
        timings["merge load x1"], _ = _merge(
            spark, config, f"merge: dump of {args.rows:,d} + {args.log_events:,d} log", 0
        )
        frame = _input_rows(spark, landing)
        timings["insert load"] = _insert(spark, "logtide.baseline.orders", frame, "INSERT INTO the same rows", True)
        print(f"   target: {_files(spark, 'logtide.bench.bench__orders')}", flush=True)

        print(f"-- 2. {args.changes:,d} changes into the {args.rows:,d}-row table; {_load()}", flush=True)
        for recent in (False, True):
            timings.update(_changes(spark, config, landing, args.rows, args.changes, recent, "logtide.baseline.orders"))

        if args.scale > 1:
            big_rows = args.rows * args.scale
            print(f"-- 3. the same into a {big_rows:,d}-row table (generated and merged first)", flush=True)
            big_work = work / "big"
            big_config = _config(big_work / "landing", warehouse, "bench_big")
            big = Landing(big_work / "landing", random.Random(8))
            big.dump(big_rows, args.chunk_size * args.scale, args.log_events)
            timings["merge load xN"], _ = _merge(
                spark, big_config, f"merge: dump of {big_rows:,d} + {args.log_events:,d} log", 0
            )
            print(f"   target: {_files(spark, 'logtide.bench_big.bench__orders')}; {_load()}", flush=True)
            for recent in (False, True):
                timings.update(_changes(spark, big_config, big, big_rows, args.changes, recent, None))
    finally:
        spark.stop()
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the dump (default 1,000,000)")
    parser.add_argument("--log-events", type=int, default=100_000, help="log events during the dump (100,000)")
    parser.add_argument("--changes", type=int, default=10_000, help="changes merged afterwards (10,000)")
    parser.add_argument("--chunk-size", type=int, default=1000, help="rows per chunk (1000, the dump default)")
    parser.add_argument("--scale", type=int, default=10, help="step 3's table is this many times larger (10)")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="logtide-merge-bench-"))
    started = time.perf_counter()
    try:
        timings = run(args, work)
    finally:
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n== results (Spark local[2], Iceberg 1.10.2, Hadoop catalog, merge-on-read); {_load()}")
    for timing in timings.values():
        print(timing.line())
    t = {k: v.seconds for k, v in timings.items()}
    n = f"{args.changes:,d}"
    ratios = [("initial load: merge / plain INSERT", t["merge load x1"] / t["insert load"])]
    for kind in ("uniform", "recent"):
        ratios.append((f"{n} {kind} changes: merge / plain INSERT", t[f"merge {kind} x1"] / t[f"insert {kind}"]))
    if args.scale > 1:
        for kind in ("uniform", "recent"):
            ratios.append(
                (f"{n} {kind} changes: x{args.scale} table / x1 table", t[f"merge {kind} xN"] / t[f"merge {kind} x1"])
            )
    print()
    for label, ratio in ratios:
        print(f"  {label:48s} {ratio:6.2f}x")
    print(f"\ntotal benchmark time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
