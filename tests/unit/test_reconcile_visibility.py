"""reconcile.py (and the online interleaver, which shares its rule) on a key swap inside a chunk's
window in a table's first dump (PostgreSQL, REPLICA IDENTITY DEFAULT): the swap's creates leave
the TOASTed body out, no target row holds it, and the chunk's snapshot tells whether its rows were
read before the swap (each old key's row holds the body its key change moved) or after it (the
rows are the swapped ones). No server: a landing zone written by capture's LogWriter."""

from __future__ import annotations

import pytest

from capture.dump.reconcile import apply, reconcile_table
from capture.events import Change, Lsn, Op
from capture.sources.postgres.read_view import PgSnapshot
from tests.spark.landing import DOCS, Landing

pytestmark = pytest.mark.unit

KEY_ONLY, NO_BODY = ("title", "body"), ("body",)
BEFORE = [(3, "t3", "big3"), (7, "t7", "big7"), (9, "other", "x")]
AFTER = [(3, "t7", "big7"), (7, "t3", "big3"), (9, "other", "x")]
SWAPPED = {
    (3,): {"id": 3, "title": "t7", "body": "big7"},
    (7,): {"id": 7, "title": "t3", "body": "big3"},
    (9,): {"id": 9, "title": "other", "body": "x"},
}


def swap(landing: Landing, major: int = 120, titles: dict[int, str] | None = None) -> None:
    """3 -> 8, 7 -> 3, 8 -> 7 in one transaction (xid and LSN `major`), each create without the body;
    `titles`: the title each old key's row holds (by default the rows of BEFORE)."""
    titles = titles or {3: "t3", 7: "t7", 8: "t3"}
    changes = []
    for i, (old, new) in enumerate(((3, 8), (7, 3), (8, 7))):
        changes.append(Change(Lsn(major, 2 * i), Op.DELETE, (old, None, None), None, KEY_ONLY))
        changes.append(Change(Lsn(major, 2 * i + 1), Op.CREATE, None, (new, titles[old], None), NO_BODY))
    landing.commit(major, DOCS, *changes, xid=major)


# the LOW watermark is xid 110; the swap xid 120: not seen at xmax 120 or while in progress,
# seen at xmax 121 or past it when no longer in progress
@pytest.mark.parametrize(
    ("snapshot", "rows"),
    [("111:120:", BEFORE), ("115:125:120", BEFORE), ("121:121:", AFTER), ("115:125:122", AFTER)],
    ids=["before-xmax", "before-in-progress", "after-xmax", "after-other-in-progress"],
)
def test_a_key_swap_in_a_first_dumps_window_follows_the_chunks_snapshot(catalogs, tmp_path, snapshot, rows):
    landing = Landing(tmp_path, catalogs, "unused")
    landing.commit(100, DOCS, Change(Lsn(100), Op.UPDATE, None, (1, "t1", "big1")))  # another key: a log
    landing.mark(110, "LOW", "low-1", xid=110)
    swap(landing)
    landing.chunk(rows, read_view=PgSnapshot.parse(snapshot, Lsn(105).encode()))
    landing.mark(130, "HIGH", "high-1", xid=130)

    stream, stats = reconcile_table(landing.zone, "db", "docs")
    state = {k: dict(v) for k, v in apply(stream).items()}
    assert state == {**SWAPPED, (1,): {"id": 1, "title": "t1", "body": "big1"}}
    assert stats.unknown_values == []


def test_without_a_read_view_the_swapped_values_stay_unknown(catalogs, tmp_path):
    """MySQL/MariaDB chunks have no read view (and their key changes carry every column): without
    one the read may have been anywhere in the window, so neither row is taken for the moved body."""
    landing = Landing(tmp_path, catalogs, "unused")
    landing.mark(110, "LOW", "low-1", xid=110)
    swap(landing)
    landing.chunk(AFTER)
    landing.mark(130, "HIGH", "high-1", xid=130)
    stream, stats = reconcile_table(landing.zone, "db", "docs")
    assert {k: v["body"] for k, v in apply(stream).items()} == {(3,): None, (7,): None, (9,): "x"}
    assert sorted((u.key, u.column) for u in stats.unknown_values) == [((3,), "body"), ((7,), "body")]


def test_two_key_swaps_in_a_window_the_snapshot_saw_the_first_of(catalogs, tmp_path):
    """Passes on main: the second swap's creates take the bodies from the chunk rows read between."""
    landing = Landing(tmp_path, catalogs, "unused")
    landing.commit(100, DOCS, Change(Lsn(100), Op.UPDATE, None, (1, "t1", "big1")))
    landing.mark(110, "LOW", "low-1", xid=110)
    swap(landing, 120)  # 3 holds t7/big7, 7 holds t3/big3
    landing.chunk(  # read after the first swap, before the second (xmax 121: 140 not seen)
        [(3, "t7", "big7"), (7, "t3", "big3"), (9, "other", "x")],
        read_view=PgSnapshot.parse("121:121:", Lsn(105).encode()),
    )
    swap(landing, 140, {3: "t7", 7: "t3", 8: "t7"})  # swapped back
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
