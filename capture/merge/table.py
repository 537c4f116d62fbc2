"""The Spark merge of one table: DBLog's reconciliation of chunks with the log, applied to Apache
Iceberg (`TableMerge`). What it needs lives beside it: the run's chunks (plan.py, no Spark), Iceberg
(iceberg.py), Arrow-to-Spark types and the merge's own values (spark_types.py) and the MERGE's key
filter (pruning.py). capture/merge/app.py runs it for a source (`run_merge`, `main`);
capture/merge/session.py builds the Spark session.

    logtide --config F merge --source S [--table db.t ...]        (runs spark-submit for you)
    spark-submit --jars <var/jars/*.jar> capture/merge/__main__.py --config F --source S [--table db.t ...]

For every table of the source with landed log events or chunks, one run:

  1. A = the frontier the target already holds: the `logtide.frontier` summary property of
     the latest merge snapshot in the table's current ancestry (0 for a new table);
     F = the landing zone's committed frontier. A >= F: nothing to do.
  2. Reads the table's log events with A <= LSN < F, and the chunks whose HIGH watermark is in
     [A, F) (capture/landing/reader.py: HIGH and LOW found by watermark id in the log of
     `logtide.watermarks`; a read-only chunk's LOW in its file and HIGH in its HIGH file); the
     log is read from the earliest LOW of those chunks, since a window may begin before A.
  3. Drops chunk rows whose key has a log event of the table strictly between the chunk's LOW
     and HIGH (PostgreSQL: also those a log event before LOW changed that the chunk's snapshot
     could not see); places the survivors at HIGH (op 'r', ordered by their position in the chunk).
  4. Repair: keys the target holds among the keys a key-list chunk asked for (compared under the
     folds the database proved for the key columns: `ChunkMeta.key_folds`), or inside the key
     range of a chunk whose key orders in the database as in Spark (`ChunkMeta.exact_order`),
     each chunk under the key it was read under (`ChunkMeta.key`, also one replaced since: the
     target holds its columns; the delete is written under the run's key), that no chunk of the
     run returned, that no log event in the window touched (nor one hidden from the chunk's
     snapshot; under a replaced key: no event of the run before HIGH, under either key) and whose
     stored LSN is below HIGH become deletes at HIGH; so do keys the run saw exist before the
     chunk's LOW (its events; rows of an earlier chunk a later one may cover: `_run_keys`). Under
     any key order: when the run merges the last chunk of a full dump, the keys none of the
     dump's chunks returned and no event touched during the dump (`_completed_dump_repairs`).
     PostgreSQL: a key change's create that leaves TOASTed columns out gets them from the old
     key's state (target row, the run's events and chunk rows; capture/merge/key_changes.py); a
     value nothing held is NULL, warned and counted (`logtide.unknown-values`, shown by status).
  4a. TRUNCATE (a `truncate` record of the schema history at LSN T): a chunk with T inside its
     window (LOW <= T <= HIGH), or on PostgreSQL before LOW but hidden from its snapshot, is left
     out with all its rows (landing/reader.py `truncated_by`: every row that exists after T has
     its own insert event after T), and is no part of the repairs; the truncate itself is a
     changelog row (op 't', `_source` 'truncate', columns NULL) at (T, 0). Before the MERGE, the
     target's rows stored below the run's last truncate are deleted (a commit of its own that
     carries no frontier: a rerun deletes the same rows again), and the MERGE applies only
     the events after it.
  5. Appends that stream (log events, chunk rows at HIGH, repair deletes, ordered by LSN and
     order) to the changelog table, in one commit carrying F (`logtide.frontier` of its own).
  6. Reads the stream back from the changelog (all of [A, F), also rows a killed run appended
     before its MERGE), keeps the latest event per key by (LSN, order) and MERGEs it into the
     target: update or delete only where the incoming LSN is greater than the stored one, insert
     what is new, in ONE Iceberg commit that also carries F, so a rerun applies nothing twice.
     Columns an event does not carry (PostgreSQL TOAST) keep the stored value. Targets are
     written range-clustered by key in small files, and the MERGE's ON clause bounds the key by
     ranges around the run's keys, so it reads only the files that can hold them (`key_filter`).

Up to merge.parallel_tables tables merge at once, each in a thread (`run_merge`, app.py); what
they share (the session, `Context.marks`) is used under a lock or with names of their own. One
table never stops the others: a table without a key (none landed, none named in
the configuration's `keys`) is skipped with `merge.table_skipped` (reason and fix), a table whose
merge fails is logged with `merge.table_failed`, and the other tables are merged; the summary
lists both, and `main` exits 1 when a table failed.

capture/dump/reconcile.py is the same algorithm in plain Python (the reference the tests check
this against). Keys from the log and from chunks have the same types (one type mapping), and
are compared by Spark as values; key *ranges* (repair only) use Spark's ordering, and only where
the dump recorded that it is the database's (README, "Merge": keys and their order).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from capture.config import LogtideConfig
from capture.dump.key_changes import Unknown
from capture.errors import LogtideError, MergeError
from capture.events import lsn_text
from capture.landing import LandingZone
from capture.landing.files import Segment
from capture.landing.keys import encode_key
from capture.landing.reader import (
    TruncateMark,
    Watermarks,
    landed_truncates,
    table_segments,
    truncated_by,
)
from capture.log import get_logger
from capture.merge.failures import error_line
from capture.merge.iceberg import (
    CHANGELOG_META,
    RESERVED,
    TARGET_META,
    applied_frontier,
    commit_with,
    ensure_table,
    iceberg_table,
    is_empty,
    local_table_folder,
    recorded,
    sortable_prefix,
    spark_file_path,
    table_exists,
)
from capture.merge.key_changes import KeyChanges, created_lsns, misses_columns
from capture.merge.old_keys import old_key_events
from capture.merge.plan import Chunk, CompletedDump, chunks_since, completed_dumps, truncated_dump, unify_columns
from capture.merge.pruning import key_filter
from capture.merge.spark_types import (
    all_of,
    lsn_column,
    quote,
    row_constant,
    spark_fold,
    spark_type,
    spark_value,
    sql_literal,
    target_type,
    values_frame,
    widen_xid,
)
from capture.merge.target import FRONTIER, UNKNOWN_SAMPLE, UNKNOWN_VALUES, Target, target_of
from capture.merge.target import namespace as target_namespace
from capture.sources.key_folds import fold
from capture.sources.postgres.read_view import PgSnapshot
from capture.sources.table_keys import no_key

log = get_logger("logtide.merge")

# values key changes left out that nothing held (written NULL): the newest SAMPLE_SIZE of them in
# UNKNOWN_SAMPLE (capture/merge/target.py)
SAMPLE_SIZE = 10
# what `_chunk_rows` adds to each chunk row, by the file it came from
CHUNK_COLUMNS = [("_file", "string"), ("_cid", "int"), ("_low", "decimal(38,0)"), ("_high", "decimal(38,0)")]
CHUNK_COLUMNS += [("_high_ts", "timestamp"), ("_dump_id", "string"), ("_chunk", "int")]
# A first load (empty target) writes files of about this many rows, in at most this many tasks
LOAD_ROWS_PER_FILE = 250_000
LOAD_PARTITIONS = 64
# a run's first table of at most this many rows merges alone before the others start (`run_merge`)
WARM_ROWS = 250_000
# A PostgreSQL run with at most this many log events broadcasts the keys its chunks' snapshots could
# not see (instead of shuffling every chunk row to compare them)
BROADCAST_EVENTS = 1_000_000


@dataclass
class Context:
    spark: Any
    config: LogtideConfig
    source: str
    zone: LandingZone
    frontier: int
    marks: Watermarks
    applied_at: datetime
    namespace: str = field(init=False)
    marks_lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    # what Spark puts before a chunk file's path in `_metadata.file_path` (file: or file://): read
    # by the run's first table with chunk rows from a row of its own, then reused (`_chunk_rows`)
    file_scheme: str | None = field(init=False, default=None)
    # the JVM's DataType for a type's JSON (`cast`), and whether the namespace exists: once per run
    java_types: dict[str, Any] = field(init=False, default_factory=dict)
    sql_types: dict[str, str] = field(init=False, default_factory=dict)
    namespace_ready: bool = field(init=False, default=False)
    lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    # set when the run's other tables may start beside its first (`run_merge`): the first is merged,
    # or it reads more than WARM_ROWS rows (planned: a merge of seconds or more, not to wait for)
    warm: threading.Event = field(init=False, default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.namespace = target_namespace(self.config.merge, self.source)

    def java_type(self, data_type: Any) -> Any:
        text = data_type.json()
        with self.lock:
            java = self.java_types.get(text)
            if java is None:
                java = self.java_types[text] = self.spark._jsparkSession.parseDataType(text)
        return java

    def cast(self, column: Any, data_type: Any) -> Any:
        """`column.cast(data_type)` in one call to the JVM. pyspark's own cast of a DataType looks
        for the thread's active session first, which a thread of the run's pool does not have:
        it builds one (about 14 py4j round trips per cast, the largest share of a small table's
        planning), then parses the type's JSON again."""
        from pyspark.sql import Column

        return Column(column._jc.cast(self.java_type(data_type)))

    def sql_type(self, data_type: Any) -> str:
        """The type as Spark SQL spells it (names quoted), for statements of the merge's own."""
        text = data_type.json()
        with self.lock:
            sql = self.sql_types.get(text)
        if sql is None:
            sql = str(self.java_type(data_type).sql())
            with self.lock:
                self.sql_types[text] = sql
        return sql

    def ensure_namespace(self) -> None:
        with self.lock:
            if not self.namespace_ready:
                cfg = self.config.merge
                self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {quote(cfg.catalog_name)}.{quote(self.namespace)}")
                self.namespace_ready = True

    def target_name(self, schema: str, table: str, changelog: bool = False) -> str:
        return target_of(self.config.merge, self.source, schema, table, changelog).spark

    def target_of(self, schema: str, table: str, changelog: bool = False) -> Target:
        return target_of(self.config.merge, self.source, schema, table, changelog)


# what a repair candidate carries besides the key columns: the LSN of the state it was seen in (the
# target row's, or the run's: an event's, a chunk row's HIGH), whether a chunk row of the run is that
# state (`_pooled`), and its chunk's
REPAIR_FROM_CHUNK = ("_tlsn", "_pooled", "_cid", "_low", "_high", "_high_ts", "_dump_id", "_chunk")


@dataclass
class RunKeys:
    """What the repairs know of the keys the run saw besides the target's (`TableMerge._add_repairs`):
    its chunks, every chunk row's key columns (`rows`: the run's key, every chunk's own, _cid, _row,
    _high), the log events, the applied frontier A (the events from it on are the run's), the chunks whose rows a
    later chunk of the run may cover (`pooled`, `TableMerge._overlapped`), and whether the target's
    rows are candidates (`target`: it held rows when the run began)."""

    chunks: list[Chunk]
    rows: Any
    events: Any
    a: int
    pooled: set[int]
    target: bool


@dataclass
class RunPlan:
    """What one table's run reads, decided on the driver before Spark reads a row (`_plan`): the
    frontiers its tables hold (A is the smaller), its chunks and completed dumps, the log files
    from `start` (back to every chunk's LOW) with their schemas and event count, the row type."""

    a: int
    a_target: int
    a_changelog: int
    chunks: list[Chunk]
    completed: list[CompletedDump]
    stale: int
    start: int
    log_files: list[Segment]
    schemas: list[tuple[pa.Schema, Path]]
    events: int
    row_struct: Any


@dataclass
class Frames:
    """The run's Spark frames after the read: its events, the stream so far, and with chunks their
    rows and the events hidden from their snapshots."""

    events: Any
    stream: Any
    chunk_rows: Any | None = None
    hidden: Any | None = None


class TableMerge:
    def __init__(self, ctx: Context, schema: str, table: str) -> None:
        self.ctx, self.schema, self.table = ctx, schema, table
        self.name = f"{schema}.{table}"
        self.target = ctx.target_name(schema, table)
        self.changelog = ctx.target_name(schema, table, changelog=True)
        self.report: dict[str, Any] = {"table": self.name, "target": self.target, "changelog": self.changelog}
        self.timings: dict[str, float] = {}
        self.step = "plan"  # the step under way: a failure names it
        self.has_missing = False  # some log event of the run leaves columns out (PostgreSQL TOAST)
        self.rows_in = 0  # log events and chunk rows the run reads at most
        self.unknown_record: dict[str, str] = {}  # UNKNOWN_VALUES, UNKNOWN_SAMPLE after this run
        self.truncates: list[TruncateMark] = []  # truncates at or after the applied frontier (step 4a)
        self.exists: dict[str, bool] = {}  # target and changelog: whether they existed when the run began
        self.created: set[str] = set()  # target and changelog this run created (with the run's frontier)
        self.reads_log = True  # the run reads log files (else its event frame is empty by plan)
        self.schemas: dict[str, list[Any]] = {}  # target and changelog: their columns (`_fields`)
        # files (resolved paths) holding a column in a narrower type than the run's (`wider`): its own
        self.narrow: dict[str, tuple[tuple[str, pa.DataType], ...]] = {}

    @contextmanager
    def _step(self, name: str) -> Iterator[None]:
        began = time.monotonic()
        self.step = name
        try:
            yield
        finally:
            self.timings[name] = round(self.timings.get(name, 0.0) + time.monotonic() - began, 3)

    def run(self) -> dict[str, Any]:
        """Merge the table; a failure of Spark, py4j or a landed file becomes a MergeError naming the
        table, the step and the cause in one line (the traceback stays on the exception's chain)."""
        began = time.monotonic()
        try:
            self._run()
        except LogtideError:
            raise
        except Exception as exc:
            raise MergeError(
                f"{self.name}: the merge failed in step {self.step!r}: {error_line(exc)}. Fix the cause and run "
                "the merge again: it resumes from what this run committed and applies nothing twice "
                "(log_level DEBUG shows the traceback)"
            ) from exc
        finally:
            self.report["seconds"] = round(time.monotonic() - began, 3)
            self.report["step_seconds"] = self.timings
        return self.report

    def _refuse_foreign_target(self, applied: int) -> None:
        """A target that holds a frontier past everything its landing zone ever committed was not
        merged from this landing zone (a new landing zone, or a source set up again, beside an old
        warehouse). Skipping it as up to date would leave it diverged for good: every event below its
        frontier would count as applied. The checkpoint is read again here, as a merge that started
        later may have committed past this run's frontier since."""
        checkpoint = self.ctx.zone.checkpoint()
        committed = checkpoint.frontier.encode() if checkpoint is not None else 0
        if applied > committed:
            raise MergeError(
                f"{self.name}: {self.target} holds frontier {lsn_text(applied)}, past everything landing zone "
                f"{self.ctx.zone.root} has committed ({lsn_text(committed)}): it was merged from another landing "
                f"zone, or the source was set up again. Drop {self.target} and {self.changelog} (or point "
                "merge.warehouse elsewhere) and dump the table: the next merge rebuilds them"
            )

    def _run(self) -> None:
        with self._step("plan"):
            plan = self._plan()
        if plan is None:
            return
        with self._step("tables"):
            self._ensure_tables()
        log.info(
            "merge.table_started",
            table=self.name,
            applied=plan.a,
            frontier=self.ctx.frontier,
            log_files=len(plan.log_files),
            chunks=len(plan.chunks),
            stale_highs=plan.stale,
        )
        props = {FRONTIER: str(self.ctx.frontier), "logtide.source": self.ctx.source, "logtide.table": self.name}
        if self._fresh_chunk(plan.chunks, plan.a_changelog, plan.a_target):
            self._load_fresh_chunk(plan.chunks[0], plan.row_struct, props, plan.stale)
        else:
            cached: list[Any] = []
            try:
                with self._step("read"):
                    frames = self._read(plan)
                self._add_repairs(plan, frames, cached)
                self._complete_key_changes(plan, frames, cached)
                if self.truncates:
                    frames.stream = frames.stream.unionByName(
                        self._truncate_rows(self.truncates), allowMissingColumns=True
                    )
                self._apply(plan, frames.stream, props)
            finally:
                for frame in cached:
                    frame.unpersist()
        log.info(
            "merge.table_finished",
            **{k: v for k, v in self.report.items() if k not in ("target", "changelog", "step_seconds")},
        )

    def _plan(self) -> RunPlan | None:
        """Steps 1 and 2 on the driver: the frontiers the tables hold, the chunks and log files of the
        run and the table's columns over them. None when there is nothing to do (reported why), or
        when the run only truncates the target (done here)."""
        ctx, spark, F = self.ctx, self.ctx.spark, self.ctx.frontier
        self.exists = {name: table_exists(spark, name) for name in (self.target, self.changelog)}
        a_target = applied_frontier(spark, self.target) if self.exists[self.target] else 0
        a_changelog = applied_frontier(spark, self.changelog) if self.exists[self.changelog] else 0
        a = min(a_target, a_changelog)
        self.report.update(  # LSNs as text: the report crosses into XCom and JSON readers
            applied_before=lsn_text(a_target), changelog_applied_before=lsn_text(a_changelog), frontier=lsn_text(F)
        )
        if a >= F:
            self._refuse_foreign_target(max(a_target, a_changelog))
            self.report["skipped"] = "up to date"
            return None
        with ctx.marks_lock:  # the watermark index loads lazily, for every table of the run
            chunks, stale = chunks_since(ctx.zone, ctx.marks, self.schema, self.table, a)
            completed = completed_dumps(ctx.zone, ctx.marks, self.schema, self.table, chunks)
        truncates = landed_truncates(ctx.zone, F, tables={(self.schema, self.table)})
        self.truncates = [t for t in truncates if t.lsn >= a]  # the run's own: rows in the stream
        if truncates:  # step 4a: chunks a truncate emptied are no part of the run
            emptied = [c for c in chunks if truncated_by(truncates, c.low, c.high, c.meta.read_view)]
            chunks = [c for c in chunks if c not in emptied]
            completed = [d for d in completed if not truncated_dump(d, truncates)]
            self.report["chunks_truncated"] = len(emptied)
        read = chunks + [c for d in completed for c in d.chunks]  # the log is read back to every LOW
        start = min([a, *(c.low for c in read), *(c.meta.read_view.lookback for c in read if c.meta.read_view)])
        log_files = table_segments(ctx.zone, self.schema, self.table, F, since=start)
        if self.truncates and not log_files:  # only a truncate: the newest file gives the columns
            log_files = table_segments(ctx.zone, self.schema, self.table, F)[-1:]
        if self.truncates and not log_files and not chunks:
            self._truncate_target(a_target, a_changelog, F)
            return None
        if not chunks and not self.truncates and not any(s[1] >= a for s in log_files):
            self.report["skipped"] = "nothing new"
            return None
        metas = [(pq.read_metadata(p), p) for _, _, p in log_files]
        self.reads_log = bool(log_files)
        schemas = [(m.schema.to_arrow_schema(), p) for m, p in metas]
        self.has_missing = misses_columns(schemas, start, F)
        # rows the run reads at most: sizes its first load's write and its broadcasts
        self.rows_in = sum(m.num_rows for m, _ in metas) + sum(c.meta.rows for c in chunks)
        if self.rows_in > WARM_ROWS:
            ctx.warm.set()
        row_struct = self._columns(schemas, chunks)
        events = sum(m.num_rows for m, _ in metas)
        return RunPlan(
            a, a_target, a_changelog, chunks, completed, stale, start, log_files, schemas, events, row_struct
        )

    def _columns(self, schemas: list[tuple[pa.Schema, str]], chunks: list[Chunk]) -> Any:
        """The table's columns over the run's files (`unify_columns`), its key, and the Spark row type
        every file is read as; files of a narrower type than the run's are remembered (`narrow`)."""
        row_types = [(s.field("after").type, str(p)) for s, p in schemas]
        row_types += [(c.row_type, str(c.path)) for c in chunks]
        columns = unify_columns(row_types, self.name)
        for row_type, origin in row_types:
            own = tuple((f.name, f.type) for f in row_type if columns.get(f.name, f.type) != f.type)
            if own:
                self.narrow[str(Path(origin).resolve())] = own
        clash = RESERVED & set(columns)
        if clash:
            raise MergeError(f"{self.name}: column(s) {sorted(clash)} clash with the merge's bookkeeping columns")
        self.keys = self._key(schemas, chunks, columns)
        self.columns = list(columns)
        self.types = {c: target_type(t) for c, t in columns.items()}
        return spark_type(pa.struct([pa.field(c, t) for c, t in columns.items()]))

    def _read(self, plan: RunPlan) -> Frames:
        """Steps 2 and 3: the log events from the plan's start, and the chunk rows that survive their
        window (no event of their key between LOW and HIGH, none hidden from their snapshot), placed
        at HIGH; the stream is the events from the applied frontier on and those survivors."""
        from pyspark.sql import functions as sf

        keys = self.keys
        events = self._log_events([p for _, _, p in plan.log_files], plan.row_struct, plan.start)
        chunk_rows = self._chunk_rows(plan.chunks, plan.row_struct) if plan.chunks else None
        if self.reads_log:  # events logged under a key since replaced, named by the run's
            events, named, unknown = old_key_events(
                self.ctx.spark, self.target, keys, self.types, plan.schemas, plan.start, self.ctx.frontier,
                events, chunk_rows,
            )  # fmt: skip
            if named:
                self.report["old_key_events"] = named
            unknown = [u for u in unknown if u.lsn >= plan.a_target]
            if unknown:
                self._report_old_keys(unknown)
        frames = Frames(events, events.where(events["_lsn"] >= lsn_column(plan.a)).drop("_xid"))
        if chunk_rows is None:
            return frames
        frames.chunk_rows = chunk_rows
        window = events.select(*keys, "_lsn")
        survivors = chunk_rows.join(
            window,
            [chunk_rows[k].eqNullSafe(window[k]) for k in keys]  # NULL: a key part landed as NULL
            + [window["_lsn"] > chunk_rows["_low"], window["_lsn"] < chunk_rows["_high"]],
            "left_anti",
        )
        hidden = frames.hidden = self._hidden(plan.chunks, events)
        if hidden is not None:  # at most a few events per chunk: not worth shuffling the chunks for
            hidden_keys = hidden.select("_cid", *keys)
            if plan.events <= BROADCAST_EVENTS:
                hidden_keys = sf.broadcast(hidden_keys)
            survivors = survivors.join(
                hidden_keys,
                [survivors["_cid"] == hidden_keys["_cid"]] + [survivors[k].eqNullSafe(hidden_keys[k]) for k in keys],
                "left_anti",
            )
        frames.stream = frames.stream.unionByName(self._chunk_stream(survivors))
        if self.has_missing:
            frames.stream = frames.stream.unionByName(self._bases(plan.chunks, chunk_rows, events, hidden))
        return frames

    def _add_repairs(self, plan: RunPlan, frames: Frames, cached: list[Any]) -> None:
        """Step 4: the repair deletes of the run's chunks and completed dumps join the stream. Into a
        target that held no rows before the run only when a chunk of the run may cover rows an earlier
        chunk of the run returned (`_overlapped`: another dump, a dump read again from its start)."""
        from pyspark import StorageLevel

        if not plan.chunks or plan.a_target >= self.ctx.frontier:
            return
        fresh = self.target in self.created or is_empty(self.ctx.spark, self.target)
        pooled = self._overlapped(plan.chunks, plan.a_target)
        earlier = [d for d in plan.completed if any(c.high < d.first_low for c in plan.chunks)]
        if fresh and not pooled and not earlier:
            return
        with self._step("repair"):
            # the run's key and each chunk's own (a chunk read under a key since replaced repairs under it)
            own = [k for c in plan.chunks for k in c.meta.key]
            chunk_keys = frames.chunk_rows.select(*dict.fromkeys([*self.keys, *own]), "_cid", "_row", "_high")
            chunk_keys = chunk_keys.persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(chunk_keys)
            run = RunKeys(plan.chunks, chunk_keys, frames.events, plan.a, pooled, not fresh)
            found = [
                self._repairs(plan.chunks, run, frames.hidden, plan.completed, plan.a_target),
                *(
                    self._completed_dump_repairs(d, run, plan.row_struct, plan.a_target)
                    for d in plan.completed
                    if not fresh or d in earlier
                ),
            ]
            if any(f is not None for f in found):
                frames.stream = frames.stream.unionByName(self._repair_deletes([f for f in found if f is not None]))

    def _complete_key_changes(self, plan: RunPlan, frames: Frames, cached: list[Any]) -> None:
        """PostgreSQL: a key change's create that left TOASTed columns out gets them from the old key's
        state (capture/merge/key_changes.py)."""
        from pyspark import StorageLevel

        moved = created_lsns(plan.schemas, plan.a, self.ctx.frontier) if self.has_missing else []
        if not moved:
            return
        with self._step("key_changes"):
            frames.stream = frames.stream.persist(StorageLevel.MEMORY_AND_DISK)  # collected from, then appended
            cached.append(frames.stream)
            completion = KeyChanges(self.ctx.spark, self.target, self.keys, self.types)
            frames.stream, filled, unknown = completion.complete(
                frames.stream, frames.events, moved, frames.chunk_rows, frames.hidden, self._read_views(plan.chunks)
            )
            self._report_unknown(filled, [u for u in unknown if u.lsn >= plan.a_target])

    def _apply(self, plan: RunPlan, stream: Any, props: dict[str, str]) -> None:
        """Steps 5 and 6: the stream appended to the changelog (the part the changelog lacks), read
        back for all of [A, F) and MERGEd into the target; then the frontier as a table property."""
        spark, F, a = self.ctx.spark, self.ctx.frontier, plan.a
        # The changelog is the stream, materialized once: the MERGE reads its rows back
        # (all of [A, F), also those a run killed before its MERGE had appended already).
        counts = None
        if plan.a_changelog < F:
            with self._step("changelog"):
                written = self._append_changelog(stream.where(stream["_lsn"] >= lsn_column(plan.a_changelog)), props)
            log.info("merge.changelog_committed", table=self.name, frontier=F)
            if plan.a_changelog == a:  # this run appended all of [A, F): its counts are the stream's
                counts = written
        with self._step("stream"):
            appended = spark.table(self.changelog)
            appended = appended.where((appended["_lsn"] >= lsn_column(a)) & (appended["_lsn"] < lsn_column(F)))
            if counts is None:  # a killed run appended part of it: count what the changelog holds
                counts = {r["_source"]: r["count"] for r in appended.groupBy("_source").count().collect()}
        chunk_rows = sum(c.meta.rows for c in plan.chunks)
        self.report.update(
            log_events=counts.get("log", 0),
            chunks=len(plan.chunks),
            stale_highs=plan.stale,
            chunk_rows=chunk_rows,
            dropped_by_window=chunk_rows - counts.get("chunk", 0),
            repair_deletes=counts.get("repair", 0),
        )
        self.report["truncates"] = len(self.truncates)
        if plan.a_target < F:
            with self._step("merge"):
                merged = appended.where(appended["_lsn"] >= lsn_column(plan.a_target))
                last = self._delete_truncated(plan.a_target)
                if last is not None:  # what the MERGE applies: the events after the last truncate
                    merged = merged.where(merged["_lsn"] > lsn_column(last))
                self._merge(merged, {**props, **self.unknown_record})
        with self._step("properties"):  # the fallback of applied_frontier, after the commits
            for name, applied in ((self.changelog, plan.a_changelog), (self.target, plan.a_target)):
                if applied < F and name not in self.created:  # a table created by this run holds F
                    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('{FRONTIER}' = '{F}')")
            if self.unknown_record and plan.a_target < F:
                update = iceberg_table(spark, self.target).updateProperties()
                for key, value in self.unknown_record.items():
                    update = update.set(key, value)
                update.commit()

    def _fresh_chunk(self, chunks: list[Chunk], a_changelog: int, a_target: int) -> bool:
        """Whether the run is one chunk into a target and changelog it created: no log event, no
        truncate, at most LOAD_ROWS_PER_FILE rows (one task), no NULL in a key column and no key value
        that landed as another value (`ChunkMeta.clamped_keys` False; unknown in files written before
        it: not taken), so every landed key once (a chunk is one SELECT of a key range, whose keys
        the source holds once each). Such a run is the chunk's rows as they are, written by
        `_load_fresh_chunk` in two plans of one step each."""
        if len(chunks) != 1 or self.reads_log or self.truncates or self.has_missing or a_changelog or a_target:
            return False
        if chunks[0].meta.clamped_keys is not False:  # PostgreSQL `clamped_keys: accept`: two may land as one
            return False
        if {self.target, self.changelog} - self.created or self.rows_in > LOAD_ROWS_PER_FILE:
            return False
        meta = pq.read_metadata(chunks[0].path)
        wanted = {f"after.{k}" for k in self.keys}
        for g in range(meta.num_row_groups):
            group, seen = meta.row_group(g), set()
            for i in range(group.num_columns):
                column = group.column(i)
                if column.path_in_schema in wanted:
                    stats = column.statistics
                    if stats is None or not stats.has_null_count or stats.null_count:
                        return False
                    seen.add(column.path_in_schema)
            if seen != wanted:
                return False
        return True

    def _load_fresh_chunk(self, chunk: Chunk, row_struct: Any, props: dict[str, str], stale: int) -> None:
        """One chunk into a fresh changelog and target (`_fresh_chunk`): the changelog's rows are the
        chunk's with its HIGH, commit time, dump and number as columns, as the stream's of the general
        path; the target's the same rows' columns and HIGH. Each write is one select over the chunk
        file, written as SQL expressions (one analysis, no DataFrame steps per column) and counted
        from the chunk's metadata (nothing drops a row: no event in its window)."""
        from pyspark.sql import types as T

        ctx, spark = self.ctx, self.ctx.spark
        with self._step("read"):
            raw = self._parquet([str(chunk.path.resolve())], T.StructType([T.StructField("after", row_struct)]))
            row = "_metadata.row_index"
            own = {
                "_lsn": sql_literal(chunk.high, "decimal(38,0)"),
                "_order": f"CAST({row} + 1 AS BIGINT)",
                "_op": "'r'",
                "_source": "'chunk'",
                "_commit_ts": row_constant(chunk.high_ts, "timestamp", row),
                "_dump_id": sql_literal(chunk.meta.dump_id, "string"),
                "_chunk": sql_literal(chunk.meta.chunk, "int"),
                "_applied_at": sql_literal(ctx.applied_at, "timestamp"),
            }
            columns = {c.lower(): c for c in self.columns}

            def expressions(table: str) -> list[str]:
                out = []
                for f in self._fields(table):
                    name, sql = quote(f.name), ctx.sql_type(f.dataType)
                    if f.name.lower() in columns:
                        value = f"after.{quote(columns[f.name.lower()])}"
                    else:
                        value = own.get(f.name, "NULL")
                    out.append(f"CAST({value} AS {sql}) AS {name}")
                return out

            changelog_rows = raw.selectExpr(*expressions(self.changelog))
            target_rows = raw.selectExpr(*expressions(self.target)).coalesce(1)
        with self._step("changelog"):
            commit_with(spark, props, lambda: changelog_rows.writeTo(self.changelog).append())
        log.info("merge.changelog_committed", table=self.name, frontier=ctx.frontier)
        self.report.update(
            log_events=0,
            chunks=1,
            stale_highs=stale,
            chunk_rows=chunk.meta.rows,
            dropped_by_window=0,
            repair_deletes=0,
            truncates=0,
        )
        with self._step("merge"):  # a plain append, sorted by key by the table's write order
            write = target_rows.writeTo(self.target).option("distribution-mode", "none")
            commit_with(spark, props, write.append)
            self._report_snapshot()

    def _report_snapshot(self) -> None:
        summary = iceberg_table(self.ctx.spark, self.target).currentSnapshot().summary()
        for name in ("added-records", "deleted-records", "added-position-deletes", "total-records"):
            value = summary.get(name)
            self.report[name.replace("-", "_")] = int(value) if value is not None else 0

    def _truncate_rows(self, truncates: list[TruncateMark]) -> Any:
        """The run's truncates as changelog rows: op 't', source 'truncate', at (T, 0); the table's
        columns are left out (null once unioned or aligned)."""
        from pyspark.sql import functions as sf

        rows = [(t.lsn, t.txid, t.commit_ts) for t in truncates]
        frame = values_frame(
            self.ctx.spark, [("_lsn", "decimal(38,0)"), ("_txid", "string"), ("_commit_ts", "timestamp")], rows
        )
        return frame.select(
            sf.col("_lsn"),
            sf.lit(0).cast("bigint").alias("_order"),
            sf.lit("t").alias("_op"),
            sf.lit("truncate").alias("_source"),
            sf.col("_txid"),
            sf.col("_commit_ts"),
            sf.lit(None).cast("string").alias("_dump_id"),
            sf.lit(None).cast("int").alias("_chunk"),
            sf.lit(None).cast("array<string>").alias("_missing"),
        )

    def _delete_truncated(self, a_target: int, props: dict[str, str] | None = None) -> int | None:
        """Step 4a: delete the target's rows stored below the last truncate the target has not
        applied; that truncate's LSN, or None. Without `props` the commit carries no frontier (the
        MERGE's does: a rerun after a crash between the two deletes nothing more)."""
        pending = [t.lsn for t in self.truncates if t.lsn >= a_target]
        if not pending:
            return None
        last = max(pending)
        if iceberg_table(self.ctx.spark, self.target).currentSnapshot() is None:
            return last  # no rows to delete; and no snapshot without a frontier beside a created table's property
        sql = f"DELETE FROM {self.target} WHERE _lsn < CAST({last} AS DECIMAL(38,0))"
        commit_with(self.ctx.spark, props or {}, lambda: self.ctx.spark.sql(sql))
        log.info("merge.truncated", table=self.name, lsn=last)
        return last

    def _truncate_target(self, a_target: int, a_changelog: int, frontier: int) -> None:
        """A run with nothing but truncates and no landed file to take the columns from (a table
        only ever dumped): the truncates are appended to the changelog and the target's rows below
        the last one deleted, each commit carrying the frontier (the table property too: a DELETE
        that finds no row commits nothing)."""
        spark = self.ctx.spark
        if not table_exists(spark, self.target) or not table_exists(spark, self.changelog):
            self.report["skipped"] = "nothing new"
            return
        self.report["truncates"] = len(self.truncates)
        props = {FRONTIER: str(frontier), "logtide.source": self.ctx.source, "logtide.table": self.name}
        if a_changelog < frontier:
            appended = self._truncate_rows([t for t in self.truncates if t.lsn >= a_changelog])
            rows = self._aligned(appended, self.changelog)
            commit_with(spark, props, lambda: rows.writeTo(self.changelog).append())
        if a_target < frontier:
            self._delete_truncated(a_target, props)
        for name, applied in ((self.changelog, a_changelog), (self.target, a_target)):
            if applied < frontier:
                spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('{FRONTIER}' = '{frontier}')")

    def _report_old_keys(self, unknown: list[Unknown]) -> None:
        """Deletes logged under a key since replaced whose row nothing held (capture/dump/old_keys.py):
        the first few warned, all counted as unknown values (`_record_unknown`)."""
        for u in unknown[:SAMPLE_SIZE]:
            log.warning(
                "merge.old_key_row_unknown",
                table=self.name,
                key=json.dumps(encode_key(u.key)),
                key_now=u.column,
                lsn=u.lsn,
                problem="a delete logged before the table's key was replaced carries the old key only, and "
                "neither the target, this run's events nor its chunks held that row: the delete is applied to "
                "nothing (the target does not hold the row either, unless it was never merged from this "
                "landing zone)",
                fix="dump the table (logtide dump) if the target may hold rows the source deleted",
            )
        self._record_unknown(unknown)

    def _record_unknown(self, unknown: list[Unknown]) -> None:
        """`unknown` counted in the report and added to the target's record (`unknown_record`, read
        by `logtide status`), after what this run recorded already."""
        self.report["unknown_values"] = self.report.get("unknown_values", 0) + len(unknown)
        if not unknown:
            return
        sample = [{"key": encode_key(u.key), "column": u.column, "lsn": u.lsn} for u in unknown[:SAMPLE_SIZE]]
        if self.unknown_record:
            before = int(self.unknown_record[UNKNOWN_VALUES])
            earlier = json.loads(self.unknown_record[UNKNOWN_SAMPLE])
        else:
            before = int(recorded(self.ctx.spark, self.target, UNKNOWN_VALUES) or 0)
            earlier = json.loads(recorded(self.ctx.spark, self.target, UNKNOWN_SAMPLE) or "[]")
        self.unknown_record = {
            UNKNOWN_VALUES: str(before + len(unknown)),
            UNKNOWN_SAMPLE: json.dumps([*sample, *earlier][:SAMPLE_SIZE]),
        }

    def _report_unknown(self, completed: int, unknown: list[Unknown]) -> None:
        """Key changes completed; each value nothing held warned (the first few), counted in the
        report and added to the target's record (`_record_unknown`)."""
        self.report["key_changes_completed"] = completed
        if not unknown:
            self._record_unknown(unknown)
            return
        for u in unknown[:SAMPLE_SIZE]:
            log.warning(
                "merge.value_unknown",
                table=self.name,
                key=json.dumps(encode_key(u.key)),
                column=u.column,
                lsn=u.lsn,
                moved_from=json.dumps(encode_key(u.old_key)),
                problem="a key change left this TOASTed value out and neither the target nor this run held the "
                "old key's row (written before capture started, not dumped yet): the target holds NULL",
                fix="dump these keys or the table (logtide dump); REPLICA IDENTITY FULL on the source table "
                "makes key changes carry the value",
            )
        if len(unknown) > SAMPLE_SIZE:
            log.warning("merge.values_unknown", table=self.name, count=len(unknown), logged=SAMPLE_SIZE)
        self._record_unknown(unknown)

    def _key(self, schemas: list[tuple[pa.Schema, Path]], chunks: list[Chunk], columns: dict[str, Any]) -> list[str]:
        """The key the newest landed file records (`logtide.key`), else the last chunk's, else the
        one the configuration names (files landed before it was named); UnusableTableError (the
        run skips the table) when there is none."""
        for schema, _ in reversed(schemas):
            text = (schema.metadata or {}).get(b"logtide.key", b"").decode()
            if text:
                return text.split(",")
        if chunks:
            return list(chunks[-1].meta.key)
        source = self.ctx.config.source(self.ctx.source)
        named = source.named_key(self.schema, self.table)
        if named is not None and all(k in columns for k in named):
            return list(named)
        raise no_key(self.ctx.source, self.name)

    def _ensure_tables(self) -> None:
        """Create the target and changelog (one metadata write each, holding the run's frontier as
        property already: no ALTER after the run's commits), or evolve their columns."""
        spark, ctx = self.ctx.spark, self.ctx
        ctx.ensure_namespace()
        columns = [(c, self.types[c]) for c in self.columns]
        props = {"logtide.source": ctx.source, "logtide.table": self.name, "logtide.key": ",".join(self.keys)}
        props[FRONTIER] = str(ctx.frontier)
        exists = self.exists
        target, changelog = ctx.target_of(self.schema, self.table), ctx.target_of(self.schema, self.table, True)
        for name, new in ((self.target, target), (self.changelog, changelog)):
            folder = None if exists[name] else local_table_folder(ctx.config, new)
            if folder is not None:  # Hadoop starts a `chmod` for each folder it creates (session.py)
                for sub in ("metadata", "data"):
                    (folder / sub).mkdir(parents=True, exist_ok=True)
        clustered = sortable_prefix(self.keys, self.types)
        if ensure_table(spark, target, columns, TARGET_META, props, clustered, exists[self.target]):
            self.created.add(self.target)
        if ensure_table(spark, changelog, columns, CHANGELOG_META, props, exists=exists[self.changelog]):
            self.created.add(self.changelog)

    # -- building the stream -----------------------------------------------------------------

    def _log_events(self, paths: list[Path], row_struct: Any, start: int) -> Any:
        """Log events with start <= LSN < F: one row per event and key (a key change that the log
        did not split becomes a delete of the old key at order -1, as in reconcile.py)."""
        from pyspark.sql import functions as sf
        from pyspark.sql import types as T

        spark, keys = self.ctx.spark, self.keys
        schema = T.StructType(
            [
                T.StructField("_lsn", T.DecimalType(38, 0)),
                T.StructField("_op", T.StringType()),
                T.StructField("_txid", T.StringType()),
                T.StructField("_commit_ts", T.TimestampType()),
                T.StructField("before", row_struct),
                T.StructField("after", row_struct),
            ]
            + ([T.StructField("_missing", T.ArrayType(T.StringType()))] if self.has_missing else [])
        )
        if not paths:  # empty by plan (LIMIT 0): Spark drops the joins with it instead of running them
            nulls = ", ".join(
                f"CAST(NULL AS {self.ctx.sql_type(f.dataType)}) AS {quote(f.name)}" for f in self._stream_schema()
            )
            return spark.sql(f"SELECT {nulls} LIMIT 0")
        raw = self._parquet([str(p.resolve()) for p in paths], schema)
        raw = raw.where((raw["_lsn"] >= lsn_column(start)) & (raw["_lsn"] < lsn_column(self.ctx.frontier)))

        def rows(image: Any, op: Any, order: int, missing: Any) -> list[Any]:
            return [
                *(self.ctx.cast(image.getField(c), self.types[c]).alias(c) for c in self.columns),
                sf.col("_lsn"),
                sf.lit(order).cast("bigint").alias("_order"),
                op.alias("_op"),
                sf.lit("log").alias("_source"),
                sf.col("_txid"),
                sf.col("_commit_ts"),
                sf.lit(None).cast("string").alias("_dump_id"),
                sf.lit(None).cast("int").alias("_chunk"),
                missing.cast("array<string>").alias("_missing"),
                xid.alias("_xid"),
            ]

        # PostgreSQL's _txid is the transaction's 32-bit xid (for chunk visibility); else null
        xid = sf.when(sf.col("_txid").rlike("^[0-9]+$"), sf.col("_txid").cast("bigint"))
        before, after = sf.col("before"), sf.col("after")
        image = sf.when(sf.col("_op") == "d", before).otherwise(after)
        # as reconcile.py: missing columns apply to an after image only
        missing = sf.when(after.isNotNull(), sf.col("_missing")) if self.has_missing else sf.lit(None)
        main = raw.select(*rows(image, sf.col("_op"), 0, missing))
        same_key = [before.getField(k).eqNullSafe(after.getField(k)) for k in keys]
        moved = before.isNotNull() & after.isNotNull() & ~all_of(same_key)
        split = raw.where(moved).select(*rows(before, sf.lit("d"), -1, sf.lit(None)))
        return main.unionByName(split)

    def _parquet(self, paths: list[str], schema: Any) -> Any:
        """The files read with `schema` (its `before` / `after` structs: the run's columns). Spark 3.5
        does not widen a Parquet INT32 to bigint (nor FLOAT to double) itself: files landed before an
        ALTER widened a column (`narrow`) are read with their own type and cast, a read per set of
        own types, with `_metadata` carried as a column (callers read its file path and row index)."""
        from pyspark.sql import functions as sf
        from pyspark.sql import types as T

        spark = self.ctx.spark
        groups: dict[tuple[tuple[str, pa.DataType], ...], list[str]] = {}
        for path in paths:
            groups.setdefault(self.narrow.get(path, ()), []).append(path)
        if list(groups) in ([], [()]):
            return spark.read.schema(schema).parquet(*paths)
        frames = []
        for own, group in groups.items():
            types = {name: spark_type(t) for name, t in own}

            def narrowed(f: Any, types: dict[str, Any] = types) -> Any:
                if not isinstance(f.dataType, T.StructType):
                    return f
                inner = [T.StructField(g.name, types.get(g.name, g.dataType), g.nullable) for g in f.dataType.fields]
                return T.StructField(f.name, T.StructType(inner), f.nullable)

            read = spark.read.schema(T.StructType([narrowed(f) for f in schema.fields])).parquet(*group)
            frames.append(read.select(*(sf.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields),
                                      sf.col("_metadata")))  # fmt: skip
        union = frames[0]
        for frame in frames[1:]:
            union = union.unionByName(frame)
        return union

    def _stream_schema(self) -> Any:
        from pyspark.sql import types as T

        fields = [T.StructField(c, self.types[c]) for c in self.columns]
        fields += [
            T.StructField("_lsn", T.DecimalType(38, 0)),
            T.StructField("_order", T.LongType()),
            T.StructField("_op", T.StringType()),
            T.StructField("_source", T.StringType()),
            T.StructField("_txid", T.StringType()),
            T.StructField("_commit_ts", T.TimestampType()),
            T.StructField("_dump_id", T.StringType()),
            T.StructField("_chunk", T.IntegerType()),
            T.StructField("_missing", T.ArrayType(T.StringType())),
            T.StructField("_xid", T.LongType()),
        ]
        return T.StructType(fields)

    def _chunk_rows(self, chunks: list[Chunk], row_struct: Any) -> Any:
        """Every row of the run's chunks with its chunk's id, LOW, HIGH and position."""
        from pyspark.sql import functions as sf
        from pyspark.sql import types as T

        spark = self.ctx.spark
        paths = [str(c.path.resolve()) for c in chunks]
        raw = self._parquet(paths, T.StructType([T.StructField("after", row_struct)]))
        values = [*(self.ctx.cast(sf.col("after").getField(c), self.types[c]).alias(c) for c in self.columns)]
        if len(chunks) == 1:  # every row is the one chunk's (a table below the chunk size): its columns as
            # literals, no join with the chunks' bounds (a broadcast, its own job) and no file name per row
            c = chunks[0]
            own = (c.id, c.low, c.high, c.high_ts, c.meta.dump_id, c.meta.chunk)
            return raw.select(*values, sf.col("_metadata.row_index").alias("_row")).selectExpr(
                "*", *(f"{row_constant(v, t)} AS {quote(n)}" for v, (n, t) in zip(own, CHUNK_COLUMNS[1:], strict=True))
            )
        raw = raw.select(
            *values, sf.col("_metadata.file_path").alias("_file"), sf.col("_metadata.row_index").alias("_row")
        )
        folders = {str(Path(p).parent) for p in paths}  # chunk file names are <digits>.parquet: never encoded
        spelled_folder = {f: spark_file_path(spark, f) for f in folders}
        spelled = {p: f"{spelled_folder[str(Path(p).parent)]}/{Path(p).name}" for p in paths}
        # The scheme Spark puts before a path in `_metadata.file_path` (file: or file://), read once
        # per run from a row rather than stripped from every row (a regexp per row cost 3 s per 1M
        # rows), and not once per table (a job each: `Context.file_scheme`).
        if self.ctx.file_scheme is None:
            first = raw.select("_file").first()
            if first is not None:
                uri = first[0]
                known = next((path for path in spelled.values() if uri.endswith(path)), None)
                if known is None:
                    raise MergeError(f"Spark names a chunk file {uri}, which is none of the run's chunk files")
                self.ctx.file_scheme = uri[: len(uri) - len(known)]
        if self.ctx.file_scheme is not None:
            spelled = {p: self.ctx.file_scheme + path for p, path in spelled.items()}
        meta = values_frame(
            spark,
            CHUNK_COLUMNS,
            [
                (spelled[p], c.id, c.low, c.high, c.high_ts, c.meta.dump_id, c.meta.chunk)
                for p, c in zip(paths, chunks, strict=True)
            ],
        )
        return raw.join(sf.broadcast(meta), "_file")

    def _hidden(self, chunks: list[Chunk], events: Any) -> Any | None:
        """PostgreSQL: the log events before a chunk's LOW whose transaction the chunk's snapshot
        could not see, with the chunk's `_cid` (reconcile.py `hidden_events`): a commit is in the WAL
        slightly before it is visible, so such a chunk row is older than the log and is dropped
        like a window's (and, as with a window's, `_bases` keeps the columns those events left out).
        Events are looked for back to the chunk's `before_low` (and for in-progress transactions, and
        a read-only chunk's xids at or past xmax, back to the start of what the run reads: its
        frontier or the earliest LOW / before_low)."""
        from pyspark.sql import functions as sf

        views = []
        for c in chunks:
            view = c.meta.read_view
            if isinstance(view, PgSnapshot):  # the Spark form of `PgSnapshot.hides`
                # read-only: an xid at or past xmax is hidden whatever its LSN (read_view.py)
                views.append((c.id, c.low, 0 if view.readonly else view.before_low, view.xmax, list(view.xip)))
            elif view is not None:
                raise MergeError(f"{self.name}: the merge cannot apply read view {type(view).__name__}")
        if not views or not self.reads_log:  # no log event in the run: none to hide (and no plan to analyse)
            return None
        keys, spark = self.keys, self.ctx.spark
        columns = [("_cid", "int"), ("_low", "decimal(38,0)"), ("_before_low", "decimal(38,0)"), ("_xmax", "bigint")]
        frame = sf.broadcast(values_frame(spark, [*columns, ("_xip", "array<bigint>")], views))
        xids = events.where(sf.col("_xid").isNotNull()).select(*keys, "_lsn", "_order", "_op", "_missing", "_xid")
        widened = widen_xid(sf.col("_xid"), sf.col("_xmax"))
        recent = xids.join(frame, (xids["_lsn"] >= frame["_before_low"]) & (xids["_lsn"] < frame["_low"])).where(
            (widened >= sf.col("_xmax")) | sf.array_contains(sf.col("_xip"), widened)
        )
        running = frame.select("_cid", "_low", "_xmax", sf.explode("_xip").alias("_full"))
        running = running.withColumn("_x32", sf.col("_full").bitwiseAND(sf.lit(0xFFFFFFFF)))
        in_xip = xids.join(running, (xids["_xid"] == running["_x32"]) & (xids["_lsn"] < running["_low"])).where(
            widen_xid(sf.col("_x32"), sf.col("_xmax")) == sf.col("_full")
        )
        picked = ["_cid", *keys, "_lsn", "_order", "_op", "_missing"]
        return recent.select(*picked).unionByName(in_xip.select(*picked)).distinct()

    def _chunk_stream(self, survivors: Any, missing: Any | None = None) -> Any:
        from pyspark.sql import functions as sf

        return survivors.select(
            *self.columns,
            sf.col("_high").alias("_lsn"),
            (sf.col("_row") + 1).cast("bigint").alias("_order"),
            sf.lit("r").alias("_op"),
            sf.lit("chunk").alias("_source"),
            sf.lit(None).cast("string").alias("_txid"),
            sf.col("_high_ts").alias("_commit_ts"),
            "_dump_id",
            "_chunk",
            (sf.lit(None) if missing is None else missing).cast("array<string>").alias("_missing"),
        )

    def _read_views(self, chunks: list[Chunk]) -> dict[int, PgSnapshot]:
        """The run's chunks' snapshots by `_cid` (PostgreSQL; other chunks have none)."""
        return {c.id: c.meta.read_view for c in chunks if isinstance(c.meta.read_view, PgSnapshot)}

    def _bases(self, chunks: list[Chunk], chunk_rows: Any, events: Any, hidden: Any | None) -> Any:
        """PostgreSQL leaves unchanged TOASTed values out of update events (`_missing`). A chunk row
        dropped for events (in its window, or hidden from its snapshot) that all leave a column out
        is the only full copy of that column, which none of them changed: place it at HIGH with
        every column some such event carried marked missing, as reconcile.py's `_base_missing`;
        not when one of them deleted the key (it ends deleted, or a key change moved another row in,
        whose left-out columns `KeyChanges` fills from that row: the chunk's copy is stale).
        Only the events after the read count (reconcile.py `read_after`): a window event whose
        transaction the chunk's snapshot saw is in the row already (a key swap it saw made the row
        the swapped one); a row that saw every one is placed whole where one of them left a column
        out. A chunk without a snapshot, or an event without an xid, leaves every event counted."""
        from pyspark.sql import functions as sf

        keys = self.keys
        others = [c for c in self.columns if c not in keys]
        window = events.select(
            *(sf.col(k).alias(f"_w{i}") for i, k in enumerate(keys)), "_lsn", "_order", "_op", "_missing", "_xid"
        )
        rows = chunk_rows.select(*keys, "_cid", "_low", "_high")
        newer = rows.join(
            window,
            [rows[k].eqNullSafe(window[f"_w{i}"]) for i, k in enumerate(keys)]
            + [window["_lsn"] > rows["_low"], window["_lsn"] < rows["_high"]],
        ).select("_cid", *keys, "_lsn", "_order", "_op", "_missing", "_xid")
        views = self._read_views(chunks)
        if views:  # `PgSnapshot.sees`: null where it cannot tell
            frame = values_frame(
                self.ctx.spark,
                [("_vcid", "int"), ("_xmax", "bigint"), ("_xip", "array<bigint>")],
                [(cid, v.xmax, list(v.xip)) for cid, v in views.items()],
            )
            newer = newer.join(sf.broadcast(frame), newer["_cid"] == frame["_vcid"], "left")
            widened = widen_xid(sf.col("_xid"), sf.col("_xmax"))
            seen = (widened < sf.col("_xmax")) & ~sf.array_contains(sf.col("_xip"), widened)
            newer = newer.select(
                "_cid",
                *keys,
                "_lsn",
                "_order",
                "_op",
                "_missing",
                sf.when(sf.col("_xmax").isNotNull(), seen).alias("_seen"),
            )
        else:
            newer = newer.select(
                "_cid", *keys, "_lsn", "_order", "_op", "_missing", sf.lit(None).cast("boolean").alias("_seen")
            )
        if hidden is not None:  # hidden from the snapshot: after the read
            newer = newer.unionByName(hidden.withColumn("_seen", sf.lit(False)))
        carried = sf.coalesce(sf.col("_missing"), sf.array().cast("array<string>"))
        after = ~sf.coalesce(sf.col("_seen"), sf.lit(False))
        kept = sf.col("_op") != "d"

        def carries(where: Any) -> Any:
            return sf.array_compact(
                sf.array(*(sf.max(sf.when(where & kept & ~sf.array_contains(carried, c), sf.lit(c))) for c in others))
            )

        per_key = newer.groupBy("_cid", *keys).agg(
            # exact: the snapshot told for every event (read_after is not None)
            sf.min(sf.col("_seen").isNotNull().cast("int")).alias("_exact"),
            sf.max(sf.when(~kept, sf.lit(True))).alias("_deleted"),
            sf.max(sf.when(~kept & after, sf.lit(True))).alias("_deleted_after"),
            carries(sf.lit(True)).alias("_carried_all"),
            carries(after).alias("_carried_after"),
            sf.max(sf.when(after | (kept & (sf.size(carried) > 0)), sf.lit(True))).alias("_needed"),
        )
        exact = sf.col("_exact") == 1
        per_key = per_key.select(
            "_cid",
            *keys,
            sf.when(exact, sf.col("_deleted_after")).otherwise(sf.col("_deleted")).alias("_deleted"),
            sf.when(exact, sf.col("_carried_after")).otherwise(sf.col("_carried_all")).alias("_carried"),
            sf.when(exact, sf.col("_needed")).otherwise(sf.lit(True)).alias("_needed"),
        )
        per_key = per_key.where(
            sf.col("_deleted").isNull() & (sf.size("_carried") < len(others)) & sf.col("_needed").isNotNull()
        )
        per_key = per_key.select(
            sf.col("_cid").alias("_pcid"), *(sf.col(k).alias(f"_p{i}") for i, k in enumerate(keys)), "_carried"
        )
        same = [chunk_rows["_cid"] == per_key["_pcid"]]
        based = chunk_rows.join(
            per_key, same + [chunk_rows[k].eqNullSafe(per_key[f"_p{i}"]) for i, k in enumerate(keys)]
        )
        based = based.drop("_pcid", *(f"_p{i}" for i in range(len(keys))))
        return self._chunk_stream(based, sf.col("_carried"))

    def _repairs(
        self, chunks: list[Chunk], run: RunKeys, hidden: Any | None, completed: list[CompletedDump], a_target: int
    ) -> Any | None:
        """Deletes at HIGH for target keys a chunk covers that no chunk of the run returned: the
        keys a key-list chunk asked for (compared by equality under the folds the database proved
        for the key columns, `ChunkMeta.key_folds`: a key asked as 'a' that the database finds as 'A'
        returned 'A', and the target's 'a' goes; asked 'apple' under citext, a target 'Apple' the
        source lost goes), and the keys inside a range chunk's bounds, but only where the dump recorded
        that the database orders the key as Spark does (`ChunkMeta.exact_order`); under any other
        collation Spark's order cannot tell which keys lie in the range, and none are deleted.
        Each chunk repairs under the key it was read under (`ChunkMeta.key`: its bounds, asked keys
        and order are that key's), which the target holds as columns; a chunk read under an older
        key than the run's (the key replaced after it) finds target rows by those columns and deletes
        them under the run's key (`_own_key_repairs`). Under the run's key the candidates are also the
        keys the run saw before the chunk's LOW (`_run_keys`). Returns the keys to delete (the run's
        key) with the chunk's _high, _high_ts, _dump_id and _chunk (`_repair_deletes`)."""
        relevant = [c for c in chunks if c.high >= a_target]
        covered = {d.dump_id for d in completed}
        inexact = [c for c in relevant if c.meta.keys is None and not c.meta.exact_order]
        if any(c.meta.dump_id not in covered for c in inexact):
            log.warning(
                "merge.repair_skipped",
                table=self.name,
                chunks=sum(c.meta.dump_id not in covered for c in inexact),
                dumps=",".join(sorted({c.meta.dump_id for c in inexact} - covered)),
                reason="the database does not order this table's key as Spark orders its values (a collation "
                "that is not byte order and NO PAD, a float key, or chunks dumped before Logtide recorded the "
                "order): Spark cannot tell which target keys lie in these chunks' ranges, and deletes none",
                action="a full dump (no --from/--to) deletes the rows the source no longer has when its last "
                "chunk is merged; key-range dumps never do",
            )
        relevant = [c for c in relevant if c.meta.keys is not None or c.meta.exact_order]
        by_key: dict[tuple[str, ...], list[Chunk]] = {}
        for c in relevant:
            by_key.setdefault(tuple(c.meta.key) or tuple(self.keys), []).append(c)
        found = [self._own_key_repairs(list(own), group, run, hidden) for own, group in by_key.items()]
        found = [f for f in found if f is not None]
        if not found:
            return None
        if len(by_key) > 1 or list(next(iter(by_key))) != self.keys:
            log.info(
                "merge.repair_keys",
                table=self.name,
                key=",".join(self.keys),
                chunk_keys=";".join(",".join(k) for k in by_key),
                chunks=len(relevant),
            )
        union = found[0]
        for more in found[1:]:
            union = union.unionByName(more)
        return union

    def _own_key_repairs(self, own: list[str], chunks: list[Chunk], run: RunKeys, hidden: Any | None) -> Any | None:
        """`_repairs` for chunks read under the key `own`: target rows whose `own` columns lie in a
        chunk's range (or equal a key it asked for) that no chunk of the run returned under `own`,
        and under the run's key also the keys the run saw before the chunk's LOW that it did not
        return (`_run_keys`). Under the run's key, keys a log event in the chunk's window touched
        (or one its snapshot could not see) are left alone. Under an older key the target's `own`
        columns are its state at the run's start, which an event after that may have changed without
        changing the run's key (or the other way round): a row any event of the run before HIGH
        touched, by either key, is left alone, so a delete is only written for a row no event
        explains, which the chunk's snapshot did not hold and no event gave back before HIGH. Later
        events and chunks order after the delete (LSN, then order: a chunk row at the same HIGH wins over it)."""
        from pyspark.sql import functions as sf

        keys, chunk_rows, events = self.keys, run.rows, run.events
        both = list(dict.fromkeys([*keys, *own]))
        entries = []
        if run.target:
            target = self.ctx.spark.table(self.target).select(*both, sf.col("_lsn").alias("_tlsn"))
            orphans = target.join(chunk_rows.select(*own), own, "left_anti")
            if own != keys:
                orphans = orphans.join(chunk_rows.select(*keys), keys, "left_anti")
            entries.append(orphans.withColumn("_pooled", sf.lit(False)))
        if own == keys:
            entries += self._run_keys(run, max(c.low for c in chunks), [c.id for c in chunks if c.id in run.pooled])
        if not entries:
            return None
        orphans = entries[0]
        for more in entries[1:]:
            orphans = orphans.unionByName(more)
        info = self._chunk_info(own, chunks)
        candidates = self._in_ranges(own, both, info, orphans, chunk_rows)
        for listed in self._asked(own, both, info, orphans, chunks):
            candidates = candidates.unionByName(listed)
        # a chunk row of the run is a candidate for the chunks after it (a key returned by a chunk whose
        # HIGH is at or past this one's LOW is no candidate: `_run_keys` keeps each key's last return)
        before = sf.when(sf.col("_pooled"), sf.col("_low")).otherwise(sf.col("_high"))
        candidates = candidates.where(sf.col("_tlsn").isNull() | (sf.col("_tlsn") < before))
        if own == keys:
            if hidden is not None:
                candidates = candidates.join(hidden.select("_cid", *keys).distinct(), ["_cid", *keys], "left_anti")
            window = events.select(*keys, "_lsn")
            untouched = candidates.join(
                window,
                [candidates[k] == window[k] for k in keys]
                + [window["_lsn"] > candidates["_low"], window["_lsn"] < candidates["_high"]],
                "left_anti",
            )
            return untouched.select(*keys, "_high", "_high_ts", "_dump_id", "_chunk")
        # every event the run read (from its start, which is at or before the target's frontier and
        # every LOW and snapshot lookback) before HIGH: the window's, the hidden ones, and those
        # between the target's state and LOW that may have moved the row under one key only
        for by in (own, keys):
            touched = events.select(*by, "_lsn")
            candidates = candidates.join(
                touched,
                [candidates[k] == touched[k] for k in by] + [touched["_lsn"] < candidates["_high"]],
                "left_anti",
            )
        return candidates.where(all_of([sf.col(k).isNotNull() for k in keys])).select(
            *keys, "_high", "_high_ts", "_dump_id", "_chunk"
        )

    def _run_keys(self, run: RunKeys, before: int, pooled: list[int]) -> list[Any]:
        """Repair candidates under the run's key besides the target's rows: keys the run saw exist
        before `before` (the latest LOW of the chunks they are compared with), each with the LSN of
        that state (`_tlsn`). (1) A key whose latest event of the run before `before` is no delete and
        that no chunk of the run returned (a key a chunk returned is that chunk's state). (2) Rows of
        the `pooled` chunks, at their chunk's HIGH (`_pooled`: a candidate only for chunks whose LOW is
        past it), each key from the last chunk of the run that returned it. A chunk that covers such a
        key and did not return it, with no event in its window, read the source without it: the key
        went with no event of its own (a row deleted where the log does not see it)."""
        from pyspark.sql import functions as sf

        keys, rows, events = self.keys, run.rows, run.events
        present = all_of([sf.col(k).isNotNull() for k in keys])
        found = []
        if self.reads_log and before > run.a:
            seen = events.where((events["_lsn"] >= lsn_column(run.a)) & (events["_lsn"] < lsn_column(before)))
            seen = seen.where(present).select(*keys, "_lsn", "_order", "_op")
            seen = seen.join(rows.select(*keys), keys, "left_anti")
            latest = seen.groupBy(*keys).agg(
                sf.max_by(sf.struct("_op", "_lsn"), sf.struct("_lsn", "_order")).alias("_last")
            )
            found.append(
                latest.where(sf.col("_last._op") != "d").select(
                    *keys, sf.col("_last._lsn").alias("_tlsn"), sf.lit(False).alias("_pooled")
                )
            )
        if pooled:
            mine = rows.where(sf.col("_cid").isin(pooled) & present).select(*keys, sf.col("_high").alias("_tlsn"))
            later = rows.select(*(sf.col(k).alias(f"_l{i}") for i, k in enumerate(keys)), sf.col("_high").alias("_lh"))
            last = mine.join(
                later,
                [mine[k] == later[f"_l{i}"] for i, k in enumerate(keys)] + [later["_lh"] > mine["_tlsn"]],
                "left_anti",
            )
            found.append(last.withColumn("_pooled", sf.lit(True)))
        return found

    def _overlapped(self, chunks: list[Chunk], a_target: int) -> set[int]:
        """The ids of the run's chunks whose rows a later chunk of the run (its LOW past their HIGH)
        that repairs under the run's key may cover: a chunk of another dump, or of the same dump read
        again from its start (`dump.table_restarted`: a range chunk with no `after` past chunk 1, a
        key-list chunk asking a key an earlier one asked). Within one dump read once, chunks cover
        ranges (key lists) of their own, and none of their rows enters the repairs' pool: such runs
        cost what they cost before."""
        repairing = [
            c
            for c in chunks
            if c.high >= a_target
            and (c.meta.keys is not None or c.meta.exact_order)
            and list(c.meta.key or self.keys) == self.keys
        ]
        if not repairing:
            return set()
        last_low: dict[str, int] = {}
        for c in repairing:
            last_low[c.meta.dump_id] = max(last_low.get(c.meta.dump_id, 0), c.low)
        restarts: dict[str, int] = {}  # dump -> its last chunk read again from the range's start
        for c in chunks:
            if c.meta.keys is None and c.meta.after is None and c.meta.chunk > 1:
                restarts[c.meta.dump_id] = max(restarts.get(c.meta.dump_id, 0), c.meta.chunk)
        asked_again = self._asked_again(chunks)
        found = set()
        for c in chunks:
            others = [low for dump, low in last_low.items() if dump != c.meta.dump_id]
            again = c.id in asked_again and last_low.get(c.meta.dump_id, 0) > c.high
            if (others and max(others) > c.high) or restarts.get(c.meta.dump_id, 0) > c.meta.chunk or again:
                found.add(c.id)
        return found

    @staticmethod
    def _asked_again(chunks: list[Chunk]) -> set[int]:
        """Key-list chunks asking a key (under the chunk's folds) that a later chunk of their dump asks."""
        found = set()
        later: dict[str, set[str]] = {}
        for c in sorted(chunks, key=lambda c: c.meta.chunk, reverse=True):
            if c.meta.keys is None:
                continue
            folds = c.meta.key_folds or ("",) * len(c.meta.key)
            try:
                asked = {
                    json.dumps(encode_key(tuple(fold(v, f) for v, f in zip(k, folds, strict=False))), default=str)
                    for k in c.meta.keys
                }
            except (TypeError, ValueError):  # a key Python cannot spell: taken as asked again
                found.add(c.id)
                continue
            seen = later.setdefault(c.meta.dump_id, set())
            if asked & seen:
                found.add(c.id)
            seen |= asked
        return found

    def _bound(self, own: list[str], row: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
        """A chunk's key bound (or asked key) under the key `own`, as Spark's values."""
        return None if row is None else tuple(spark_value(v, self.types[k]) for k, v in zip(own, row, strict=True))

    def _key_struct(self, own: list[str]) -> Any:
        from pyspark.sql import types as T

        return T.StructType([T.StructField(k, self.types[k]) for k in own])

    def _chunk_info(self, own: list[str], chunks: list[Chunk]) -> Any:
        """One row per chunk: its id, LOW, HIGH, dump and chunk number, whether it asked for keys,
        and its bounds under `own` (`_lo` inclusive when it is the range's given start)."""
        from pyspark.sql import types as T

        key_struct = self._key_struct(own)
        return self.ctx.spark.createDataFrame(
            [
                (
                    *(c.id, Decimal(c.low), Decimal(c.high), c.high_ts, c.meta.dump_id, c.meta.chunk),
                    *(c.meta.keys is not None, c.meta.last, self._bound(own, c.meta.after or c.meta.start)),
                    *(c.meta.after is None and c.meta.start is not None, self._bound(own, c.meta.stop)),
                )
                for c in chunks
            ],
            T.StructType(
                [
                    T.StructField("_cid", T.IntegerType()),
                    T.StructField("_low", T.DecimalType(38, 0)),
                    T.StructField("_high", T.DecimalType(38, 0)),
                    T.StructField("_high_ts", T.TimestampType()),
                    T.StructField("_dump_id", T.StringType()),
                    T.StructField("_chunk", T.IntegerType()),
                    T.StructField("_keyed", T.BooleanType()),
                    T.StructField("_last", T.BooleanType()),
                    T.StructField("_lo", key_struct),
                    T.StructField("_lo_incl", T.BooleanType()),
                    T.StructField("_stop", key_struct),
                ]
            ),
        )

    def _in_ranges(self, own: list[str], both: list[str], info: Any, orphans: Any, chunk_rows: Any) -> Any:
        """Orphans (target rows no chunk returned) whose `own` key lies in a range chunk's range: from
        its bound to its last row's key (in the database's order, which is Spark's here), or to its
        `stop` (none: no end) when it was the range's last."""
        from pyspark.sql import functions as sf

        key = sf.struct(*(sf.col(k) for k in own))
        ends = chunk_rows.groupBy("_cid").agg(sf.max_by(key, "_row").alias("_end"))
        ranges = info.where(~sf.col("_keyed")).join(ends, "_cid", "left")
        hi = sf.when(sf.col("_last"), sf.col("_stop")).otherwise(sf.col("_end"))
        ranges = sf.broadcast(ranges.withColumn("_hi", hi))
        o_key = sf.struct(*(orphans[k] for k in own))
        lower_ok = (
            ranges["_lo"].isNull()
            | (ranges["_lo_incl"] & (o_key >= ranges["_lo"]))
            | (~ranges["_lo_incl"] & (o_key > ranges["_lo"]))
        )
        upper_ok = ranges["_hi"].isNull() | (o_key <= ranges["_hi"])
        return orphans.join(ranges, lower_ok & upper_ok).select(*both, *REPAIR_FROM_CHUNK)

    def _asked(self, own: list[str], both: list[str], info: Any, orphans: Any, chunks: list[Chunk]) -> list[Any]:
        """Orphans equal to a key a key-list chunk asked for, compared under the folds the database
        proved for the key columns (`ChunkMeta.key_folds`): a target key equal to an asked one under
        those folds is that key in the database. One frame per set of folds."""
        from pyspark.sql import functions as sf
        from pyspark.sql import types as T

        by_folds: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
        for c in chunks:
            if c.meta.keys is not None:
                folds = c.meta.key_folds or ("",) * len(own)
                by_folds.setdefault(folds, []).extend(
                    (c.id, *(fold(v, f) for v, f in zip(self._bound(own, k), folds, strict=True)))  # type: ignore[arg-type]
                    for k in c.meta.keys
                )
        found = []
        for folds, asked in by_folds.items():
            fields = [T.StructField("_cid", T.IntegerType()), *self._key_struct(own).fields]
            asked_df = self.ctx.spark.createDataFrame(asked, T.StructType(fields))
            folded = [f"_f{i}" for i in range(len(own))]
            asked_df = asked_df.select("_cid", *(sf.col(k).alias(f) for k, f in zip(own, folded, strict=True)))
            left = orphans.select(
                *both,
                "_tlsn",
                "_pooled",
                *(spark_fold(sf.col(k), f).alias(n) for k, f, n in zip(own, folds, folded, strict=True)),
            )
            listed = left.join(sf.broadcast(asked_df), folded).join(sf.broadcast(info.where(sf.col("_keyed"))), "_cid")
            found.append(listed.select(*both, *REPAIR_FROM_CHUNK))
        return found

    def _completed_dump_repairs(self, dump: CompletedDump, run: RunKeys, row_struct: Any, a_target: int) -> Any | None:
        """Deletes at a completed full dump's last HIGH, under any collation: keys that existed before
        its first LOW (target keys whose stored LSN is below it; keys the run saw: the latest event of
        the run before it no delete, or a row of a chunk of the run whose HIGH is below it) that none
        of its chunks returned (nor a chunk of the run whose HIGH is at or past its first LOW), and that
        no log event touched from its first LOW to its last HIGH (nor one hidden from a chunk's
        PostgreSQL snapshot). Why that is sound: each chunk read the keys after the previous chunk's
        last key, in the database's order, so the chunks together covered every key; a row the
        database held with key k from the first LOW to the last HIGH was in some chunk's range at its
        SELECT and came back with its key as stored. A key no chunk returned was therefore not in the
        source at some moment of the dump, and with no event on it from the first LOW on, not at the
        last HIGH either. The dump's chunks may have been merged over several runs: all of its
        chunk files are read again here. Returns what `_repairs` returns."""
        from pyspark.sql import functions as sf
        from pyspark.sql import types as T

        last = dump.last
        if last.high < a_target:
            return None
        spark, keys, events = self.ctx.spark, self.keys, run.events
        first_low = lsn_column(dump.first_low)
        present = all_of([sf.col(k).isNotNull() for k in keys])
        key_struct = T.StructType([f for f in row_struct.fields if f.name in keys])
        paths = [str(c.path.resolve()) for c in dump.chunks]
        returned = self._parquet(paths, T.StructType([T.StructField("after", key_struct)])).select(
            *(self.ctx.cast(sf.col("after").getField(k), self.types[k]).alias(k) for k in keys)
        )
        seen = []
        if run.target:
            target = spark.table(self.target).select(*keys, sf.col("_lsn").alias("_tlsn"))
            stored_before = sf.col("_tlsn").isNull() | (sf.col("_tlsn") < first_low)
            seen.append(target.where(present & stored_before).select(*keys))
        if self.reads_log and dump.first_low > run.a:
            before = events.where((events["_lsn"] >= lsn_column(run.a)) & (events["_lsn"] < first_low) & present)
            latest = before.groupBy(*keys).agg(sf.max_by("_op", sf.struct("_lsn", "_order")).alias("_last"))
            seen.append(latest.where(sf.col("_last") != "d").select(*keys))
        rows = run.rows
        if any(c.high < dump.first_low for c in run.chunks):
            seen.append(rows.where((rows["_high"] < first_low) & present).select(*keys))
        if not seen:
            return None
        candidates = seen[0]
        for more in seen[1:]:
            candidates = candidates.unionByName(more)
        candidates = candidates.join(returned, keys, "left_anti")
        if any(c.high >= dump.first_low and c.meta.dump_id != dump.dump_id for c in run.chunks):
            candidates = candidates.join(rows.where(rows["_high"] >= first_low).select(*keys), keys, "left_anti")
        touched = events.where((events["_lsn"] >= first_low) & (events["_lsn"] <= lsn_column(last.high))).select(*keys)
        candidates = candidates.join(touched, keys, "left_anti")
        hidden = self._hidden(dump.chunks, events)
        if hidden is not None:
            candidates = candidates.join(hidden.select(*keys), keys, "left_anti")
        return candidates.select(
            *keys,
            lsn_column(last.high).alias("_high"),
            sf.lit(last.high_ts).cast("timestamp").alias("_high_ts"),
            sf.lit(dump.dump_id).alias("_dump_id"),
            sf.lit(last.meta.chunk).alias("_chunk"),
        )

    def _repair_deletes(self, found: list[Any]) -> Any:
        """The stream's delete events for the keys the repairs found (each key once per HIGH)."""
        from pyspark.sql import functions as sf

        keys = self.keys
        deletes = found[0]
        for more in found[1:]:
            deletes = deletes.unionByName(more)
        return deletes.dropDuplicates([*keys, "_high"]).select(
            *(sf.col(k) if k in keys else self.ctx.cast(sf.lit(None), self.types[k]).alias(k) for k in self.columns),
            sf.col("_high").alias("_lsn"),
            sf.lit(0).cast("bigint").alias("_order"),
            sf.lit("d").alias("_op"),
            sf.lit("repair").alias("_source"),
            sf.lit(None).cast("string").alias("_txid"),
            sf.col("_high_ts").alias("_commit_ts"),
            sf.col("_dump_id"),
            sf.col("_chunk").cast("int"),
            sf.lit(None).cast("array<string>").alias("_missing"),
        )

    # -- writing -------------------------------------------------------------------------------

    def _fields(self, table: str) -> list[Any]:
        """The table's columns, read once per run (after `_ensure_tables`, which is where they change):
        each read loads the table from the catalog and analyses a plan."""
        fields = self.schemas.get(table)
        if fields is None:
            fields = self.schemas[table] = list(self.ctx.spark.table(table).schema.fields)
        return fields

    def _aligned(self, frame: Any, table: str, extra: tuple[str, ...] = ()) -> Any:
        """`frame` with every column of the table, in its order and types (absent ones null),
        then the `extra` columns of the frame."""
        from pyspark.sql import functions as sf

        present = {c.lower(): c for c in frame.columns}
        out = []
        for f in self._fields(table):
            if f.name == "_applied_at":
                out.append(sf.lit(self.ctx.applied_at).cast("timestamp").alias(f.name))
            elif f.name.lower() in present:
                out.append(self.ctx.cast(sf.col(quote(present[f.name.lower()])), f.dataType).alias(f.name))
            else:
                out.append(self.ctx.cast(sf.lit(None), f.dataType).alias(f.name))
        return frame.select(*out, *extra)

    def _append_changelog(self, stream: Any, props: dict[str, str]) -> dict[str, int]:
        """Append the stream in one commit carrying `props`; the rows appended by `_source`, counted
        by the write itself (an observation, not a job of its own)."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as sf

        sources = ("log", "chunk", "repair")
        observation = Observation()
        rows = self._aligned(stream, self.changelog).observe(
            observation, *(sf.count_if(sf.col("_source") == s).alias(s) for s in sources)
        )
        commit_with(self.ctx.spark, props, lambda: rows.writeTo(self.changelog).append())
        counted = observation.get
        return {s: int(counted[s]) for s in sources}

    def _merge(self, stream: Any, props: dict[str, str]) -> None:
        from pyspark import StorageLevel
        from pyspark.sql import Window
        from pyspark.sql import functions as sf

        spark, keys = self.ctx.spark, self.keys
        # a target this run created is empty (one merge of a source at a time: merge.lock)
        first_load = not self.exists.get(self.target, True) or is_empty(spark, self.target)
        if first_load:
            # one shuffle serves both the latest event per key (the window below keeps Spark's range
            # partitioning by key) and the target's layout (files of narrow key ranges, sorted)
            partitions = max(1, min(LOAD_PARTITIONS, -(-self.rows_in // LOAD_ROWS_PER_FILE)))
            if partitions == 1:  # one task sorts it all: no shuffle (nor a stage and AQE's replanning after it)
                stream = stream.coalesce(1)
            else:
                stream = stream.repartitionByRange(partitions, *(sf.col(quote(k)) for k in keys))
        latest = stream.withColumn(
            "_rank",
            sf.row_number().over(Window.partitionBy(*keys).orderBy(sf.col("_lsn").desc(), sf.col("_order").desc())),
        )
        keep: dict[str, str] = {}  # column -> flag: no event of the run carries its value (keep the stored one)
        if self.has_missing:
            everything = (
                Window.partitionBy(*keys)
                .orderBy("_lsn", "_order")
                .rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
            )
            carried = sf.coalesce(sf.col("_missing"), sf.array().cast("array<string>"))
            for i, c in enumerate(c for c in self.columns if c not in keys):
                known = sf.last(sf.when(~sf.array_contains(carried, c), sf.struct(sf.col(quote(c)).alias("v"))), True)
                latest = latest.withColumn(f"_known{i}", known.over(everything))
                latest = latest.withColumn(c, sf.col(f"_known{i}.v")).withColumn(
                    f"_keep{i}", sf.col(f"_known{i}").isNull()
                )
                keep[c] = f"_keep{i}"
        latest = latest.where("_rank = 1")
        target_fields = self._fields(self.target)
        target_columns = [f.name for f in target_fields]
        source = self._aligned(latest, self.target, ("_op", *keep.values()))
        view = f"logtide_merge_source_{uuid.uuid4().hex}"  # the session's views are shared by the run's threads
        cols = ", ".join(quote(c) for c in target_columns)
        if first_load:  # nothing to match: a plain append, already distributed and sorted by key
            rows = source.where(sf.col("_op") != "d").select(*(quote(c) for c in target_columns))
            write = rows.writeTo(self.target).option("distribution-mode", "none")
            commit_with(spark, props, write.append)
        else:
            source = source.persist(StorageLevel.MEMORY_AND_DISK)  # read by the key filter, then the MERGE
            source.createOrReplaceTempView(view)
            try:
                # null-safe: a key part the landing zone could not hold lands as NULL (PostgreSQL's
                # numeric NaN, time 24:00), and that row's later events must still find it
                on = " AND ".join(f"t.{quote(k)} <=> s.{quote(k)}" for k in keys)
                pruning = key_filter(source, keys, {f.name: f.dataType for f in target_fields})
                self.report["key_filter"] = pruning is not None
                if pruning is not None:
                    on = f"{on} AND {pruning}"
                newer = "s._lsn > coalesce(t._lsn, -1)"

                def value(c: str) -> str:
                    flag = keep.get(c)
                    return f"CASE WHEN s.{flag} THEN t.{quote(c)} ELSE s.{quote(c)} END" if flag else f"s.{quote(c)}"

                updates = ", ".join(f"t.{quote(c)} = {value(c)}" for c in target_columns)
                values = ", ".join(f"s.{quote(c)}" for c in target_columns)
                sql = (
                    f"MERGE INTO {self.target} t USING {view} s ON {on} "
                    f"WHEN MATCHED AND {newer} AND s._op = 'd' THEN DELETE "
                    f"WHEN MATCHED AND {newer} THEN UPDATE SET {updates} "
                    f"WHEN NOT MATCHED AND s._op <> 'd' THEN INSERT ({cols}) VALUES ({values})"
                )
                commit_with(spark, props, lambda: spark.sql(sql))
            finally:
                spark.catalog.dropTempView(view)
                source.unpersist()
        self._report_snapshot()
