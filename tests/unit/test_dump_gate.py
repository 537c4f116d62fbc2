"""Which outputs hold a dump back (capture/dump/gate.py): live ones with backpressure on that have more of
the dump undelivered than their `backpressure_rows` allow (in whole chunks, at least one)."""

from __future__ import annotations

import threading
import time

import pytest

from capture.dump.gate import lagging, wait_for_outputs
from capture.landing import LandingZone
from capture.landing.files import write_json_atomic

pytestmark = pytest.mark.unit


def state(zone: LandingZone, name: str, chunk: int, at: float, rows: int = 100) -> None:
    folder = zone.root / "outputs" / name
    folder.mkdir(parents=True, exist_ok=True)
    highs = {"d1/db.t": chunk}
    # as the relay writes it: a new file renamed over the old one
    write_json_atomic({"at": at, "backpressure_rows": rows, "highs": highs}, folder / "state.json", durable=False)


def test_only_live_outputs_with_backpressure_that_are_behind_hold_a_dump(tmp_path):
    zone = LandingZone(tmp_path, "src")
    assert lagging(zone, "d1", "db.t", 5, 100) == []  # no outputs at all
    now = time.time()
    state(zone, "fast", 4, now)
    state(zone, "slow", 2, now)
    state(zone, "dead", 1, now - 60)
    state(zone, "off", 1, now, rows=0)
    assert lagging(zone, "d1", "db.t", 5, 100) == ["slow"]
    assert lagging(zone, "d1", "db.t", 3, 100) == []
    assert sorted(lagging(zone, "d2", "db.t", 2, 100)) == ["fast", "slow"]  # another dump: nothing delivered yet
    assert lagging(zone, "d1", "db.t", 5, 30) == []  # 100 rows: 3 chunks of 30 may be undelivered
    assert lagging(zone, "d1", "db.t", 6, 30) == ["slow"]
    assert lagging(zone, "d1", "db.t", 4, 1000) == ["slow"]  # a chunk larger than the budget: one ahead
    state(zone, "slow", 4, time.time())
    assert wait_for_outputs(zone, "d1", "db.t", 5, 100) < 0.5


def test_a_dump_tells_its_record_which_outputs_it_waits_for(tmp_path):
    zone = LandingZone(tmp_path, "src")
    state(zone, "slow", 1, time.time())
    told: list[list[str]] = []

    def deliver_later() -> None:
        time.sleep(0.8)
        state(zone, "slow", 4, time.time())

    threading.Thread(target=deliver_later).start()
    waited = wait_for_outputs(zone, "d1", "db.t", 5, 100, told.append)
    assert 0.7 < waited < 5 and told == [["slow"]]
