"""Runtime control of a running dump: chunk size, delay, rows/s ceiling, pause, resume, cancel.

Settings start from the dump request and can be overridden while it runs through a
`ControlStore` (a JSON file for the CLI, an Airflow Variable under Airflow). They are read
before every chunk, so a change takes effect at the next chunk. An invalid override is
reported and ignored: the dump keeps its last good settings.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from capture.errors import DumpCancelledError
from capture.landing.files import write_json_atomic
from capture.log import get_logger

log = get_logger(__name__)
PAUSE_POLL_S = 1.0


class DumpSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    chunk_size: int = Field(1000, ge=1, le=1_000_000)
    delay_s: float = Field(0.0, ge=0, le=3600)
    max_rows_per_s: float | None = Field(None, gt=0)
    state: Literal["running", "paused", "cancelled"] = "running"


class ControlStore(Protocol):
    def overrides(self) -> dict[str, Any]:
        """The current overrides (may be empty); read before every chunk."""


class FileControl:
    """Overrides in a JSON file next to the dump's progress (`logtide dump-control`)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def overrides(self) -> dict[str, Any]:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except ValueError as exc:
            log.error(
                "dump.control_unreadable",
                path=str(self.path),
                error=str(exc),
                action="fix or delete the file; the last good settings stay in force",
            )
            return {}

    def update(self, **changes: Any) -> DumpSettings:
        merged = {**self.overrides(), **{k: v for k, v in changes.items() if v is not None}}
        DumpSettings(**merged)  # refuse what the dump would refuse, before writing anything
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(merged, self.path)
        return DumpSettings(**merged)


class Controller:
    """Gives the settings for the next chunk; blocks while paused, raises when cancelled."""

    def __init__(self, defaults: DumpSettings, store: ControlStore | None, dump_id: str) -> None:
        self.settings = defaults
        self.defaults = defaults
        self.store = store
        self.dump_id = dump_id

    def _refresh(self) -> DumpSettings:
        if self.store is None:
            return self.settings
        overrides = self.store.overrides()
        try:
            settings = DumpSettings(**{**self.defaults.model_dump(), **overrides})
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            log.error(
                "dump.control_invalid",
                dump_id=self.dump_id,
                problems=problems,
                action="correct the override; the last good settings stay in force",
            )
            return self.settings
        if settings != self.settings:
            log.info("dump.settings_changed", dump_id=self.dump_id, **settings.model_dump())
        self.settings = settings
        return settings

    def next_chunk(self) -> DumpSettings:
        settings = self._refresh()
        if settings.state == "paused":
            log.info("dump.paused", dump_id=self.dump_id, action="set state to 'running' to resume")
            while settings.state == "paused":
                time.sleep(PAUSE_POLL_S)
                settings = self._refresh()
            log.info("dump.resumed", dump_id=self.dump_id)
        if settings.state == "cancelled":
            raise DumpCancelledError(f"dump {self.dump_id} was cancelled; rerun it with the same id to continue")
        return settings
