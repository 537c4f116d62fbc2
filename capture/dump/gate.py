"""Backpressure from the outputs on dumps: a dump waits, after each chunk, until every live relay of its source
has delivered the previous chunk's rows.

The output stream is in log order, so a dump's rows delay every log event behind them; a dump faster than
its slowest output would only pile rows up in front of the log (DBLog throttles the dump for the same
reason). Each relay records, in its `state.json`, the last chunk of every dump whose HIGH watermark it has
delivered past (`highs`), and when it last wrote (`at`). A relay that wrote nothing for `LIVE_S` (stopped,
or never started) does not hold a dump back, and no chunk waits longer than `MAX_WAIT_S`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from capture.landing import LandingZone
from capture.log import get_logger

log = get_logger(__name__)

LIVE_S = 15.0
MAX_WAIT_S = 60.0
IN_FLIGHT = 1  # chunks a dump may be ahead of the slowest live output


def high_key(dump_id: str, table: str) -> str:
    return f"{dump_id}/{table}"


def _states(zone: LandingZone) -> list[tuple[str, dict]]:
    folder = zone.root / "outputs"
    if not folder.is_dir():
        return []
    states = []
    for path in folder.glob("*/state.json"):
        try:
            states.append((path.parent.name, json.loads(Path(path).read_text())))
        except (OSError, ValueError):  # being replaced: read it at the next look
            continue
    return states


def lagging(zone: LandingZone, dump_id: str, table: str, chunk: int) -> list[str]:
    """The live outputs with backpressure on that have not yet delivered past chunk `chunk - IN_FLIGHT`."""
    now = time.time()
    behind = []
    for name, state in _states(zone):
        if not state.get("backpressure") or now - float(state.get("at", 0)) > LIVE_S:
            continue
        if int(state.get("highs", {}).get(high_key(dump_id, table), 0)) < chunk - IN_FLIGHT:
            behind.append(name)
    return behind


def wait_for_outputs(zone: LandingZone, dump_id: str, table: str, chunk: int) -> float:
    """Block until no live output lags more than IN_FLIGHT chunks behind `chunk` (or MAX_WAIT_S); the wait."""
    began = time.monotonic()
    logged = began
    while behind := lagging(zone, dump_id, table, chunk):
        waited = time.monotonic() - began
        if waited > MAX_WAIT_S:
            log.warning("dump.outputs_behind", dump_id=dump_id, table=table, chunk=chunk, outputs=",".join(behind))
            break
        if time.monotonic() - logged > 10:
            logged = time.monotonic()
            log.info("dump.waiting_for_outputs", dump_id=dump_id, table=table, chunk=chunk, outputs=",".join(behind))
        time.sleep(0.02)
    return time.monotonic() - began
