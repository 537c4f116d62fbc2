"""Prometheus metrics and a health endpoint for one capture instance.

`/metrics` is the Prometheus text format; `/health` answers 200 while the capture loop is
making progress (reading events or heartbeats) and 503 when it is stuck, stopped or
reconnecting to a source that is down (`"state": "reconnecting"` with the error). Every
instance of a source serves both (a standby too), so each says whether it leads:
`logtide_capture_leader`, and in `/health` `leader`, `epoch` and `instance` ("host:pid", the
identity its lease shows in ZooKeeper and in `logtide status`).
"""

from __future__ import annotations

import json
import math
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from capture.events import Lsn, lsn_text


class CaptureMetrics:
    def __init__(self, source: str, stale_after_s: float) -> None:
        self.source = source
        self.registry = CollectorRegistry()
        labels = ["source"]

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=self.registry).labels(source)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=self.registry).labels(source)

        self.events = counter("logtide_capture_events", "change events landed and committed")
        self.commits = counter("logtide_capture_checkpoints", "checkpoints written")
        self.reconnects = counter("logtide_capture_reconnects", "connections to the source re-established")
        self.rows_per_second = gauge("logtide_capture_rows_per_second", "events landed per second, last interval")
        self.lag_seconds = gauge("logtide_capture_lag_seconds", "now minus the commit time of the last event read")
        self.lag_bytes = gauge(
            "logtide_capture_lag_bytes", "bytes of log on the server past the last event read (NaN: not known yet)"
        )
        self.lag_bytes.set(math.nan)
        self.retained_bytes = gauge(
            "logtide_capture_retained_bytes", "log the server keeps for this capture (PostgreSQL: WAL held by the slot)"
        )
        # The encoded LSN (file number << 64 | position << 32 for the binlog) does not fit a float64
        # exactly, so the frontier is shown as the two 32-bit halves of its major part, each exact.
        self.frontier_high = gauge(
            "logtide_capture_frontier_lsn_high",
            "committed frontier, upper 32 bits of the LSN's major part: MySQL/MariaDB the binlog file "
            "number (binlog.NNNNNN), PostgreSQL X of the commit LSN X/Y",
        )
        self.frontier_low = gauge(
            "logtide_capture_frontier_lsn_low",
            "committed frontier, lower 32 bits of the LSN's major part: MySQL/MariaDB the byte position in "
            "that binlog file (as SHOW MASTER STATUS), PostgreSQL Y of the commit LSN X/Y",
        )
        self.last_commit = gauge(
            "logtide_capture_last_commit_timestamp_seconds",
            "source commit time of the last landed transaction",
        )
        self.up = gauge("logtide_capture_up", "1 while the capture loop runs")
        self.leader = gauge("logtide_capture_leader", "1 while this instance holds the source's lease, else 0")
        self.epoch = gauge("logtide_capture_epoch", "epoch of the lease this instance holds or last held (0: none)")
        self._stale_after = stale_after_s
        self._alive_at = time.monotonic()
        self._rate_at = time.monotonic()
        self._rate_events = 0
        self.state: dict[str, Any] = {
            "source": source,
            "instance": f"{socket.gethostname()}:{os.getpid()}",
            "state": "starting",
            "leader": False,
            "epoch": None,
        }
        self.total_events = 0
        self.rate = 0.0
        self.lag_s = 0.0

    def set_lag(self, seconds: float) -> None:
        self.lag_s = seconds
        self.lag_seconds.set(seconds)
        self.state["lag_s"] = round(seconds, 3)

    def alive(self) -> None:
        self._alive_at = time.monotonic()
        self._tick()

    def _tick(self) -> None:
        """Update rows/s once a second or more has passed (heartbeats bring it back to 0 when idle)."""
        now = time.monotonic()
        if now - self._rate_at >= 1.0:
            self.rate = self._rate_events / (now - self._rate_at)
            self.rows_per_second.set(self.rate)
            self._rate_at, self._rate_events = now, 0

    def committed(self, events: int, frontier: Lsn, position: dict[str, Any], commit_ts: float) -> None:
        """A checkpoint was written: `events` more landed, up to `frontier` (the source's `position`)."""
        self.frontier_high.set(frontier.major >> 32)  # first: a scrape that sees the events sees the frontier
        self.frontier_low.set(frontier.major & 0xFFFFFFFF)
        self.events.inc(events)
        self.total_events += events
        self.commits.inc()
        self.last_commit.set(commit_ts)
        self.state["frontier"] = lsn_text(frontier.encode())  # /health JSON: text, as every LSN that leaves
        self.state["position"] = dict(position)
        self._rate_events += events
        self._tick()

    def set_leader(self, leader: bool, epoch: int | None) -> None:
        self.leader.set(1 if leader else 0)
        self.epoch.set(epoch or 0)
        self.state["leader"] = leader
        self.state["epoch"] = epoch
        self.state["state"] = "starting" if leader else "standby"
        if not leader:
            self.up.set(0)

    def source_lost(self, error: str) -> None:
        """The connection to the source is down: unhealthy until it answers again."""
        self.state["state"] = "reconnecting"
        self.state["error"] = error

    def source_back(self) -> None:
        if self.state["state"] == "reconnecting":
            self.state["state"] = "running"
            self.state.pop("error", None)
        self.alive()

    def healthy(self) -> bool:
        if self.state["state"] == "standby":  # waiting for the lease is a standby's job
            return True
        return self.state["state"] == "running" and time.monotonic() - self._alive_at < self._stale_after


class Served(Protocol):
    """What the endpoint serves: capture's metrics, or the relay's (capture/output/metrics.py)."""

    registry: CollectorRegistry
    state: dict[str, Any]

    def healthy(self) -> bool: ...


class _Handler(BaseHTTPRequestHandler):
    metrics: Served

    def do_GET(self) -> None:
        if self.path == "/metrics":
            body, status, kind = generate_latest(self.metrics.registry), 200, CONTENT_TYPE_LATEST
        elif self.path == "/health":
            ok = self.metrics.healthy()
            body = json.dumps({**self.metrics.state, "healthy": ok}).encode()
            status, kind = (200 if ok else 503), "application/json"
        else:
            body, status, kind = b"not found: try /metrics or /health\n", 404, "text/plain"
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve_metrics(metrics: Served, host: str, port: int) -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"metrics": metrics})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server
