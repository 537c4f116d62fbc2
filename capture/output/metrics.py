"""Prometheus metrics and a health endpoint for `logtide relay` (one process, one source, its outputs).

Per output (label `output`): messages acknowledged, retries, whether it is retrying now, its acknowledged
position (the LSN's major part as two exact 32-bit halves, as capture's frontier), the commit time of the
last acknowledged message and the lag behind the landing zone, messages pending, and backpressure: dump
chunks read whose rows are not all acknowledged, and dump tables waiting for it right now.
`/health` answers 200 while every output's relay thread runs and writes its state, 503 otherwise; an
output that is retrying is healthy (its target is not), and says so in the JSON.
"""

from __future__ import annotations

import os
import socket
import time
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from capture.dump.gate import LIVE_S
from capture.dump.states import held_dumps
from capture.events import Lsn

if TYPE_CHECKING:
    from capture.output.relay import Relay


class RelayMetrics:
    def __init__(self, source: str) -> None:
        self.source = source
        self.registry = CollectorRegistry()
        labels = ["source", "output"]

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=self.registry)

        self.delivered = Counter("logtide_output_delivered", "messages the output acknowledged", labels,
                                 registry=self.registry)  # fmt: skip
        self.retries = Counter("logtide_output_retries", "deliveries not (wholly) acknowledged, retried", labels,
                               registry=self.registry)  # fmt: skip
        self.retrying = gauge("logtide_output_retrying", "1 while the output fails and the relay retries, else 0")
        self.acked_high = gauge(
            "logtide_output_acknowledged_lsn_high", "acknowledged position, upper 32 bits of the LSN's major part"
        )
        self.acked_low = gauge(
            "logtide_output_acknowledged_lsn_low", "acknowledged position, lower 32 bits of the LSN's major part"
        )
        self.last_commit = gauge(
            "logtide_output_last_commit_timestamp_seconds", "source commit time of the last acknowledged message"
        )
        self.lag = gauge(
            "logtide_output_lag_seconds",
            "now minus the commit time of the last acknowledged message while landed events wait for the output; "
            "0 when it has delivered everything landed",
        )
        self.pending = gauge("logtide_output_pending_messages", "messages read and encoded, not yet acknowledged")
        self.chunks_undelivered = gauge(
            "logtide_output_dump_chunks_undelivered",
            "dump chunks read whose rows the output has not all acknowledged",
        )
        self.holding = gauge(
            "logtide_output_holding_dumps", "dump tables waiting for this output now (backpressure, status)"
        )
        self.relays: dict[str, Relay] = {}
        self.threads: dict[str, Any] = {}
        self.state: dict[str, Any] = {"source": source, "instance": f"{socket.gethostname()}:{os.getpid()}"}

    def watch(self, name: str, relay: Relay, thread: Any) -> None:
        """Serve `relay`'s figures under `output=name`; gauges that are read off it are computed per scrape."""
        self.relays[name], self.threads[name] = relay, thread
        labels = (self.source, name)
        self.lag.labels(*labels).set_function(relay.lag_s)
        self.pending.labels(*labels).set_function(lambda: relay.pending)
        self.chunks_undelivered.labels(*labels).set_function(lambda: len(relay.undelivered_highs))
        self.holding.labels(*labels).set_function(lambda: len(held_dumps(relay.zone, name)))
        for family in (self.delivered, self.retries, self.retrying, self.acked_high, self.acked_low, self.last_commit):
            family.labels(*labels)  # shown (0) before the first delivery

    def acknowledged(self, name: str, count: int, lsn: int, commit_ts: float | None) -> None:
        labels = (self.source, name)
        major = Lsn.decode(lsn).major
        self.acked_high.labels(*labels).set(major >> 32)
        self.acked_low.labels(*labels).set(major & 0xFFFFFFFF)
        if commit_ts is not None:
            self.last_commit.labels(*labels).set(commit_ts)
        self.delivered.labels(*labels).inc(count)
        self.retrying.labels(*labels).set(0)

    def failed(self, name: str) -> None:
        self.retries.labels(self.source, name).inc()
        self.retrying.labels(self.source, name).set(1)

    def healthy(self) -> bool:
        now = time.monotonic()
        outputs = {}
        for name, relay in self.relays.items():
            alive = self.threads[name].is_alive() and now - relay.state_written < LIVE_S
            outputs[name] = {"alive": alive, "state": relay.state_name}
        self.state["outputs"] = outputs
        return bool(outputs) and all(o["alive"] for o in outputs.values())
