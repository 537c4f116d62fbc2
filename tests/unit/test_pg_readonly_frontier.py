"""The frontier of a PostgreSQL source with `watermarks: readonly` (capture/sources/postgres/reader.py
`_ends`, `_idle_end`; chunks.py `place_high`): frontiers stand just below their WAL position, never go
back, step while the server writes nothing, and a HIGH placed above the frontier is passed by the next
idle step but not before."""

from __future__ import annotations

from datetime import UTC, datetime
from threading import Event

import pytest

from capture.config import SourceConfig
from capture.events import Lsn, TransactionEnd
from capture.sources.postgres.chunks import PostgresChunkSource
from capture.sources.postgres.publication import Publication
from capture.sources.postgres.reader import PgOutputReader

pytestmark = pytest.mark.unit

CONFIG = SourceConfig(kind="postgresql", user="u", database="d", watermarks="readonly")


def _reader(start: int, frontier: int) -> PgOutputReader:
    return PgOutputReader("src", CONFIG, "slot", Publication("src", CONFIG), start, Event(), start, 0.5, frontier)


def _end(lsn: int) -> TransactionEnd:
    return TransactionEnd(Lsn(lsn), {"lsn": "x"}, datetime.now(UTC))


def test_frontiers_stand_below_their_wal_position_and_step_while_idle():
    reader = _reader(1000, Lsn(999).encode())  # a first start: (slot position - 1, 0)
    (end,) = reader._ends(iter([_end(1200)]))  # a transaction ending at 1200
    assert end.frontier == Lsn(1199) and end.resume["frontier_at"] == str(Lsn(1199).encode())
    steps = [reader._idle_end(1200, 0.0) for _ in range(3)]  # nothing written since
    assert [s.frontier for s in steps] == [Lsn(1199, 1), Lsn(1199, 2), Lsn(1199, 3)]
    assert all(s.resume["lsn"] == "0/4B0" for s in steps)  # streaming resumes at the WAL position itself
    assert reader._idle_end(1600, 0.0).frontier == Lsn(1599)  # the server wrote WAL elsewhere
    (end,) = reader._ends(iter([_end(2000)]))
    assert end.frontier == Lsn(1999)
    # every change of a transaction that begins at the WAL end is at or after (wal_end, 0): not covered
    assert all(s.frontier.encode() < Lsn(1200, 0).encode() for s in steps)


def test_a_checkpoint_frontier_at_the_wal_position_leaves_no_room_until_the_wal_moves():
    reader = _reader(1000, Lsn(1000).encode())  # written with table watermarks: (position, 0)
    assert reader._idle_end(1000, 0.0) is None
    assert reader._idle_end(1008, 0.0).frontier == Lsn(1007)


def test_high_is_placed_above_the_frontier_and_closed_by_the_next_idle_step():
    place = PostgresChunkSource.place_high
    reader = _reader(1000, Lsn(1199, 4).encode())
    frontier = Lsn(1199, 4).encode()  # idle at WAL end 1200
    high = place(None, Lsn(1199).encode(), frontier)  # HIGH read at WAL end 1200: (1200 - 1, 0)
    assert high == Lsn(1199, 5).encode() and not frontier > high  # not passed before its file exists
    step = reader._idle_end(1200, 0.0).frontier.encode()
    assert step == high  # the next step reaches it ...
    assert reader._idle_end(1200, 0.0).frontier.encode() > high  # ... and the one after passes it
    assert place(None, Lsn(5000).encode(), frontier) == Lsn(5000).encode()  # the WAL moved on: HIGH as read
    assert place(None, Lsn(5000).encode(), None) == Lsn(5000).encode()  # no capture yet
