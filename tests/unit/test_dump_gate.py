"""Which outputs hold a dump back (capture/dump/gate.py): live ones with backpressure on that have not
delivered the chunk before the one just written."""

from __future__ import annotations

import json
import time

import pytest

from capture.dump.gate import lagging, wait_for_outputs
from capture.landing import LandingZone

pytestmark = pytest.mark.unit


def state(zone: LandingZone, name: str, chunk: int, at: float, backpressure: bool = True) -> None:
    folder = zone.root / "outputs" / name
    folder.mkdir(parents=True, exist_ok=True)
    highs = {"d1/db.t": chunk}
    (folder / "state.json").write_text(json.dumps({"at": at, "backpressure": backpressure, "highs": highs}))


def test_only_live_outputs_with_backpressure_that_are_behind_hold_a_dump(tmp_path):
    zone = LandingZone(tmp_path, "src")
    assert lagging(zone, "d1", "db.t", 5) == []  # no outputs at all
    now = time.time()
    state(zone, "fast", 4, now)
    state(zone, "slow", 2, now)
    state(zone, "dead", 1, now - 60)
    state(zone, "off", 1, now, backpressure=False)
    assert lagging(zone, "d1", "db.t", 5) == ["slow"]
    assert lagging(zone, "d1", "db.t", 3) == []
    assert sorted(lagging(zone, "d2", "db.t", 2)) == ["fast", "slow"]  # another dump: nothing delivered yet
    state(zone, "slow", 4, time.time())
    assert wait_for_outputs(zone, "d1", "db.t", 5) < 0.5
