"""The capture loop: read the source's log from the checkpoint and land it, until stopped.

Startup order: take the source's lease (a standby waits here), claim the landing zone with
the lease's epoch (fencing off older leaders), preflight the source, settle the checkpoint
(first start or --reset: the current log position; otherwise check the checkpoint's
position still exists), delete anything landed past the frontier, then stream.
A lost connection commits what is finished, drops the open transaction and resumes from
the checkpoint; a stop request does the same and returns. A lost lease stops the stream
before its next commit (the commit guard refuses it) and the instance waits as a standby
again; when it leads again it starts exactly like a restart, from the checkpoint.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial

from capture.config import LogtideConfig
from capture.coordination import Lease, open_lease
from capture.coordination.fencing import CommitGuard, claim
from capture.errors import LeaseLostError, PositionWentBackwardsError, SourceConnectionError
from capture.events import ChangeBatch, Heartbeat, Lsn, SchemaChange, TransactionEnd, Truncate
from capture.landing import Checkpoint, LandingZone, unconverged
from capture.landing.log_writer import LogWriter
from capture.landing.reader import DumpedTables, dumped_schema, landed_tables, schema_history_records
from capture.log import get_logger
from capture.service.metrics import CaptureMetrics, serve_metrics
from capture.sources import open_source
from capture.sources.base import LogSource

log = get_logger(__name__)

PROGRESS_EVERY_S = 10.0
LAG_EVERY_S = 0.1  # the lag gauge is set at most this often while transactions are read
LAG_POLL_S = 5.0
MAX_BACKOFF_S = 30.0


class CaptureService:
    def __init__(
        self, config: LogtideConfig, source_name: str, reset: bool = False, lease: Lease | None = None
    ) -> None:
        self.config = config
        self.name = source_name
        self.source_config = config.source(source_name)
        self.reset = reset
        self.zone = LandingZone(config.landing.path, source_name)
        stale_after = max(5.0, 5 * self.source_config.heartbeat_s)
        self.metrics = CaptureMetrics(source_name, stale_after)
        self._read_position = Lsn(0)
        self.lease = lease if lease is not None else open_lease(config, source_name, self.zone)
        self._epoch: int | None = None
        self._guard: CommitGuard | None = None

    def run(self, stop: threading.Event) -> None:
        """Until `stop`: wait for the lease, lead (stream) until stopped or the lease is lost."""
        lease = self.lease
        server = None
        try:
            while not stop.is_set():
                if lease.waits and server is None:  # standbys answer /health too
                    server = self._serve_metrics()
                self.metrics.set_leader(False, self._epoch)
                if not lease.acquire(stop):  # the local lease raises LockHeldError instead of waiting
                    break
                try:
                    if server is None:
                        server = self._serve_metrics()
                    self._lead(stop)
                except LeaseLostError as exc:
                    if not lease.waits:
                        raise
                    log.warning(
                        "capture.lease_lost",
                        source=self.name,
                        epoch=self._epoch,
                        error=str(exc),
                        action="stopped before the next commit; waiting as a standby",
                    )
                finally:
                    lease.release()
                    self.metrics.set_leader(False, self._epoch)
        finally:
            self.metrics.state["state"] = "stopped"
            self.metrics.up.set(0)
            if server is not None:
                server.shutdown()

    def _serve_metrics(self) -> object | None:
        endpoint = self.source_config.metrics
        return serve_metrics(self.metrics, endpoint.host, endpoint.port) if endpoint.port else None

    def _lead(self, stop: threading.Event) -> None:
        """One term as leader: claim the landing zone with the lease's epoch, then stream until
        `stop` or the loss of the lease (which raises LeaseLostError)."""
        lease = self.lease
        epoch = lease.epoch
        assert epoch is not None
        term = threading.Event()  # this term's stop: the service's stop or the lease's loss

        def link() -> None:
            while not term.wait(0.05):
                if stop.is_set() or lease.lost.is_set():
                    term.set()

        threading.Thread(target=link, name="lease-link", daemon=True).start()
        try:
            claim(self.zone, epoch)
            self._epoch, self._guard = epoch, CommitGuard(lease, self.zone, epoch)
            self.metrics.set_leader(True, epoch)
            log.info("capture.leader", source=self.name, epoch=epoch, lease=lease.kind, identity=lease.identity)
            source = open_source(self.name, self.source_config)
            use_landed = getattr(source, "use_landed", None)  # PostgreSQL: compares DDL with what landed
            if use_landed is not None:
                zone = self.zone
                use_landed(
                    zone.relation_records,
                    lambda schema, table: dumped_schema(zone, schema, table),
                    DumpedTables(zone),
                )
            use_needs_dump = getattr(source, "use_needs_dump", None)  # PostgreSQL: tables only a dump converges
            if use_needs_dump is not None:
                use_needs_dump(
                    partial(unconverged.record, self.zone),
                    partial(unconverged.covered, self.zone),
                    partial(unconverged.remember_covered, self.zone),
                )
            # MariaDB/MySQL: what DROP DATABASE empties, the column types a MODIFY is judged against
            use_landed_tables = getattr(source, "use_landed_tables", None)
            if use_landed_tables is not None:
                use_landed_tables(partial(landed_tables, self.zone), partial(schema_history_records, self.zone))
            try:
                source.preflight()
                checkpoint = self._settle_checkpoint(source)
                self.reset = False  # a later term resumes from the checkpoint
                self._stream(source, checkpoint, term)
            finally:
                source.close()
            if lease.lost.is_set() and not stop.is_set():
                raise LeaseLostError(f"source {self.name!r}: the lease (epoch {epoch}) was lost")
        finally:
            term.set()
            self.zone.staging = None

    def _settle_checkpoint(self, source: LogSource) -> Checkpoint:
        existing = self.zone.checkpoint()
        if existing is not None and not self.reset:
            source.check_resumable(existing.frontier, existing.resume)
            self.zone.discard_uncommitted(existing.frontier)
            if self._epoch is not None and existing.epoch != self._epoch:
                existing = replace(existing, epoch=self._epoch, updated_at=datetime.now(UTC))
                self.zone.write_checkpoint(existing)  # marks the takeover: older leaders' guards now refuse
            log.info("capture.resuming", source=self.name, frontier=existing.frontier.encode(), **existing.resume)
            return existing
        frontier, resume = source.current_position(reset=self.reset)
        if existing is not None:
            if frontier < existing.frontier:
                raise PositionWentBackwardsError(
                    f"source {self.name!r}: the server's log position {resume} is behind the landed "
                    f"frontier {existing.frontier.encode()} (was the log reset?). Move {self.zone.root} "
                    "aside to start a new landing zone, then run a full dump."
                )
            self.zone.discard_uncommitted(existing.frontier)
        # after a reset the events landed before stay: the newest of them is still the newest landed
        last = self.zone.newest_commit(existing) if existing is not None else None
        checkpoint = Checkpoint(frontier, resume, epoch=self._epoch, last_commit_at=last)
        self.zone.write_checkpoint(checkpoint)
        log.info(
            "capture.reset" if existing is not None else "capture.first_start",
            source=self.name,
            frontier=frontier.encode(),
            note="changes before this position are not in the log landing zone; run a full dump for history",
            **resume,
        )
        return checkpoint

    def _on_commit(self, checkpoint: Checkpoint, events: int) -> None:
        self._source.acknowledge(checkpoint.resume)  # only now: the checkpoint is written
        last = self._last_end
        commit_ts = 0.0 if last is None else last.commit_ts.timestamp()
        self.metrics.committed(events, checkpoint.frontier, checkpoint.resume, commit_ts)

    def _stream(self, source: LogSource, checkpoint: Checkpoint, stop: threading.Event) -> None:
        landing = self.config.landing
        self._last_end: TransactionEnd | None = None  # the last transaction read
        self._source = source
        self._read_position = checkpoint.frontier  # everything before the checkpoint is read
        writer = LogWriter(
            self.zone,
            checkpoint,
            landing.flush_interval_s,
            landing.max_buffer_rows,
            self._on_commit,
            epoch=self._epoch,
            guard=self._guard,
        )
        self.metrics.state["state"] = "running"
        self.metrics.up.set(1)
        threading.Thread(target=self._poll_lag, args=(source, stop), name="lag-poller", daemon=True).start()
        backoff = 1.0
        reconnecting = False
        next_progress = time.monotonic() + PROGRESS_EVERY_S
        next_lag = 0.0
        metrics = self.metrics
        while not stop.is_set():
            try:
                for item in source.read(writer.checkpoint.resume, stop, landing.flush_interval_s):
                    if reconnecting:  # the source answers again: the next outage starts from 1 s
                        reconnecting, backoff = False, 1.0
                        metrics.source_back()
                    if isinstance(item, ChangeBatch):
                        writer.add(item)
                    elif isinstance(item, TransactionEnd):
                        writer.end_transaction(item)
                        self._read_position = item.frontier
                        self._last_end = item  # its lag: set below, every LAG_EVERY_S at most
                    elif isinstance(item, SchemaChange):
                        writer.add_schema_change(item)
                        log.info("capture.ddl", source=self.name, schema=item.schema, lsn=item.lsn.encode())
                    elif isinstance(item, Truncate):
                        writer.add_truncate(item)
                        log.info("capture.truncate", source=self.name, table=item.qualified_name, lsn=item.lsn.encode())
                    elif isinstance(item, Heartbeat):
                        metrics.alive()
                        metrics.set_lag(0.0)
                        if item.frontier is not None and item.resume is not None:
                            writer.advance(item.frontier, item.resume)
                    if writer.due():
                        writer.flush()
                        metrics.alive()
                    now = time.monotonic()
                    if now >= next_lag:  # not per transaction: a busy source ends thousands a second
                        next_lag = now + LAG_EVERY_S
                        if self._last_end is not None and not isinstance(item, Heartbeat):
                            metrics.set_lag(max(0.0, time.time() - self._last_end.commit_ts.timestamp()))
                    if now >= next_progress:  # idle too: heartbeats keep this loop turning
                        next_progress = now + PROGRESS_EVERY_S
                        self._log_progress(writer.checkpoint)
                    if stop.is_set():
                        break
            except SourceConnectionError as exc:
                writer.commit()
                writer.abandon_open_transaction()
                metrics.reconnects.inc()
                metrics.source_lost(str(exc))
                reconnecting = True
                log.warning(
                    "capture.source_lost",
                    source=self.name,
                    error=str(exc),
                    retry_in_s=backoff,
                    frontier=writer.checkpoint.frontier.encode(),
                    action="reconnecting from the checkpoint; check the database if this repeats",
                )
                stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
        writer.commit()
        writer.abandon_open_transaction()
        log.info(
            "capture.stopped",
            source=self.name,
            frontier=writer.checkpoint.frontier.encode(),
            **writer.checkpoint.resume,
        )

    def _log_progress(self, checkpoint: Checkpoint) -> None:
        m = self.metrics
        log.info(
            "capture.progress",
            source=self.name,
            frontier=checkpoint.frontier.encode(),
            events=m.total_events,
            rows_per_s=round(m.rate, 1),
            lag_s=round(m.lag_s, 3),
            **checkpoint.resume,
        )

    def _poll_lag(self, source: LogSource, stop: threading.Event) -> None:
        while not stop.wait(LAG_POLL_S):
            try:
                lag = source.lag_bytes(self._read_position)
            except Exception as exc:  # the loop itself reports lost connections
                log.debug("capture.lag_poll_failed", error=str(exc))
                continue
            self.metrics.lag_bytes.set(math.nan if lag is None else lag)  # None: the source cannot tell
            self._check_retained(source)

    def _check_retained(self, source: LogSource) -> None:
        """Log the server keeps for this capture (PostgreSQL: WAL held by the slot), with a
        warning past `retained_warn_bytes` (an unread or lagging slot fills the server's disk)."""
        try:
            retained = source.retained_bytes()
        except Exception as exc:
            log.debug("capture.retained_poll_failed", error=str(exc))
            return
        if retained is None:
            return
        self.metrics.retained_bytes.set(retained)
        limit = self.source_config.retained_warn_bytes
        if limit is not None and retained > limit and time.monotonic() >= getattr(self, "_retained_warned", 0.0):
            self._retained_warned = time.monotonic() + 60.0
            log.warning(
                "capture.retained_wal_high",
                source=self.name,
                retained_bytes=retained,
                limit_bytes=limit,
                action="capture is behind or was stopped: the server keeps this WAL until it catches up",
            )
