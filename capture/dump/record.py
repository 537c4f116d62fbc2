"""The dump's own account of itself, for `logtide status`: `<landing>/<source>/dumps/<id>/dump.json`.

Progress files (progress.py) say where to resume; this record says what a person asks: is the
dump running, finished, cancelled or failed, and per table how far it is, how fast, and when
it should end. The engine updates it after every chunk and writes it at most once a second
(0.9 ms a write here, about a tenth of a 1,000-row chunk), and at every change of state; it is
not fsynced: losing it loses nothing but a status line. A process killed with -9 leaves
"running" behind; `logtide status` tells that apart from a live dump by the dump's table claims
(capture.coordination.claims).
"""

from __future__ import annotations

import json
import os
import socket
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from capture.dump.progress import dump_dir
from capture.landing.files import write_json_atomic
from capture.landing.zone import LandingZone

RECORD = "dump.json"
WRITE_EVERY_S = 1.0


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class DumpRecord:
    def __init__(self, zone: LandingZone, dump_id: str) -> None:
        self.path = dump_dir(zone, dump_id) / RECORD
        self.data: dict[str, Any] = {"dump_id": dump_id, "tables": {}}
        self._written_at = 0.0

    def start(self, tables: list[str], skipped: list[dict[str, str]] | None = None) -> None:
        """`skipped`: the tables a dump of every captured table leaves out, with reason and fix."""
        previous = read_record(self.path)
        self.data.update(
            state="running",
            host=socket.gethostname(),
            pid=os.getpid(),
            started_at=(previous or {}).get("started_at") or _now(),
            resumed_at=_now() if previous else None,
            finished_at=None,
            error=None,
            skipped=skipped or [],
        )
        old = (previous or {}).get("tables", {})
        self.data["tables"] = {t: old.get(t, {"chunks": 0, "rows": 0, "percent": 0.0, "done": False}) for t in tables}
        self._write()

    def table(self, table: str, **fields: Any) -> None:
        self.data["tables"].setdefault(table, {}).update(fields, updated_at=_now())
        if fields.get("done") or time.monotonic() - self._written_at >= WRITE_EVERY_S:
            self._write()

    def waiting(self, table: str, outputs: list[str]) -> None:
        """The dump waits for these outputs to deliver (capture/dump/gate.py): shown at once by `status`."""
        self.data["tables"].setdefault(table, {}).update(waiting_for_outputs=outputs, updated_at=_now())
        self._write()

    def finish(self, state: str, error: str | None = None) -> None:
        self.data.update(state=state, finished_at=_now(), error=error)
        self._write()

    def _write(self) -> None:
        self._written_at = time.monotonic()
        self.data["updated_at"] = _now()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.data, self.path, durable=False)


def read_record(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
