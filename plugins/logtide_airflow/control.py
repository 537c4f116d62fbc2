"""Runtime control of dumps through Airflow Variables (the `ControlStore` of `capture.dump.control`).

Two Variables, each a JSON object with any of `chunk_size`, `delay_s`, `max_rows_per_s` and
`state` (`running`, `paused`, `cancelled`):

- `logtide_dump_control_<source>`: every dump of the source;
- `logtide_dump_control_<dump_id>`: one dump; its keys win over the source's.

They are read before a chunk, at most once a second (`min_interval_s`): a Variable read goes
through Airflow's API and costs milliseconds, which at small chunks took more time than the
chunks themselves. So an edit in the Airflow UI (Admin > Variables) takes effect at the first
chunk that starts a second or more after the last read. A Variable that is not a JSON object is
reported and ignored; values the dump refuses (chunk_size 0...) are reported by the dump's
`Controller`, which keeps the last good settings.

`stop()` is the operator's `on_kill`: when Airflow terminates the task (marked failed or cleared
while it runs, a timeout, a worker shutting down) it sends SIGTERM and, 5 s later, SIGKILL. The
next read then raises `DumpStoppedError`, so the dump stops before its next chunk and records
why, instead of dumping on until it is killed.
"""

from __future__ import annotations

import json
import time
from typing import Any

from capture.errors import DumpStoppedError
from capture.log import get_logger

log = get_logger(__name__)

CONTROL_PREFIX = "logtide_dump_control_"


def control_variable(name: str) -> str:
    """The Variable for a source name or a dump id."""
    return f"{CONTROL_PREFIX}{name}"


class VariableControl:
    """Overrides from `logtide_dump_control_<source>`, then `logtide_dump_control_<dump_id>`."""

    def __init__(self, source: str, dump_id: str, min_interval_s: float = 1.0) -> None:
        self.keys = [control_variable(source), control_variable(dump_id)]
        self.dump_id = dump_id
        # told to a dump refused because this one holds its table (capture.coordination.claims)
        self.cancel_instruction = f'by setting the Airflow Variable {self.keys[1]} to {{"state": "cancelled"}}'
        self.stop_reason: str | None = None
        self.min_interval_s = min_interval_s
        self._reported: dict[str, str] = {}  # Variable -> the bad text last reported
        self._last: dict[str, Any] = {}
        self._read_at: float | None = None

    def _read(self, key: str) -> dict[str, Any]:
        from airflow.sdk import Variable

        text = Variable.get(key, default=None)
        if text is None or not str(text).strip():
            self._reported.pop(key, None)
            return {}
        try:
            value = json.loads(text)
            if not isinstance(value, dict):
                raise ValueError(f"expected a JSON object, got {type(value).__name__}")
        except ValueError as exc:
            if self._reported.get(key) != text:  # once per bad value, not once per chunk
                log.error(
                    "dump.control_unreadable",
                    variable=key,
                    error=str(exc),
                    example='{"state": "paused"} or {"chunk_size": 500, "delay_s": 0.5}',
                    action="fix or delete the Variable; it is ignored meanwhile",
                )
                self._reported[key] = text
            return {}
        self._reported.pop(key, None)
        return value

    def stop(self, reason: str) -> None:
        """Make the next read raise: called from a signal handler, so it only sets a field."""
        self.stop_reason = reason

    def overrides(self) -> dict[str, Any]:
        if self.stop_reason is not None:
            raise DumpStoppedError(f"dump {self.dump_id} was stopped by Airflow ({self.stop_reason})")
        now = time.monotonic()
        if self._read_at is not None and now - self._read_at < self.min_interval_s:
            return dict(self._last)
        merged: dict[str, Any] = {}
        for key in self.keys:
            merged.update(self._read(key))
        self._last, self._read_at = merged, now
        return dict(merged)
