"""PostgreSQL's read view of a chunk (capture/sources/postgres/read_view.py): stored in the chunk file as
before, and the visibility rule reconciliation asks it about; and the target contract's `recorded`."""

from __future__ import annotations

import json

import pytest

from capture.landing.chunks import ChunkMeta
from capture.merge.target import recorded
from capture.sources.postgres.read_view import PgSnapshot

pytestmark = pytest.mark.unit

EPOCH = 1 << 32


def _meta(view: PgSnapshot | None) -> ChunkMeta:
    return ChunkMeta("d1", "public.t", 1, "l", "h", ("id",), None, None, None, True, None, 0, view)


def test_the_chunk_file_keeps_the_snapshot_text_and_reads_it_back_typed():
    view = PgSnapshot.parse("470:495:480,490", 12345678901234567890123)
    stored = json.loads(_meta(view).to_json())["read_view"]
    assert stored == {"snapshot": "470:495:480,490", "before_low": "12345678901234567890123"}  # the format of old files
    assert ChunkMeta.from_json(_meta(view).to_json()).read_view == view
    assert ChunkMeta.from_json(_meta(None).to_json()).read_view is None
    old = json.loads(_meta(None).to_json()) | {"read_view": {"snapshot": "100:106:", "before_low": "7"}}
    assert ChunkMeta.from_json(json.dumps(old)).read_view == PgSnapshot(100, 106, (), 7)


def test_hidden_are_in_progress_transactions_and_those_begun_after_the_snapshot_near_low():
    view = PgSnapshot.parse("470:495:480", before_low=1000)
    assert view.hides(10, 480)  # in progress: hidden wherever it is before LOW
    assert view.hides(1000, 495) and view.hides(1500, 600)  # xid at or past xmax, in [before_low, LOW)
    assert not view.hides(999, 495)  # before before_low: committed before the snapshot could miss it
    assert not view.hides(1500, 470) and not view.hides(1500, 494)  # committed, visible
    assert not view.hides(1500, None)  # no xid in the log: nothing to say


def test_a_read_only_view_hides_every_xid_it_could_not_see_whatever_its_lsn():
    """No LOW row of the dump's own bounds xmax: a transaction whose commit record is in the WAL long
    before LOW (a synchronous standby holding its visibility back) can still have an xid >= xmax."""
    view = PgSnapshot.parse("470:495:480", before_low=1000, readonly=True)
    assert view.hides(10, 480) and view.hides(10, 495) and view.hides(999, 600)
    assert not view.hides(10, 470) and not view.hides(999, 494) and not view.hides(10, None)
    stored = json.loads(_meta(view).to_json())["read_view"]
    assert stored == {"snapshot": "470:495:480", "before_low": "1000", "readonly": True}
    assert ChunkMeta.from_json(_meta(view).to_json()).read_view == view


def test_xids_are_widened_across_the_epoch_boundary():
    view = PgSnapshot(EPOCH + 5, EPOCH + 10, (EPOCH - 3,), before_low=0)
    assert view.hides(1, 2**32 - 3)  # the in-progress xid of the previous epoch, as the log's 32 bits
    assert not view.hides(1, 2**32 - 20)  # previous epoch, committed
    assert view.hides(1, 10) and not view.hides(1, 9)


def test_recorded_is_the_newest_summary_that_has_it_else_the_property():
    assert recorded([{"a": "1"}, {"k": "2"}, {"k": "1"}], {"k": "0"}, "k") == "2"
    assert recorded([{"a": "1"}, None], {"k": "0"}, "k") == "0"  # snapshot expiry removed the summaries
    assert recorded([], None, "k") is None  # no snapshot: a property alone is not a merge's
