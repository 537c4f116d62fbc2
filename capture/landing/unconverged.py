"""Tables whose targets lack rows no log carries until a dump of them runs: `<landing>/<source>/unconverged.json`.

Capture only warns where the log cannot carry rows a table already held (PostgreSQL: a table added to
the publication, a partition attached to a captured partitioned table, a captured table missing from
a read-only source's publication) and names the dump to run. The warning scrolls away; this file keeps
each such table with when it was found (`since`), why and what to run, so `logtide status` lists it as
"not converged" until a dump of that table finishes after `since` (`pending`). Kept across restarts:
the landing zone is capture's only state.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from capture.landing.files import write_json_atomic
from capture.landing.zone import LandingZone

FILE = "unconverged.json"
_lock = threading.Lock()


def _path(zone: LandingZone) -> Path:
    return zone.root / FILE


def read(zone: LandingZone) -> dict[str, dict[str, str]]:
    """Table (`schema.table`) -> {since, reason, action}, as recorded."""
    try:
        return dict(json.loads(_path(zone).read_text()))
    except FileNotFoundError:
        return {}


def record(zone: LandingZone, table: str, reason: str, action: str) -> None:
    """`table` lacks rows no log carries from now on (until a dump of it finishes after now)."""
    with _lock:
        entries = read(zone)
        entries[table] = {"since": datetime.now(UTC).isoformat(), "reason": reason, "action": action}
        zone.root.mkdir(parents=True, exist_ok=True)
        write_json_atomic(entries, _path(zone))


def pending(zone: LandingZone, dumps: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The recorded tables no dump has finished since they were recorded (`dumps`: dump.states.dumps_status,
    each table's `done` with the time of its last record, `updated_at`, to the second: a dump counts once
    that second is past `since`)."""
    left = []
    for table, entry in sorted(read(zone).items()):
        since = datetime.fromisoformat(entry["since"])
        finished = (
            t.get("done") and t.get("updated_at") and datetime.fromisoformat(t["updated_at"]) > since
            for d in dumps
            for name, t in d["tables"].items()
            if name == table
        )
        if not any(finished):
            left.append({"table": table, **entry})
    return left
