"""Known gaps of the old-key rule (capture/dump/old_keys.py, found by an outside review; xfail until
fixed), and a case that holds: event sequences where reconcile.py's stream, whose rule the merge shares,
does not end at the source's rows. No server: landing zones written by LogWriter."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest

from capture.dump.reconcile import StreamEvent, apply, reconcile_table
from capture.events import Change, ChangeBatch, Column, Lsn, Op, TableSchema, TransactionEnd
from capture.landing import Checkpoint, LandingZone
from capture.landing.log_writer import LogWriter
from capture.sources.postgres.read_view import PgSnapshot
from tests.spark.landing import DOCS, Landing

pytestmark = pytest.mark.unit


def _table(key: tuple[str, ...]) -> TableSchema:
    columns = tuple(Column(n, pa.int32(), "integer") for n in ("id", "v", "v2"))
    return TableSchema("db", "t", columns, key)


@pytest.mark.xfail(
    strict=True,
    reason="old_keys.py: a future key column NULL under the old key (ADD COLUMN v2; backfill; "
    "SET NOT NULL; ADD PRIMARY KEY (v2)) is taken for 'no former run key', so the backfill UPDATE "
    "leaves no delete and the target keeps the row under v2 = NULL beside the backfilled one",
)
def test_a_backfilled_future_key_leaves_no_row_under_null(tmp_path):
    zone = LandingZone(tmp_path / "landing", "src")
    writer = LogWriter(zone, Checkpoint(Lsn(1), {}), flush_interval_s=0, max_buffer_rows=1_000)
    now = datetime.now(UTC)

    def commit(major: int, schema: TableSchema, *changes: Change) -> None:
        writer.add(ChangeBatch(schema, str(major), now, False, list(changes)))
        writer.end_transaction(TransactionEnd(Lsn(major + 1), {}, now))
        writer.commit()

    by_id, by_v2 = _table(("id",)), _table(("v2",))
    # the target holds row 1 merged before v2 was filled (v2 NULL), row 2 is inserted in this run
    commit(100, by_id, Change(Lsn(100, 0), Op.CREATE, None, (2, 2, None)))
    commit(  # the backfill: v2 changed, no old tuple (it was no key then)
        110,
        by_id,
        Change(Lsn(110, 0), Op.UPDATE, None, (1, 1, 1001)),
        Change(Lsn(110, 1), Op.UPDATE, None, (2, 2, 1002)),
    )
    commit(120, by_v2, Change(Lsn(120, 0), Op.UPDATE, None, (1, 5, 1001)))  # after the swap
    target = {(None,): {"id": 1, "v": 1, "v2": None}}
    stream, _ = reconcile_table(zone, "db", "t", target)
    seeded = [StreamEvent(0, 0, "c", k, r) for k, r in target.items()]
    assert apply(seeded + stream) == {
        (1001,): {"id": 1, "v": 5, "v2": 1001},
        (1002,): {"id": 2, "v": 2, "v2": 1002},
    }


@pytest.mark.xfail(
    strict=True,
    reason="old_keys.py `find`: a value of a key that was not unique yet (v2 before ADD PRIMARY KEY (v2)) "
    "is put in `gone` when one of two rows holding it leaves it, so a later delete logged under v2 "
    "(key swapped id -> v2 -> id in one run) finds no row: reported unknown, the row stays",
)
def test_a_swap_back_finds_a_row_whose_future_key_value_another_row_left(tmp_path):
    zone = LandingZone(tmp_path / "landing", "src")
    writer = LogWriter(zone, Checkpoint(Lsn(1), {}), flush_interval_s=0, max_buffer_rows=1_000)
    now = datetime.now(UTC)

    def commit(major: int, schema: TableSchema, *changes: Change) -> None:
        writer.add(ChangeBatch(schema, str(major), now, False, list(changes)))
        writer.end_transaction(TransactionEnd(Lsn(major + 1), {}, now))
        writer.commit()

    by_id, by_v2 = _table(("id",)), _table(("v2",))
    commit(100, by_id, Change(Lsn(100, 0), Op.CREATE, None, (1, 1, 5)), Change(Lsn(100, 1), Op.CREATE, None, (2, 2, 5)))
    commit(110, by_id, Change(Lsn(110, 0), Op.UPDATE, None, (2, 2, 6)))  # v2 unique now: ADD PRIMARY KEY (v2)
    commit(120, by_v2, Change(Lsn(120, 0), Op.DELETE, (None, None, 5), None, ("id", "v")))  # row 1
    commit(130, by_id, Change(Lsn(130, 0), Op.UPDATE, None, (2, 9, 6)))  # the key swapped back to id
    stream, stats = reconcile_table(zone, "db", "t")
    assert apply(stream) == {(2,): {"id": 2, "v": 9, "v2": 6}}
    assert stats.unknown_values == []


def _swap(landing: Landing, major: int, titles: dict[int, str]) -> None:
    """3 -> 8, 7 -> 3, 8 -> 7 in one transaction (xid `major`), each create without the body."""
    changes = []
    for i, (old, new) in enumerate(((3, 8), (7, 3), (8, 7))):
        changes.append(Change(Lsn(major, 2 * i), Op.DELETE, (old, None, None), None, ("title", "body")))
        changes.append(Change(Lsn(major, 2 * i + 1), Op.CREATE, None, (new, titles[old], None), ("body",)))
    landing.commit(major, DOCS, *changes, xid=major)


def test_two_key_swaps_in_a_window_the_snapshot_saw_the_first_of(catalogs, tmp_path):
    """Passes on main: the second swap's creates take the bodies from the chunk rows read between."""
    landing = Landing(tmp_path, catalogs, "unused")
    landing.commit(100, DOCS, Change(Lsn(100), Op.UPDATE, None, (1, "t1", "big1")))
    landing.mark(110, "LOW", "low-1", xid=110)
    _swap(landing, 120, {3: "t3", 7: "t7", 8: "t3"})  # 3 holds t7/big7, 7 holds t3/big3
    landing.chunk(  # read after the first swap, before the second (xmax 121: 140 not seen)
        [(3, "t7", "big7"), (7, "t3", "big3"), (9, "other", "x")],
        read_view=PgSnapshot.parse("121:121:", Lsn(105).encode()),
    )
    _swap(landing, 140, {3: "t7", 7: "t3", 8: "t7"})  # swapped back
    landing.mark(150, "HIGH", "high-1", xid=150)
    stream, stats = reconcile_table(landing.zone, "db", "docs")
    state = {k: dict(v) for k, v in apply(stream).items()}
    assert state == {
        (1,): {"id": 1, "title": "t1", "body": "big1"},
        (3,): {"id": 3, "title": "t3", "body": "big3"},
        (7,): {"id": 7, "title": "t7", "body": "big7"},
        (9,): {"id": 9, "title": "other", "body": "x"},
    }
    assert stats.unknown_values == []
