"""kill -9 the capture service again and again during a write load: the landing zone still holds
every change exactly once, in binlog order. The binlog itself, read independently, is the proof."""

from __future__ import annotations

import random
import time

import pytest

from tests.integration.binlog_check import Workload, assert_landed_exactly_once, binlog_end, create_tables
from tests.servers import wait_for

pytestmark = pytest.mark.integration

WRITE_SECONDS = 12


def test_kill9_during_writes_loses_and_duplicates_nothing(mariadb, database, make_capture):
    create_tables(mariadb, database)
    capture = make_capture([f"{database}.*"], landing={"flush_interval_s": 0.05, "max_buffer_rows": 300})
    capture.start().wait_running()
    start = capture.zone.checkpoint().resume

    writer = Workload(mariadb, database, seed=7)
    writer.start()
    rng = random.Random(11)
    kills = 0
    deadline = time.monotonic() + WRITE_SECONDS
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(0.2, 1.2))
        capture.kill()
        kills += 1
        capture.start()
    transactions = writer.finish()
    end = binlog_end(mariadb)

    def caught_up() -> bool:
        assert capture.process.poll() is None, capture.log()
        checkpoint = capture.zone.checkpoint()
        return checkpoint is not None and checkpoint.frontier >= end

    wait_for(caught_up, 120, interval=0.2, what="capture to catch up")
    assert capture.stop() == 0
    assert transactions > 200 and kills >= 8
    assert_landed_exactly_once(mariadb, database, capture.zone, start["gtid"], end)
