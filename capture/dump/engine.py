"""The DBLog chunk loop, written once for every source.

Per chunk of one table, in key order:
  1. read the settings (pause blocks here, cancel stops here);
  2. write and commit the LOW watermark;
  3. SELECT the next chunk in a fresh snapshot (`key > last ORDER BY key LIMIT n`, `last` the
     previous chunk's last key as the source spells it where the source gives it
     (`ChunkSource.chunk_end`: PostgreSQL, whose NaN lands as NULL), kept in the progress file
     for a resumed dump; a key-list dump selects the next batch of keys, and the database, not
     Python, tells which requested keys matched no row: see `_missing_keys`);
  4. write the chunk file (rows + watermark ids + key range) durably;
  5. write and commit the HIGH watermark: the log now says the chunk exists (`watermarks:
     readonly`: nothing is written to the source; LOW began a consistent snapshot whose log
     position the chunk file carries, ended before the file is written (`finish_reads`); HIGH
     reads the log's end, which lands in the chunk's HIGH file, and a HIGH the landed frontier
     passed before that file existed has the chunk read again (`_passed`):
     capture/sources/mysql/snapshot.py, capture/landing/chunks.py);
  6. describe the table again: if its columns changed since the SELECT (an ALTER anywhere up
     to HIGH), read the chunk again under the same number (also when the SELECT failed on a
     column dropped under it);
  7. record progress, log one line, throttle.
Refusals happen before anything is written: unknown tables, tables without a usable key,
keys of the wrong arity or type, a key range whose start comes after its end (compared by the
database, in the key columns' types and collations), a key the configuration names that cannot
be used, a table
another dump is dumping (the engine claims every table of the request first, all or nothing,
and checks the claim before each chunk; see capture.coordination.claims). A dump of every
captured table (no tables named) does not refuse a table it cannot handle (`UnusableTableError`:
no usable key, a named key that rows share, PostgreSQL: not in the publication): it skips it,
logs `dump.table_skipped` once with the reason and the fix, dumps the others, and lists the
skipped tables in its summary and record. A rerun with the same dump id resumes after the last
finished chunk; a chunk whose HIGH never committed is redone with new watermark ids.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, model_validator

from capture.config import CoordinationConfig
from capture.coordination.claims import DumpClaims
from capture.dump.control import Controller, ControlStore, DumpSettings
from capture.dump.gate import wait_for_outputs
from capture.dump.keys import coerce_key
from capture.dump.progress import ProgressStore, TableProgress
from capture.dump.record import DumpRecord
from capture.errors import (
    ChunkReadAgain,
    DumpCancelledError,
    DumpInputError,
    SourceConnectionError,
    UnusableTableError,
)
from capture.events import Row, TableSchema
from capture.landing import LandingZone
from capture.landing.chunks import ChunkMeta, write_chunk, write_chunk_high
from capture.landing.keys import encode_key, hashable
from capture.landing.reader import committed_frontier
from capture.log import get_logger
from capture.sources.base import ChunkSource, ReadView, Watermark

log = get_logger(__name__)
# a table whose columns changed this many times under one run of a dump stops it at the next change
# (`DumpEngine._changed_under`): each change reads chunks again, so it would never finish
MAX_CHANGES = 10
MISSING_KEYS_LOGGED = 10  # `dump.keys_missing` shows the first keys of a chunk, not all of them


def _progress(count: int, expected: int, done: bool, elapsed: float) -> tuple[float | None, float | None]:
    """Percent done and seconds to go, from the rows (or keys) so far against the estimate; both
    None (unknown) once a table that is not finished has passed its estimate."""
    if done:
        return 100.0, 0.0
    if count >= expected:
        return None, None
    part = count / expected
    return round(100 * part, 1), round(elapsed / part - elapsed, 1) if part > 0 else None


def _check_resumable(table: TableSchema, number: int, after: Row | None, rows: pa.StructArray, saved: bool) -> None:
    """A source that gives no key in its own spelling (`ChunkSource.chunk_end`) has the next chunk
    go on after this full chunk's last landed key, so that key must be one the database can
    compare: not NULL (`(k) > (NULL)` selects nothing and the dump would end without the rows
    after it), and past the key the previous chunk ended at, or the next SELECT would return it
    again for ever. MySQL/MariaDB refuse a NULL key (a zero date) when they read it, and their
    landed keys are their values, so this only fails closed should that ever change.
    `saved`: `after` is the key an earlier run saved, not a chunk's of this one. A source may go on
    after such a key from the lowest value its text can name (MariaDB: an ENUM's '' names its ''
    member and, in a landing zone written before the error value landed as ' ', the error value
    too), reading some rows again, so this chunk may end at it once; the next chunk goes on after
    this chunk's own end, and a collapse is caught there."""
    end = tuple(rows.field(k)[-1].as_py() for k in table.key)
    if None in end:
        raise DumpInputError(
            f"{table.qualified_name}: chunk {number} ends at key {encode_key(end)}, which lands as NULL "
            f"in key ({', '.join(table.key)}), so the next chunk could not go on after it"
        )
    if end == after and not saved:
        raise DumpInputError(
            f"{table.qualified_name}: chunk {number} ends at key {encode_key(end)}, as the chunk before it did: "
            f"more rows than chunk_size have key ({', '.join(table.key)}) values that land as that one value"
        )


class DumpRequest(BaseModel):
    """What to dump. Empty `tables`: every captured table."""

    model_config = ConfigDict(extra="forbid")

    dump_id: str = Field(
        default_factory=lambda: f"dump-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}",
        pattern=r"^[A-Za-z0-9_.:+-]{1,64}$",
    )
    tables: list[str] = Field(default_factory=list)
    keys: list[Any] | None = None
    key_from: Any = None
    key_to: Any = None
    settings: DumpSettings = DumpSettings()

    @model_validator(mode="after")
    def _one_table_for_keys(self) -> DumpRequest:
        for table in self.tables:
            if table.count(".") != 1:
                raise ValueError(f"table {table!r} must be given as 'database.table'")
        narrowed = self.keys is not None or self.key_from is not None or self.key_to is not None
        if narrowed and len(self.tables) != 1:
            raise ValueError("primary keys or a key range need exactly one table")
        if self.keys is not None and (self.key_from is not None or self.key_to is not None):
            raise ValueError("give either a list of primary keys or a key range, not both")
        if self.keys is not None and not self.keys:
            raise ValueError("the list of primary keys is empty")
        return self


@dataclass
class TableSummary:
    table: str
    chunks: int = 0
    rows: int = 0
    missing_keys: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        rate = self.rows / self.seconds if self.seconds else 0.0
        return {
            "table": self.table,
            "chunks": self.chunks,
            "rows": self.rows,
            "seconds": round(self.seconds, 3),
            "rows_per_s": round(rate, 1),
            "missing_keys": self.missing_keys,
        }


@dataclass
class _Plan:
    table: TableSchema
    keys: list[Row] | None
    start: Row | None
    stop: Row | None


@dataclass
class _Read:
    """What one chunk's SELECT returned."""

    rows: pa.StructArray
    view: ReadView | None
    last: bool  # the range or the key list is exhausted
    start: Row | None  # the range's start, on its first chunk
    keys: list[Row] | None  # key-list dumps: the keys asked for
    missing_keys: list[Row]  # of those, the ones no row has
    end: list[str] | None = None  # the last row's key as the source spells it (ChunkSource.chunk_end)
    clamped_keys: bool = False  # a key landed as another value (ChunkSource.clamped_keys)


def _advanced(
    progress: TableProgress, number: int, table: TableSchema, read: _Read, generation: str | None
) -> TableProgress:
    """The table's progress once chunk `number` is written and its HIGH committed."""
    if len(read.rows) and read.keys is None:
        after, after_source = tuple(read.rows.field(k)[-1].as_py() for k in table.key), read.end
    else:
        after, after_source = progress.after, progress.after_source
    return TableProgress(
        chunk=number,
        after=after,
        after_source=after_source,
        keys_done=progress.keys_done + (len(read.keys) if read.keys else 0),
        rows=progress.rows + len(read.rows),
        missing_keys=progress.missing_keys + len(read.missing_keys),
        done=read.last,
        whole=progress.whole,
        shape=_shape(table),
        generation=generation,
    )


def _read_some(progress: TableProgress) -> bool:
    """Whether chunks of this table were read since its start (or since it was last read again from it)."""
    return progress.after is not None or progress.keys_done > 0


def _restarted(progress: TableProgress) -> TableProgress:
    """The progress of a table read again from its start (its range's start, its key list's first key):
    chunk numbers and row counts go on, so no chunk file is replaced by a chunk of other rows."""
    return TableProgress(chunk=progress.chunk, rows=progress.rows, missing_keys=0, whole=progress.whole)


@dataclass(frozen=True)
class KeySignature:
    """The key the chunks are cut by, as far as a change of it makes the chunks so far useless for the
    rest of the dump: its columns, their source types and whether the database orders it exactly as the
    merge does. Another signature means rows may fall between the chunks read before and after (a key
    retyped int -> text orders '100' before '20'), and key lists and ranges name rows of the old one.
    `stale_changes` (a whole dump reads the table again) and `_refuse_rekeyed` (a key list or range
    stops) compare it; the other columns' changes are `stale_changes`' alone."""

    columns: tuple[str, ...]
    types: tuple[str | None, ...]
    exact_order: bool

    @classmethod
    def of(cls, table: TableSchema) -> KeySignature:
        types = {c.name: c.source_type for c in table.columns}
        return cls(tuple(table.key), tuple(types.get(k) for k in table.key), table.exact_key_order)

    def typed(self) -> str:
        """`id integer, v text`: the columns with their types, for messages."""
        return ", ".join(f"{name} {type_}" for name, type_ in zip(self.columns, self.types, strict=True))


def stale_changes(before: TableSchema, after: TableSchema, values: list[str] | None = None) -> list[str]:
    """What makes chunks read with `before` stale once the table is `after`: another key, key type or key
    order (the chunks so far were cut in another order: rows may fall between them), and columns whose
    values changed without row events (`values`, as the source judges it, ChunkSource.value_changes;
    None: every column added, renamed or retyped counts). A DDL that gives every row new values writes
    no row event, so only reading the rows again brings them. Columns only dropped are not: the target
    keeps them, as it keeps every column it saw."""
    old = {c.name: c.source_type for c in before.columns}
    new = {c.name: c.source_type for c in after.columns}
    found = []
    was, now = KeySignature.of(before), KeySignature.of(after)
    if was.columns != now.columns:
        found.append(f"key ({', '.join(before.key)}) is now ({', '.join(after.key)})")
    elif was != now:
        found.append(f"key ({', '.join(after.key)}) retyped or ordered another way")
    if values is None:
        added = [n for n in new if n not in old]
        if added:
            found.append(f"columns {', '.join(added)} added")
        retyped = [f"{n} {old[n]} -> {t}" for n, t in new.items() if n in old and old[n] != t]
        if retyped:
            found.append(f"columns retyped ({', '.join(retyped)})")
        if not found and before.catalog != after.catalog:  # a length, a charset, ENUM/SET members (MySQL)
            found.append("column definitions changed")
    return found + (values or [])


@dataclass
class DumpPlan:
    """The checked tables of a request, and (a dump of every captured table) those it skips."""

    tables: list[_Plan]
    skipped: list[UnusableTableError]


@dataclass(frozen=True)
class _ChunkReport:
    """What one chunk took, for `DumpEngine._report_chunk`."""

    rows: int
    window_ms: float  # LOW to HIGH and the checks after it
    rows_per_s: float  # the table's rate in this run so far
    elapsed_s: float
    outputs_wait_s: float


class DumpEngine:
    """`coordination`: with `kind: zookeeper` the table claims are ZooKeeper nodes as well as the
    landing zone's lock files (None: lock files only)."""

    def __init__(
        self,
        source: ChunkSource,
        zone: LandingZone,
        control: ControlStore | None = None,
        coordination: CoordinationConfig | None = None,
    ) -> None:
        self.source = source
        self.zone = zone
        self.control = control
        self.coordination = coordination
        self._folds: dict[str, tuple[str, ...]] = {}  # by table fingerprint: `ChunkSource.key_folds`
        self._generations: dict[str, str | None] = {}  # by table: the storage its chunks so far were read from
        self._changes: dict[str, int] = {}  # by table: column changes seen in this run (`_changed_under`)

    def plan(self, request: DumpRequest) -> DumpPlan:
        """Resolve and check every table and key before anything is written; with no tables named,
        skip (and log once) the captured tables that cannot be dumped."""
        self.source.check_keys()
        captured = {f"{s}.{t}" for s, t in self.source.tables()}
        names = request.tables or sorted(captured)
        if not names:
            raise DumpInputError("no tables to dump: the source's include/exclude patterns match none")
        plan = DumpPlan([], [])
        for name in names:
            try:
                plan.tables.append(self._plan_table(request, name, captured))
            except UnusableTableError as exc:
                if request.tables:
                    raise
                plan.skipped.append(exc)
                log.warning("dump.table_skipped", dump_id=request.dump_id, table=name, reason=exc.reason, fix=exc.fix)
        return plan

    def _plan_table(self, request: DumpRequest, name: str, captured: set[str]) -> _Plan:
        schema, _, table = name.partition(".")
        if name not in captured:
            with contextlib.suppress(UnusableTableError):  # it exists (else: does not exist), but is not captured
                self.source.describe(schema, table)
            raise DumpInputError(
                f"table {name} is not captured (the source's include/exclude patterns leave it out): "
                "its changes are not in the log, so a dump of it could not be reconciled"
            )
        described = self.source.describe(schema, table)
        keys = None
        if request.keys is not None:
            typed = self.source.landed_keys(described, [coerce_key(described, k) for k in request.keys])
            unique: dict[Row, Row] = {}
            for k in typed:
                unique.setdefault(hashable(k), k)
            keys = list(unique.values())
        start = None if request.key_from is None else coerce_key(described, request.key_from)
        stop = None if request.key_to is None else coerce_key(described, request.key_to)
        self.source.check_dumpable(described, start, stop)
        if start is not None and stop is not None and self.source.key_after(described, start, stop):
            raise DumpInputError(
                f"key range of {name} is empty: key_from {json.dumps(request.key_from)} comes after key_to "
                f"{json.dumps(request.key_to)} in the table's key order ({', '.join(described.key)}, as the "
                "database compares them); give the lower key as key_from (--from)"
            )
        return _Plan(described, keys, start, stop)

    def run(self, request: DumpRequest) -> dict[str, Any]:
        plan = self.plan(request)
        plans = plan.tables
        names = [p.table.qualified_name for p in plans]
        skipped = [exc.as_dict() for exc in plan.skipped]
        with DumpClaims(self.zone, self.coordination) as claims:
            # refuses before any watermark is written; a refused dump is told how to cancel this one
            claims.acquire(names, request.dump_id, getattr(self.control, "cancel_instruction", ""))
            self.source.setup()
            self._check_same_server()
            controller = Controller(request.settings, self.control, request.dump_id)
            record = DumpRecord(self.zone, request.dump_id)
            record.start(names, skipped)
            log.info("dump.started", dump_id=request.dump_id, tables=len(plans), skipped=len(skipped))
            summaries = []
            try:
                for p in plans:
                    summaries.append(self._dump_table(request.dump_id, p, controller, claims, record).as_dict())
                    claims.release(p.table.qualified_name)  # done: another dump may take it now
            except DumpCancelledError as exc:
                record.finish("cancelled", str(exc))
                raise
            except BaseException as exc:
                record.finish("failed", f"{type(exc).__name__}: {exc}")
                raise
            record.finish("finished")
        total = sum(s["rows"] for s in summaries)
        log.info(
            "dump.finished",
            dump_id=request.dump_id,
            tables=len(plans),
            rows=total,
            skipped=",".join(s["table"] for s in skipped) or "none",
        )
        return {"dump_id": request.dump_id, "rows": total, "tables": summaries, "skipped": skipped}

    def _dump_table(
        self, dump_id: str, plan: _Plan, controller: Controller, claims: DumpClaims, record: DumpRecord
    ) -> TableSummary:
        table = plan.table
        name = table.qualified_name
        store = ProgressStore(self.zone, dump_id)
        progress = store.load(table.schema, table.table)
        summary = TableSummary(name, progress.chunk, progress.rows)
        if not progress.done:  # whole: this run reads it all, and so did every earlier run of this dump
            whole = plan.keys is None and plan.start is None and plan.stop is None
            progress = replace(progress, whole=whole and (progress.whole or not progress.chunk))
        if progress.done:
            log.info("dump.table_already_complete", dump_id=dump_id, table=name, chunks=progress.chunk)
            record.table(name, chunks=progress.chunk, rows=progress.rows, percent=100.0, eta_s=0.0, done=True)
            return summary
        # the table's generation now, which the chunks of this run are read from (a resumed run first compares
        # it with its progress file's: `_changed_while_stopped`)
        self._generations[name] = self._generation(table)
        if progress.chunk:
            log.info("dump.table_resumed", dump_id=dump_id, table=name, after_chunk=progress.chunk)
            if _read_some(progress) and (why := self._changed_while_stopped(progress, table)):
                progress = self._restart(dump_id, table, progress.chunk + 1, progress, why, resumed=True)
        expected = len(plan.keys) if plan.keys is not None else max(self.source.estimate_rows(table), 1)
        began, rows_at_start = time.monotonic(), progress.rows
        outputs_wait_s = 0.0
        resumed_at = progress.chunk + 1 if progress.chunk else None
        while not progress.done:
            settings = controller.next_chunk()
            claims.check(name)
            chunk_began = time.monotonic()
            progress, table, rows_read = self._chunk(dump_id, plan, table, progress, settings, resumed_at)
            store.save(table.schema, table.table, progress)
            if not progress.done:  # real-time outputs (capture/dump/gate.py): not too far ahead of them
                outputs_wait_s += wait_for_outputs(
                    self.zone, dump_id, name, progress.chunk, settings.chunk_size, partial(record.waiting, name)
                )
            summary.chunks, summary.rows = progress.chunk, progress.rows
            summary.seconds, summary.missing_keys = time.monotonic() - began, progress.missing_keys
            rate = (progress.rows - rows_at_start) / summary.seconds if summary.seconds else 0.0
            window_ms = (time.monotonic() - chunk_began) * 1000
            report = _ChunkReport(rows_read, window_ms, rate, summary.seconds, outputs_wait_s)
            self._report_chunk(dump_id, plan, name, progress, settings.chunk_size, expected, report, record)
            self._throttle(settings, rows_read, time.monotonic() - chunk_began)
        log.info(
            "dump.table_finished",
            dump_id=dump_id,
            table=name,
            chunks=progress.chunk,
            rows=progress.rows,
            missing_keys=progress.missing_keys,
            seconds=round(summary.seconds, 3),
        )
        return summary

    def _report_chunk(
        self,
        dump_id: str,
        plan: _Plan,
        name: str,
        progress: TableProgress,
        chunk_size: int,
        expected: int,
        report: _ChunkReport,
        record: DumpRecord,
    ) -> None:
        """A chunk done, for the user: the `dump.chunk` log line and the dump's record (what
        `logtide dump status` and the Airflow task show), with percent and ETA."""
        done = progress.keys_done if plan.keys is not None else progress.rows
        percent, eta = _progress(done, expected, progress.done, report.elapsed_s)
        of_about = None if percent is None else max(progress.chunk, -(-expected // chunk_size))
        rows_per_s = round(report.rows_per_s, 1)
        log.info(
            "dump.chunk",
            dump_id=dump_id,
            table=name,
            chunk=progress.chunk,
            of_about=of_about,
            rows=report.rows,
            window_ms=round(report.window_ms, 1),
            rows_per_s=rows_per_s,
            percent=percent,
            eta_s=eta,
        )
        record.table(
            name,
            chunks=progress.chunk,
            of_about=of_about,
            rows=progress.rows,
            percent=percent,
            rows_per_s=rows_per_s,
            eta_s=eta,
            done=progress.done,
            outputs_wait_s=round(report.outputs_wait_s, 1),
            waiting_for_outputs=None,
        )

    def _chunk(
        self,
        dump_id: str,
        plan: _Plan,
        table: TableSchema,
        progress: TableProgress,
        settings: DumpSettings,
        resumed_at: int | None = None,
    ) -> tuple[TableProgress, TableSchema, int]:
        """One chunk: LOW, the SELECT, the chunk file, HIGH; again under the same number when the
        table's schema (or its key's collation) changed under the SELECT. `resumed_at`: the first
        chunk this run reads of a table an earlier run began (it goes on after that run's saved key)."""
        number = progress.chunk + 1
        name = table.qualified_name
        while True:
            low = Watermark(dump_id, table.qualified_name, number, "LOW", str(uuid.uuid4()))
            high = Watermark(dump_id, table.qualified_name, number, "HIGH", str(uuid.uuid4()))
            self.source.write_watermark(low)
            low_lsn = self.source.log_position()
            try:
                read = self._read(plan, table, progress, settings.chunk_size)
            except (SourceConnectionError, DumpCancelledError):
                raise
            except ChunkReadAgain as exc:
                log.warning("dump.chunk_read_again", dump_id=dump_id, table=table.qualified_name, chunk=number,
                            reason=str(exc), action="chunk read again from a new LOW")  # fmt: skip
                continue
            except Exception:  # a column the SELECT names may have been dropped under it
                current = self._describe_again(dump_id, table, number)
                if not _changed(table, current):
                    raise
                table, progress = self._schema_changed(plan, dump_id, table, current, number, progress)
                continue
            if read.keys is None and not read.last and read.end is None:
                _check_resumable(table, number, progress.after, read.rows, number == resumed_at)
            meta = self._chunk_meta(dump_id, plan, table, progress, number, (low, high, low_lsn), read)
            self.source.finish_reads()
            path = write_chunk(self.zone, table, meta, read.rows)
            self.source.write_watermark(high, table)
            if self._late_high(dump_id, path, meta):
                continue
            # After HIGH: a schema change the log places before HIGH is visible now, and the rows
            # read with the old columns must not stand at HIGH. The chunk is read again under the
            # same number; its file is replaced and the first HIGH names no chunk any more. So is a
            # chunk read while the key's collation changed (the merge trusts `exact_order`).
            current = self._describe_again(dump_id, table, number)
            if _changed(table, current) or KeySignature.of(current) != KeySignature.of(table):
                table, progress = self._schema_changed(plan, dump_id, table, current, number, progress)
                continue
            if not self._rewritten(current):
                break
            if _read_some(progress):  # the same columns, rewritten: the chunks read before are stale
                progress = self._restart(dump_id, table, number, progress, "its columns were rewritten")
            else:
                self._changed_under(dump_id, table, number, "its columns were rewritten: the chunk is read again")
        self._log_missing_keys(dump_id, table, number, read.missing_keys)
        return _advanced(progress, number, table, read, self._generations.get(name)), table, len(read.rows)

    def _chunk_meta(
        self,
        dump_id: str,
        plan: _Plan,
        table: TableSchema,
        progress: TableProgress,
        number: int,
        window: tuple[Watermark, Watermark, int | None],
        read: _Read,
    ) -> ChunkMeta:
        """What the chunk file says about itself: its watermarks, key bounds, what the read saw."""
        low, high, low_lsn = window
        return ChunkMeta(
            dump_id=dump_id,
            table=table.qualified_name,
            chunk=number,
            low_id=low.id,
            high_id=high.id,
            key=table.key,
            after=progress.after,
            start=read.start,
            stop=plan.stop,
            last=read.last,
            keys=None if read.keys is None else tuple(read.keys),
            rows=len(read.rows),
            read_view=read.view,
            exact_order=_exact_order(table, (progress.after, read.start, plan.stop), read.rows),
            low_lsn=low_lsn,
            clamped_keys=read.clamped_keys,
            key_folds=None if read.keys is None else self._key_folds(table),
        )

    def _late_high(self, dump_id: str, path: Path, meta: ChunkMeta) -> bool:
        """Read-only watermarks: HIGH is the log position after the chunk file, landed as a HIGH
        file. True when capture landed past it before that file was written (the chunk is read
        again); False at once for table watermarks (HIGH is a row in the log)."""
        high_lsn = self.source.log_position()
        if high_lsn is None:
            return False
        high_lsn = self.source.place_high(high_lsn, committed_frontier(self.zone))
        write_chunk_high(path, meta, high_lsn)
        if not self._passed(high_lsn):
            return False
        log.warning(
            "dump.chunk_late",
            dump_id=dump_id,
            table=meta.table,
            chunk=meta.chunk,
            action="capture landed past HIGH before its file was written: chunk read again",
        )
        return True

    def _read(self, plan: _Plan, table: TableSchema, progress: TableProgress, size: int) -> _Read:
        """The chunk's SELECT after its LOW: the next `size` keys of a key list, or the next `size`
        rows of the key range; with what the read could see (ChunkSource.read_view)."""
        start = plan.start if progress.after is None else None
        if plan.keys is None:
            rows = self.source.select_chunk(table, progress.after, start, plan.stop, size, progress.after_source)
            end = self.source.chunk_end() if len(rows) else None
            clamped = self.source.clamped_keys()
            return _Read(rows, self.source.read_view(), len(rows) < size, start, None, [], end, clamped)
        keys = plan.keys[progress.keys_done : progress.keys_done + size]
        rows = self.source.select_keys(table, keys)
        view, clamped = self.source.read_view(), self.source.clamped_keys()  # the chunk's: `_missing_keys` reads again
        last = progress.keys_done + len(keys) >= len(plan.keys)
        return _Read(rows, view, last, start, keys, self._missing_keys(table, keys, rows), clamped_keys=clamped)

    def _log_missing_keys(self, dump_id: str, table: TableSchema, number: int, missing_keys: list[Row]) -> None:
        if not missing_keys:
            return
        shown = [encode_key(k) for k in missing_keys[:MISSING_KEYS_LOGGED]]
        log.info(
            "dump.keys_missing",
            dump_id=dump_id,
            table=table.qualified_name,
            chunk=number,
            count=len(missing_keys),
            first=json.dumps([k[0] if len(k) == 1 else k for k in shown], separators=(",", ":")),
            note="the merge deletes them from the target",
        )

    def _check_same_server(self) -> None:
        """Read-only watermarks place chunks by positions in the binlog of the server the dump reads,
        against capture's frontier in the binlog capture reads: refuse when capture's checkpoint
        says it reads another server (a replica and its primary, two replicas, a load balancer
        that sent the two connections to different servers; an Airflow connection whose host is
        not capture's). A checkpoint that names no server (written before capture recorded it, or
        none yet) cannot be checked."""
        ours = self.source.server_identity()
        checkpoint = self.zone.checkpoint() if ours is not None else None
        theirs = checkpoint.resume.get("server") if checkpoint is not None else None
        if ours is not None and theirs is not None and theirs != ours:
            raise DumpInputError(
                f"watermarks: readonly: this dump reads {ours}, but capture's checkpoint was read from {theirs}: "
                "binlog positions of two servers do not compare, so the chunks could not be placed in capture's "
                "log; point the dump and capture at the same server (the source's host and port)"
            )

    def _key_folds(self, table: TableSchema) -> tuple[str, ...]:
        """How the database compares the key columns (`ChunkSource.key_folds`), asked once per table schema."""
        found = self._folds.get(table.fingerprint)
        if found is None:
            found = self._folds[table.fingerprint] = tuple(self.source.key_folds(table))
        return found

    def _passed(self, high_lsn: int) -> bool:
        """Whether the landed frontier is past a read-only HIGH that was just written. A merge takes
        the chunks whose HIGH is below its frontier: one that read a frontier past HIGH before the
        HIGH file existed would skip the chunk for good. A frontier still at or below HIGH now
        proves no merge could have (the frontier only grows), so only a chunk whose file write
        was overtaken (a stalled dump: capture lands a commit ~0.1 s after it) is read again."""
        frontier = committed_frontier(self.zone)
        return frontier is not None and frontier > high_lsn

    def _missing_keys(self, table: TableSchema, batch: list[Row], rows: pa.StructArray) -> list[Row]:
        """The requested keys that no returned row equals, as the database compares them: under a
        case-insensitive or PAD SPACE collation 'abc' selects the row 'ABC'. Keys found as they
        were written are found; integer keys compare alike in Python and SQL, and with no row
        returned nothing can match, so only the rest is put to the database (`_unmatched`)."""
        returned = {hashable(k) for k in zip(*(rows.field(k).to_pylist() for k in table.key), strict=True)}
        unmatched = [k for k in batch if hashable(k) not in returned]
        types = {c.name: c.arrow_type for c in table.columns}
        if not unmatched or not returned or all(pa.types.is_integer(types[k]) for k in table.key):
            return unmatched
        return self._unmatched(table, unmatched, returned)

    def _unmatched(self, table: TableSchema, keys: list[Row], returned: set[Row]) -> list[Row]:
        """Ask the database which of `keys` select one of the `returned` rows: a group whose SELECT
        gives none of them is missing as a whole, else it is halved. One SELECT when every key is
        truly missing, about 2 log2(n) per key that matched under another spelling. It runs inside
        the chunk's window, so a row changed since the chunk's SELECT has a log event there."""
        rows = self.source.select_keys(table, keys)
        if not returned & {hashable(k) for k in zip(*(rows.field(k).to_pylist() for k in table.key), strict=True)}:
            return keys
        if len(keys) == 1:
            return []
        half = len(keys) // 2
        return self._unmatched(table, keys[:half], returned) + self._unmatched(table, keys[half:], returned)

    def _schema_changed(
        self,
        plan: _Plan,
        dump_id: str,
        table: TableSchema,
        current: TableSchema,
        number: int,
        progress: TableProgress,
    ) -> tuple[TableSchema, TableProgress]:
        """The chunk is read again with the table's new schema; when the change makes the chunks this dump
        already wrote stale (`stale_changes`), the table is read again from its start."""
        _refuse_rekeyed(plan, table, current)
        log.info(
            "dump.schema_changed",
            dump_id=dump_id,
            table=table.qualified_name,
            chunk=number,
            columns=list(current.names),
            action="chunk discarded and read again with the new columns",
        )
        rewritten = self._rewritten(current)  # a USING on a column that also changed shows only here
        if _read_some(progress):
            judge = getattr(self.source, "value_changes", None)
            stale = stale_changes(table, current, None if judge is None else judge(table, current))
            stale += ["columns rewritten"] if rewritten and not stale else []
            if stale:
                return current, self._restart(dump_id, current, number, progress, "; ".join(stale))
        self._changed_under(dump_id, current, number, "its columns changed: the chunk is read again")
        return current, progress

    def _changed_under(self, dump_id: str, table: TableSchema, number: int, what: str) -> None:
        """Counts the changes of a table's columns that made this run read chunks again (one chunk, or the
        table from its start); the MAX_CHANGES + 1st stops the dump (the chunks so far stand). A count, not a
        rate: a table altered again and again may never finish, and a run that met more than MAX_CHANGES
        such changes has reread much of it already; the rerun by id starts a new count."""
        name = table.qualified_name
        seen = self._changes[name] = self._changes.get(name, 0) + 1
        if seen > MAX_CHANGES:
            raise DumpInputError(
                f"{name} changed under dump {dump_id} {seen} times in this run, the last at chunk {number} ({what}); "
                "each time chunks were read again, from the table's start when the change gave rows values no row "
                "event carries: a table whose columns keep changing may never finish. The "
                f"chunks written so far stand; run the dump again with --dump-id {dump_id} once the DDL has stopped "
                "(it goes on from where it is)"
            )

    def _changed_while_stopped(self, progress: TableProgress, table: TableSchema) -> str | None:
        """Why the chunks an earlier run of this dump read may be stale now, None if they are not: the table's
        shape is not the one its progress file recorded, or its columns were rewritten (the generation), or
        the file, written by an older version, lacks what tells (no shape, no generation or one in an
        earlier format: the table may have changed while the dump was stopped, and no row event says so)."""
        unknown = "the dump cannot tell whether the table changed while the dump was stopped"
        if progress.shape is None:
            return f"its progress file records no shape (written by an older version): {unknown}"
        if progress.shape != _shape(table):
            return "the table changed while the dump was stopped: its columns are not the ones its earlier chunks read"
        now = self._generations[table.qualified_name]
        if now is None:  # a source without generations
            return None
        if _tokens(progress.generation) is None:
            return f"its progress file records no generation, or one in an older format (an older version): {unknown}"
        if _rewritten(progress.generation, now):
            return "the table changed while the dump was stopped: columns its earlier chunks read were rewritten"
        return None

    def _rewritten(self, current: TableSchema) -> bool:
        """Whether a column the chunks so far were read with was written again since (`_rewritten`), and note
        the table's generation now."""
        name = current.qualified_name
        before, after = self._generations.get(name), self._generation(current)
        self._generations[name] = after
        return _rewritten(before, after)

    def _generation(self, table: TableSchema) -> str | None:
        """The table's storage generation (ChunkSource.generation), None where the source has none."""
        generation = getattr(self.source, "generation", None)
        return None if generation is None else generation(table)

    def _restart(
        self, dump_id: str, table: TableSchema, number: int, progress: TableProgress, why: str, resumed: bool = False
    ) -> TableProgress:
        """`resumed`: `why` is the whole reason (`_changed_while_stopped`), not a change seen during this run."""
        what = why if resumed else f"the table changed during the dump ({why})"
        self._changed_under(dump_id, table, number, what)
        log.warning(
            "dump.table_restarted",
            dump_id=dump_id,
            table=table.qualified_name,
            chunk=number,
            reason=f"{what}: PostgreSQL and MySQL log no row for a change that gives rows new values, "
            "so the rows its earlier chunks read could stand in the targets with their old values",
            action="the table is read again from its start (chunk numbers go on)",
        )
        return _restarted(progress)

    def _describe_again(self, dump_id: str, table: TableSchema, number: int) -> TableSchema:
        """The table as the catalog shows it now; a table that went away under the dump (DROP TABLE,
        RENAME TABLE; TRUNCATE is not one) or lost its key (DROP PRIMARY KEY) stops it, saying so."""
        try:
            return self.source.describe(table.schema, table.table)
        except UnusableTableError as exc:
            raise DumpInputError(
                f"{table.qualified_name} lost its key during dump {dump_id}, at chunk {number}: {exc}. The chunks "
                "written so far stand; dump the table again once it has a key"
            ) from None
        except DumpInputError as exc:
            raise DumpInputError(
                f"{table.qualified_name} went away during dump {dump_id}, at chunk {number} ({exc}): it was dropped "
                "or renamed (capture lands that as a truncate of the name, or stops at a rename into another captured "
                "name: table_renames). The chunks written so far stand; dump the table under the name it has now"
            ) from None

    @staticmethod
    def _throttle(settings: DumpSettings, rows: int, elapsed: float) -> None:
        pause = settings.delay_s
        if settings.max_rows_per_s:
            pause = max(pause, rows / settings.max_rows_per_s - elapsed)
        if pause > 0:
            time.sleep(pause)


def _refuse_rekeyed(plan: _Plan, table: TableSchema, current: TableSchema) -> None:
    """A key list or a key range names rows by the table's key: when the key changed under the dump
    (`DROP PRIMARY KEY, ADD PRIMARY KEY (...)`, a key column retyped or ordered another way) the dump
    stops, saying so. A dump of the whole table reads it again from its start (`stale_changes`)."""

    was, now = KeySignature.of(table), KeySignature.of(current)
    if was.columns != now.columns:
        what = f"from ({', '.join(table.key)}) to ({', '.join(current.key)})"
    elif was != now:
        order = "" if was.exact_order == now.exact_order else ", ordered another way"
        what = f"from ({was.typed()}) to ({now.typed()}{order})"
    else:
        return
    if plan.keys is not None or plan.start is not None or plan.stop is not None:
        raise DumpInputError(
            f"the key of {table.qualified_name} changed during the dump, {what}: the keys or the key range this dump "
            "was given name rows by the old key; the chunks written so far stand, dump the table again "
            "(a new dump id) with keys of the new key, or all of it"
        )


def _tokens(generation: str | None) -> dict[str, str] | None:
    """A generation's token per column (ChunkSource.generation: a JSON object); None where there is none or
    it is in an earlier format (a progress file of an older version: relfilenodes, `name:xmin,...`)."""
    try:
        tokens = json.loads(generation) if generation is not None else None
    except ValueError:
        return None
    return tokens if isinstance(tokens, dict) else None


def _rewritten(before: str | None, after: str | None) -> bool:
    """Whether a column both generations hold was written again between them. Columns added or dropped
    are judged by `stale_changes`; a source without generations (both None) never says so, and one that
    cannot be read (None beside one, an earlier format) says so, to be safe."""
    if before is None and after is None:
        return False
    old, new = _tokens(before), _tokens(after)
    if old is None or new is None:
        return True
    return any(old[column] != token for column, token in new.items() if column in old)


def _shape(table: TableSchema) -> str:
    """The table's columns as `_changed` compares them, kept in the progress file for a resumed dump."""
    return f"{table.fingerprint}/{table.catalog}"


def _changed(table: TableSchema, current: TableSchema) -> bool:
    """Whether the table's columns or key changed: the fingerprint (names, types, key), or the source's
    whole catalog definitions (`TableSchema.catalog`: a VARCHAR's length, a charset, ENUM members)."""
    return _shape(current) != _shape(table)


def _exact_order(table: TableSchema, bounds: tuple[Row | None, ...], rows: pa.StructArray) -> bool:
    """Whether the merge may judge this chunk's key range with Spark's order: the source says the
    key orders exactly (`TableSchema.exact_key_order`), and no bound or returned key is NULL (a
    value the landing zone cannot hold, such as PostgreSQL's numeric NaN, lands as NULL and
    would sort first in Spark where the database sorts it elsewhere)."""
    if not table.exact_key_order:
        return False
    if any(v is None for bound in bounds if bound is not None for v in bound):
        return False
    return all(rows.field(k).null_count == 0 for k in table.key)
