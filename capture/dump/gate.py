"""Backpressure from the outputs on dumps: after each chunk, a dump waits while a live relay of its source
has more of the dump's rows undelivered than its `backpressure_rows` allow (in whole chunks, at least one).

The output stream is in log order, so a dump's rows delay every log event behind them; a dump faster than
its slowest output would only pile rows up in front of the log (DBLog throttles the dump for the same
reason). Each relay records, in its `state.json`, the last chunk of every dump whose HIGH watermark and rows
it has had acknowledged (`highs`), its budget (`backpressure_rows`) and when it last wrote (`at`). A relay
that wrote nothing for `LIVE_S` (stopped, or never started) does not hold a dump back, and no chunk waits
longer than `MAX_WAIT_S`. A dump polls every `POLL_S`: a state file is read again only when its inode,
mtime or size changed (every write renames a new file over it).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from capture.landing import LandingZone
from capture.log import get_logger

log = get_logger(__name__)

LIVE_S = 15.0
MAX_WAIT_S = 60.0
POLL_S = 0.02
REPORT_AFTER_S = 0.5  # a wait longer than this is reported to the dump's record (what `status` shows)

# state.json -> (inode, mtime_ns, size, its content): each write is a new file renamed over the old one
_cache: dict[Path, tuple[int, int, int, dict[str, Any]]] = {}


def high_key(dump_id: str, table: str) -> str:
    return f"{dump_id}/{table}"


def chunks_ahead(backpressure_rows: int, chunk_size: int) -> int:
    """How many chunks past the last one an output delivered a dump may write before it waits."""
    return max(1, backpressure_rows // max(1, chunk_size))


def _read(path: Path) -> dict[str, Any] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        _cache.pop(path, None)
        return None
    seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
    cached = _cache.get(path)
    if cached is not None and cached[:3] == seen:
        return cached[3]
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):  # being replaced: read it at the next look
        return cached[3] if cached else None
    _cache[path] = (*seen, state)
    return state


def output_states(zone: LandingZone) -> list[tuple[str, dict[str, Any]]]:
    """Every output's last written state (one directory listing, one stat per output; read when changed)."""
    folder = zone.root / "outputs"
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return []
    states = []
    for name in names:
        state = _read(folder / name / "state.json")
        if state is not None:
            states.append((name, state))
    return states


def lagging(zone: LandingZone, dump_id: str, table: str, chunk: int, chunk_size: int) -> list[str]:
    """The live outputs with backpressure on that have delivered too few of the dump's chunks for `chunk`
    (just written) to be followed by another."""
    now = time.time()
    behind = []
    for name, state in output_states(zone):
        budget = int(state.get("backpressure_rows", 0))
        if not budget or now - float(state.get("at", 0)) > LIVE_S:
            continue
        if int(state.get("highs", {}).get(high_key(dump_id, table), 0)) < chunk - chunks_ahead(budget, chunk_size):
            behind.append(name)
    return behind


def wait_for_outputs(
    zone: LandingZone,
    dump_id: str,
    table: str,
    chunk: int,
    chunk_size: int,
    waiting: Callable[[list[str]], None] | None = None,
) -> float:
    """Block until no live output lags (or MAX_WAIT_S); the wait. `waiting(outputs)` is told once when the
    wait passes REPORT_AFTER_S, so the dump's record names the outputs it waits for."""
    began = time.monotonic()
    logged = began
    reported = False
    while behind := lagging(zone, dump_id, table, chunk, chunk_size):
        waited = time.monotonic() - began
        if waited > MAX_WAIT_S:
            log.warning("dump.outputs_behind", dump_id=dump_id, table=table, chunk=chunk, outputs=",".join(behind))
            break
        if not reported and waited > REPORT_AFTER_S and waiting is not None:
            reported = True
            waiting(behind)
        if time.monotonic() - logged > 10:
            logged = time.monotonic()
            log.info("dump.waiting_for_outputs", dump_id=dump_id, table=table, chunk=chunk, outputs=",".join(behind))
        time.sleep(POLL_S)
    return time.monotonic() - began
