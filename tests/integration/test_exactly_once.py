"""kill -9 the capture service again and again during a write load: the landing zone still holds
every change exactly once, in binlog order. The binlog itself, read independently, is the proof."""

from __future__ import annotations

import pytest

from tests.integration.binlog_check import Workload, assert_landed_exactly_once, binlog_end, create_tables
from tests.integration.crash_load import kill_repeatedly
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
    kills = kill_repeatedly(capture, WRITE_SECONDS)
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
