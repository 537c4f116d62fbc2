"""Tables whose targets lack rows no log carries until a dump of them runs: `<landing>/<source>/unconverged.json`.

Capture only warns where the log cannot carry rows a table already held (PostgreSQL: a table added to
the publication, a partition attached to a captured partitioned table, a captured table missing from
a read-only source's publication) and names the dump to run. The warning scrolls away; this file keeps
each such table with when it was found (`since`), why and what to run, so `logtide status` lists it as
"not converged" until a dump of that table that started after `since` finishes (`pending`); a table a
read-only publication lacks (`unpublished`) stays listed whatever is dumped, until capture finds it
published and records it anew. Kept across restarts: the landing zone is capture's only state.

`covered.json` beside it keeps what the publication covered at capture's last sync (`covered`,
`remember_covered`), so that the first sync of a run finds what changed while capture was stopped
(a partition attached, a table added to the publication).
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
COVERED = "covered.json"
_lock = threading.Lock()


def _path(zone: LandingZone) -> Path:
    return zone.root / FILE


def read(zone: LandingZone) -> dict[str, dict[str, str]]:
    """Table (`schema.table`) -> {since, reason, action}, as recorded."""
    try:
        return dict(json.loads(_path(zone).read_text()))
    except FileNotFoundError:
        return {}


def record(zone: LandingZone, table: str, reason: str, action: str, unpublished: bool = False) -> None:
    """`table` lacks rows no log carries from now on (until a dump of it that starts after now finishes;
    with `unpublished`, its changes are not in the log yet: no dump clears it until it is recorded again)."""
    with _lock:
        entries = read(zone)
        entry: dict[str, Any] = {"since": datetime.now(UTC).isoformat(), "reason": reason, "action": action}
        if unpublished:
            entry["unpublished"] = True
        entries[table] = entry
        zone.root.mkdir(parents=True, exist_ok=True)
        write_json_atomic(entries, _path(zone))


def pending(zone: LandingZone, dumps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recorded tables no dump has converged since they were recorded (`dumps`: dump.states.dumps_status).
    A dump converges a table when it read the whole table (`whole`: no key list, no key range), started
    after `since`, and the table is `done` in it: one begun before read chunks while the table's changes
    were not yet in the log. `started_at` is kept to the second
    (rounded down): a dump started in the same second as `since` does not count. A table recorded
    `unpublished` is pending whatever was dumped."""
    left = []
    for table, entry in sorted(read(zone).items()):
        since = datetime.fromisoformat(entry["since"])
        finished = (
            t.get("done") and t.get("whole") and d.get("started_at") and datetime.fromisoformat(d["started_at"]) > since
            for d in dumps
            for name, t in d["tables"].items()
            if name == table
        )
        if entry.get("unpublished") or not any(finished):
            left.append({"table": table, **entry})
    return left


def covered(zone: LandingZone) -> tuple[set[str], set[str]] | None:
    """What the publication covered at capture's last sync: (tables and partitions, the partitions alone);
    None before the first."""
    try:
        data = json.loads((zone.root / COVERED).read_text())
    except FileNotFoundError:
        return None
    return set(data["covered"]), set(data["partitions"])


def remember_covered(zone: LandingZone, tables: set[str], partitions: set[str]) -> None:
    zone.root.mkdir(parents=True, exist_ok=True)
    write_json_atomic({"covered": sorted(tables), "partitions": sorted(partitions)}, zone.root / COVERED)
