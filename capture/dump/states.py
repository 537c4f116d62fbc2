"""What each dump in a landing zone is doing, from its files alone (record, progress, control, claims):
what `logtide status` shows per dump, and which dumps wait for an output (the relay's metrics)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from capture.coordination.claims import LocalClaims
from capture.dump.progress import dump_dir
from capture.dump.record import RECORD, read_record
from capture.landing import LandingZone
from capture.landing.zone import folder_table


def dumps_status(zone: LandingZone) -> list[dict[str, Any]]:
    base = zone.root / "dumps"
    if not base.is_dir():
        return []
    folders = sorted((p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")), key=_started)
    claims = LocalClaims(zone)
    return [_dump_status(zone, claims, folder.name) for folder in folders]


def _started(folder: Path) -> str:
    record = read_record(folder / RECORD) or {}
    return str(record.get("started_at") or datetime.fromtimestamp(folder.stat().st_mtime, UTC).isoformat())


def _dump_status(zone: LandingZone, claims: LocalClaims, dump_id: str) -> dict[str, Any]:
    folder = dump_dir(zone, dump_id)
    record = read_record(folder / RECORD) or {}
    tables: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("*.json")):
        if path.name in (RECORD, "control.json"):
            continue
        progress = read_record(path) or {}
        schema, table = folder_table(path.stem)
        tables[f"{schema}.{table}"] = {
            "chunks": progress.get("chunk", 0),
            "rows": progress.get("rows", 0),
            "done": bool(progress.get("done")),
            "whole": bool(progress.get("whole")),  # not a key list or range (older files: not known, False)
        }
    for table, fields in record.get("tables", {}).items():
        tables[table] = {**tables.get(table, {}), **fields}
    control = read_record(folder / "control.json") or {}
    state = record.get("state")
    entry: dict[str, Any] = {"dump_id": dump_id, "tables": tables}
    if state == "running":
        pending = [t for t, v in tables.items() if not v.get("done")]
        holders = [h for t in pending if (h := claims.probe(t)) is not None]
        if not pending:  # it ended between its last table and its record's last write
            state = "finished"
        elif not any(h.dump_id == dump_id for h in holders):
            state = "failed"
            entry["error"] = (
                f"its process is gone (host {record.get('host')}, pid {record.get('pid')}) without finishing; "
                "rerun it with the same dump id to resume"
            )
        elif control.get("state") in ("paused", "cancelled"):
            state = "paused" if control["state"] == "paused" else "cancelling"
    elif state is None:  # a dump without a record (older versions): its progress files alone
        state = "finished" if tables and all(v.get("done") for v in tables.values()) else "unfinished"
    entry["state"] = state
    for key in ("host", "pid", "started_at", "resumed_at", "updated_at", "finished_at"):
        if record.get(key):
            entry[key] = record[key]
    if record.get("error") and "error" not in entry:
        entry["error"] = record["error"]
    if record.get("skipped"):
        entry["skipped"] = record["skipped"]
    entry["rows"] = sum(int(v.get("rows") or 0) for v in tables.values())
    entry["tables_done"] = sum(1 for v in tables.values() if v.get("done"))
    return entry


def held_dumps(zone: LandingZone, output: str) -> list[str]:
    """The running dumps' tables waiting for this output (capture/dump/gate.py), as `dump_id/table`."""
    held = []
    for entry in dumps_status(zone):
        if entry["state"] != "running":
            continue
        for table, fields in entry["tables"].items():
            if output in (fields.get("waiting_for_outputs") or ()):
                held.append(f"{entry['dump_id']}/{table}")
    return held
