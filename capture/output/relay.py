"""The output relay: follows a source's committed landing zone, interleaves dump chunks with the log
(capture/output/interleave.py) and delivers the stream to one output, at least once, in order.

Its acknowledged position (capture/output/landing.py, `Position`) is written atomically after every
acknowledged delivery: (lsn, order) of the last acknowledged message and `replay_from`, where reading must
start again to rebuild the dump windows open at that message. After any crash (of the relay or of capture)
the relay reads from `replay_from`, skips every message up to (lsn, order), and sends the rest: nothing is
lost, the order is the log's, and the only duplicates are messages sent but not yet acknowledged.
"""

from __future__ import annotations

import fcntl
import fnmatch
import gc
import importlib
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from capture.config import OutputConfig
from capture.dump.gate import high_key
from capture.errors import LockHeldError, OutputError
from capture.landing import LandingZone
from capture.landing.files import write_json_atomic
from capture.log import get_logger
from capture.output.formats import ArrowEncoder, Encoder, Message
from capture.output.interleave import Event, Interleaver
from capture.output.landing import (
    LandingReader,
    Position,
    ReadonlyChunks,
    position_path,
    read_position,
    write_position,
)
from capture.output.sinks import Output
from capture.sources.base import WATERMARK_SCHEMA, WATERMARK_TABLE

if TYPE_CHECKING:
    from capture.output.metrics import RelayMetrics

log = get_logger(__name__)

IDLE_POSITION_S = 5.0  # how often an idle relay records that it read further (a shorter replay)
STATE_EVERY_S = 2.0  # a live relay rewrites its state at least this often (gate.LIVE_S tells a dead one)
KEEP_HIGHS = 1000  # dump tables whose last delivered chunk the state remembers
READ_ROWS = 20_000
# the cyclic GC's youngest generation is collected every this many allocations (Python's default: 700). The
# relay holds up to READ_ROWS events and a batch of messages at once, all acyclic and freed by their counts,
# which the default threshold traverses again and again: about 15% of the relay's CPU (benchmarks/relay_replay.py)
GC_THRESHOLD = 50_000
# how long a thread holding the GIL keeps it while another waits (Python's default: 5 ms). nats-py's event loop
# (its own thread) must take the GIL to read a fast-ingest batch's flow acknowledgements and write the frames
# they allow; while the relay's thread encodes, it waited up to 5 ms each time, and JetStream, at most two flow
# acknowledgements (1,000 messages) ahead, ran dry meanwhile (README Outputs, "The GIL switch interval")
SWITCH_INTERVAL_S = 0.0005


Transform = Callable[[Event], "Event | None"]


def load_transforms(name: str, config: OutputConfig) -> list[tuple[str, Transform]]:
    """The output's enrichment hooks, imported now: a missing module or function stops it before it starts."""
    hooks = []
    for pattern, target in config.transforms.items():
        module_name, _, function = target.partition(":")
        try:
            hook = getattr(importlib.import_module(module_name), function)
        except (ImportError, AttributeError) as exc:
            raise OutputError(f"output {name!r}: transform {target!r} for {pattern} cannot be loaded: {exc}") from None
        if not callable(hook):
            raise OutputError(f"output {name!r}: transform {target!r} for {pattern} is not callable")
        hooks.append((pattern, hook))
    return hooks


@contextmanager
def output_lock(zone: LandingZone, name: str) -> Iterator[None]:
    path = position_path(zone, name).with_name("relay.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 - held for the life of the context
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LockHeldError(f"another relay is running output {name!r} of source {zone.source!r}") from None
        yield
    finally:
        handle.close()


class Relay:
    def __init__(
        self,
        zone: LandingZone,
        kind: str,
        name: str,
        config: OutputConfig,
        output: Output,
        database: str | None = None,
        metrics: RelayMetrics | None = None,
        readonly: bool = False,
    ) -> None:
        self.zone, self.kind, self.name, self.config, self.output = zone, kind, name, config, output
        self.metrics = metrics
        self.database = database  # PostgreSQL: the source's database (Debezium's source.db)
        self.transforms = load_transforms(name, config)
        self._included: dict[tuple[str, str], bool] = {}
        # dump/table -> last chunk whose HIGH and rows this output had acknowledged (read by capture/dump/gate.py)
        self._highs: OrderedDict[str, int] = OrderedDict()
        # (LSN, dump/table, chunk) of the HIGHs read whose rows are not all acknowledged yet
        self.undelivered_highs: deque[tuple[int, str, int]] = deque()
        self.state_name = "delivering"
        self.state_written = 0.0
        self._state_details: dict[str, object] = {}
        self.reader = LandingReader(zone, config.includes)
        if config.format == "logtide":  # written from the landing files' columns where no hook changes them
            self.reader.encoder = ArrowEncoder(zone.source)
            self.reader.encoded = self._arrow_encoded
        # `watermarks: readonly`: chunks found by their HIGH files, not by watermark rows in the log
        self.readonly = readonly
        self.delivered = 0
        self.retries = 0
        self.position: Position | None = None
        self._pending: list[tuple[Message, int]] = []  # a message and where a replay must start to send it again
        self.caught_up = False  # everything landed is read (and, with nothing pending, delivered)
        self.acked_commit_ts: float | None = None  # source commit time of the last acknowledged message
        # pipelined outputs (NATS) send a batch and collect its acknowledgements when the next is ready
        send = getattr(output, "send", None)
        self._pipelined = callable(send) and config.batch_size <= getattr(output, "window", 0)
        # the windows at the start of pending that are sent, their acknowledgements not collected: sizes, oldest first
        self._windows: deque[int] = deque()
        self._inflight = 0  # their messages together

    def _initial(self) -> Position:
        position = read_position(self.zone, self.name)
        if position is not None:
            log.info("output.resuming", output=self.name, lsn=position.lsn, order=position.order)
            return position
        if self.config.start == "beginning":
            log.info("output.first_start", output=self.name, start="beginning")
            return Position(-1, 0, 0)
        frontier = self.reader.frontier()
        replay = self.reader.open_windows_before(frontier)
        log.info("output.first_start", output=self.name, start="checkpoint", frontier=frontier, replay_from=replay)
        return Position(frontier - 1, 1 << 62, replay)

    def run(self, stop: threading.Event) -> None:
        threshold = gc.get_threshold()
        if threshold[0] < GC_THRESHOLD:  # process-wide: the relay's process runs relays only
            gc.set_threshold(GC_THRESHOLD, *threshold[1:])
        if sys.getswitchinterval() > SWITCH_INTERVAL_S:  # process-wide too
            sys.setswitchinterval(SWITCH_INTERVAL_S)
        with output_lock(self.zone, self.name):
            try:
                self._run(stop)
                if self._windows:  # stopped: what is acknowledged of the batches in flight is not sent again
                    self._collect_all(self._pending)
            finally:
                self.output.close()

    def _run(self, stop: threading.Event) -> None:
        position = self.position = self._initial()
        self._state("delivering")
        self.delivered = position.delivered
        acked = (position.lsn, position.order)
        # the look-back serves PostgreSQL's visibility rule only (MySQL/MariaDB chunks have no read view)
        lookback = self.config.lookback if self.kind == "postgresql" else 0
        interleaver = Interleaver(self.reader.load_chunk, self.config.window_timeout_s, lookback)
        if getattr(self.output, "event_images", True) is False:  # the events it may keep come with their images
            self.reader.collecting = interleaver.collecting
        encode = Encoder(self.config.format, self.zone.source, self.kind, self.database)
        read_at = position.replay_from
        pending = self._pending
        last_written = time.monotonic()
        readonly = ReadonlyChunks(self.zone, self.config.includes, self.config.lookback) if self.readonly else None
        acked_lsn, acked_order = acked
        push, replay_from, queue = interleaver.push, interleaver.replay_from, self._queue
        while not stop.is_set():
            frontier = self.reader.frontier()
            self.caught_up = read_at >= frontier
            if readonly is not None and not self.caught_up:
                readonly.scan(read_at, frontier)  # before any event below the frontier is read
            if time.monotonic() - self.state_written > STATE_EVERY_S:  # alive, for dumps and /health
                self._state(self.state_name, **self._state_details)
            if self.caught_up:
                if pending:
                    self._deliver(pending, stop)
                elif time.monotonic() - last_written > IDLE_POSITION_S and read_at - 1 > self.position.lsn:
                    # everything below read_at is delivered or was nothing to deliver
                    self._save(Position(read_at - 1, 1 << 62, interleaver.replay_from(read_at), self.delivered))
                    last_written = time.monotonic()
                stop.wait(self.config.poll_interval_s)
                continue
            events, messages, read_at = self.reader.read_encoded(read_at, frontier, READ_ROWS)
            for event, message in zip(events, messages, strict=True):
                if (
                    readonly is not None
                    and (high := readonly.next_high()) is not None
                    and high < event.lsn
                    and not self._readonly_due(readonly, event.lsn, frontier, interleaver, acked, encode, stop)
                ):
                    return
                replay = replay_from(event.lsn)
                for out in push(event):
                    lsn = out.lsn  # past the acknowledged position (`out.position > acked`, without the tuples)
                    if (lsn > acked_lsn or (lsn == acked_lsn and out.order > acked_order)) and not queue(
                        out, replay, encode, stop, message if out is event else None
                    ):
                        return
                if event.schema == WATERMARK_SCHEMA and event.table == WATERMARK_TABLE:
                    mark = event.after
                    if mark is not None and mark["kind"] == "HIGH":  # after its rows are pending
                        key = high_key(mark["dump_id"], mark["table_name"])
                        self.undelivered_highs.append((event.lsn, key, int(mark["chunk"])))
            if readonly is not None and not self._readonly_due(
                readonly, read_at, frontier, interleaver, acked, encode, stop
            ):
                return
            if len(pending) > self._inflight:
                self._send(pending, stop)  # pipelined, it goes out while the next files are read
            self._acked_highs(pending)
            last_written = time.monotonic()

    def _readonly_due(
        self,
        readonly: ReadonlyChunks,
        before: int,
        frontier: int,
        interleaver: Interleaver,
        acked: tuple[int, int],
        encode: Encoder,
        stop: threading.Event,
    ) -> bool:
        """The surviving rows of the read-only chunks whose HIGH is below `before` (every log event up to
        their HIGH is pending or delivered, none after it), pending in HIGH order; False on stop."""
        for chunk in readonly.due(before):
            loaded = readonly.load(chunk, frontier)
            meta = chunk.meta
            if loaded is None:
                log.info("output.chunk_superseded", dump_id=meta.dump_id, table=meta.table, chunk=meta.chunk)
                continue
            meta, rows, events, first = loaded
            replay = interleaver.replay_from(chunk.high)
            for out in interleaver.readonly_chunk(meta, rows, chunk.low, chunk.high, chunk.high_ts, events, first):
                if out.position > acked and not self._queue(out, replay, encode, stop):
                    return False
            self.undelivered_highs.append((chunk.high, high_key(meta.dump_id, meta.table), meta.chunk))
        return True

    def _queue(
        self, event: Event, replay: int, encode: Encoder, stop: threading.Event, message: Message | None = None
    ) -> bool:
        """One event of the stream (not yet acknowledged) pending, if this output takes it: its tables, its
        hooks; a full batch goes out. `replay`: where a replay must start to send it again; `message`: the
        event as the reader encoded it (its table has no hook). False on stop."""
        included = self._included.get((event.schema, event.table))
        if not (self._includes(event) if included is None else included):
            return True
        if message is None:
            if self.transforms:
                transformed = self._transform(event)
                if transformed is None:
                    return True
                event = transformed
            message = encode(event)
        pending = self._pending
        pending.append((message, replay))
        if len(pending) - self._inflight >= self.config.batch_size:
            self._send(pending, stop)
            return not stop.is_set()
        return True

    @property
    def pending(self) -> int:
        return len(self._pending)

    def lag_s(self) -> float:
        """Now minus the commit time of the last acknowledged message while landed events wait; else 0."""
        if (self.caught_up and not self._pending) or self.acked_commit_ts is None:
            return 0.0
        return max(0.0, time.time() - self.acked_commit_ts)

    def _acked_highs(self, pending: list[tuple[Message, int]]) -> None:
        """Record the HIGHs all of whose rows (and everything before them) are acknowledged: the first
        pending message is past them. What dumps wait for (capture/dump/gate.py), so it is written now."""
        first = pending[0][0].event.lsn if pending else None
        changed = False
        while self.undelivered_highs and (first is None or self.undelivered_highs[0][0] < first):
            _lsn, key, chunk = self.undelivered_highs.popleft()
            self._highs[key] = max(chunk, self._highs.pop(key, 0))
            changed = True
        if changed:
            while len(self._highs) > KEEP_HIGHS:
                self._highs.popitem(last=False)
            self._state(self.state_name, **self._state_details)

    def _includes(self, event: Event) -> bool:
        name = (event.schema, event.table)
        included = self._included.get(name)
        if included is None:
            included = self._included[name] = self.config.includes(*name)
        return included

    def _arrow_encoded(self, schema: str, table: str) -> bool:
        """Whether the reader encodes the table's events itself (`ArrowEncoder`): no hook names it (a hook
        sees and may change the `Event`), and it is not the watermark table (never an output message)."""
        if schema == WATERMARK_SCHEMA and table == WATERMARK_TABLE:
            return False
        name = f"{schema}.{table}"
        return not any(fnmatch.fnmatchcase(name, pattern) for pattern, _hook in self.transforms)

    def _transform(self, event: Event) -> Event | None:
        """Delta's processor stage: every hook whose pattern names the table, in config order; None drops it."""
        for pattern, hook in self.transforms:
            if not fnmatch.fnmatchcase(event.qualified_name, pattern):
                continue
            try:
                result = hook(event)
            except Exception as exc:
                raise OutputError(
                    f"output {self.name!r}: transform for {pattern} failed on {event.qualified_name} at LSN "
                    f"{event.lsn} (order {event.order}): {type(exc).__name__}: {exc}; nothing past the last "
                    "acknowledged message is lost: fix the hook and start the relay again"
                ) from exc
            if result is None:
                return None
            if not isinstance(result, Event):
                raise OutputError(
                    f"output {self.name!r}: transform for {pattern} returned {type(result).__name__}, "
                    "not an Event or None"
                )
            event = result
        return event

    def _send(self, pending: list[tuple[Message, int]], stop: threading.Event) -> None:
        """The next batch of pending goes out. Pipelined (NATS): sent without waiting, so reading and
        encoding the next batch overlap with JetStream storing this one (nats-server works on the other
        core) and with nats-py reading its acknowledgements (its own thread). Up to the output's `depth`
        batches are sent and not collected (2 with fast ingest: the output starts the second as soon as the
        first is wholly stored, 1 otherwise); a batch is sent only once all before it but those are
        acknowledged, and the output sends nothing of a batch behind one not wholly stored: anything else
        goes to `_deliver`'s retries, from the first unacknowledged message, so messages still arrive in
        order. Not pipelined: `_deliver`."""
        if not self._pipelined:
            self._deliver(pending, stop)
            return
        while self._windows and len(self._windows) >= getattr(self.output, "depth", 1):
            size = self._windows[0]
            done = self._collect(pending)
            if done < size:
                self._collect_all(pending)  # the batches behind it were not sent: they count 0
                self._deliver(pending, stop, done)
                return
        start = self._inflight
        batch = pending[start : start + self.config.batch_size]
        if self.output.send([m for m, _ in batch]):  # type: ignore[attr-defined]
            self._windows.append(len(batch))
            self._inflight += len(batch)
        else:
            done = self._collect_all(pending)
            self._deliver(pending, stop, 0 if done is None else done)

    def _collect(self, pending: list[tuple[Message, int]]) -> int:
        """The acknowledgements of the oldest batch in flight, recorded: how many from its first are
        acknowledged."""
        self._inflight -= self._windows.popleft()
        done: int = self.output.collect()  # type: ignore[attr-defined]
        if done:
            self._acknowledged(pending, done)
        return done

    def _collect_all(self, pending: list[tuple[Message, int]]) -> int | None:
        """Every batch in flight collected, in order: None when all are wholly acknowledged, else how many of
        the first that is not were (the batches behind it were not sent, and what they count is ignored)."""
        failed: int | None = None
        while self._windows:
            size = self._windows[0]
            if failed is not None:
                self._inflight -= self._windows.popleft()
                self.output.collect()  # type: ignore[attr-defined]
                continue
            done = self._collect(pending)
            if done < size:
                failed = done
        return failed

    def _acknowledged(self, pending: list[tuple[Message, int]], done: int) -> None:
        """The first `done` pending messages are acknowledged: the position moves past them (written now)."""
        message, replay = pending[done - 1]
        self.delivered += done
        event: Event = message.event
        self._save(Position(event.lsn, event.order, replay, self.delivered))
        if event.commit_ts is not None:
            self.acked_commit_ts = event.commit_ts.timestamp()
        if self.metrics is not None:
            self.metrics.acknowledged(self.name, done, event.lsn, self.acked_commit_ts)
        del pending[:done]
        self._acked_highs(pending)

    def _deliver(self, pending: list[tuple[Message, int]], stop: threading.Event, done: int | None = None) -> None:
        """Deliver everything pending, in batches, retrying what is not acknowledged with backoff (never
        dropping it); the position is written after every acknowledgement. Returns early only on stop.
        `done`: how many of a pipelined batch just collected were acknowledged (0: it failed, back off)."""
        delay = 0.2
        failing_since: float | None = None
        if done is None and self._windows:
            done = self._collect_all(pending)  # None: all of it, on with the rest
        while pending and not stop.is_set():
            if done is None:
                batch = pending[: self.config.batch_size]
                done = self.output.deliver([m for m, _ in batch])
                if done:
                    self._acknowledged(pending, done)
            if done:
                done = None
                delay = 0.2
                if failing_since is not None:
                    failing_since = None
                    self._state("delivering")
                elif time.monotonic() - self.state_written > STATE_EVERY_S:
                    self._state("delivering")
                continue
            done = None  # failed: back off, then deliver again from the first unacknowledged message
            self.retries += 1
            if self.metrics is not None:
                self.metrics.failed(self.name)
            failing_since = failing_since or time.time()
            self._state("retrying", error=self.output.last_error, since=failing_since, pending=len(pending))
            log.warning("output.retrying", output=self.name, pending=len(pending), in_s=round(delay, 2))
            until = time.monotonic() + delay
            while not stop.wait(min(STATE_EVERY_S, max(0.0, until - time.monotonic()))):
                if time.monotonic() >= until:
                    break
                self._state(self.state_name, **self._state_details)  # alive: a failing output holds dumps back
            delay = min(delay * 2, self.config.max_backoff_s)

    def _state(self, state: str, **details: object) -> None:
        """What `logtide status` shows besides the position (delivering, or retrying since when and why), and
        what dumps wait for (capture/dump/gate.py): the chunks delivered, and that this relay is alive."""
        self.state_name, self._state_details = state, details
        data = {
            "state": state,
            "retries": self.retries,
            "at": time.time(),
            "backpressure_rows": self.config.backpressure_rows,
            "highs": dict(self._highs),
            "chunks_undelivered": len(self.undelivered_highs),  # HIGHs read whose rows are not all acknowledged
            **details,
        }
        write_json_atomic(data, position_path(self.zone, self.name).with_name("state.json"), durable=False)
        self.state_written = time.monotonic()

    def _save(self, position: Position) -> None:
        write_position(self.zone, self.name, position)
        self.position = position
