"""The merge on landing zones written by capture's own LogWriter, without a database: columns a
log event does not carry (PostgreSQL leaves unchanged TOASTed values out of updates) keep the
stored value, as capture/dump/reconcile.py's `apply` does; chunk rows a PostgreSQL snapshot
could not see updated are dropped, and a key it could not see created is not repaired away."""

from __future__ import annotations

import pytest

from capture.dump.reconcile import apply, reconcile_table
from capture.events import Change, Lsn, Op
from capture.merge.app import run_merge
from capture.sources.postgres.read_view import PgSnapshot
from tests.spark.landing import DOCS, Landing
from tests.spark.merging import changelog_replay, iceberg_state

pytestmark = pytest.mark.spark


def test_columns_an_event_does_not_carry_keep_the_stored_value(spark, catalogs, tmp_path):
    landing = Landing(tmp_path, catalogs, "toast")
    major = 100

    def transaction(*changes: tuple[Op, tuple | None, tuple | None, tuple[str, ...]]) -> None:
        nonlocal major
        major += 10
        landing.commit(major, DOCS, *(Change(Lsn(major, i), *change) for i, change in enumerate(changes)))

    c, u, d = Op.CREATE, Op.UPDATE, Op.DELETE
    transaction((c, None, (1, "a", "big1"), ()), (c, None, (2, "b", "big2"), ()), (c, None, (4, "d", "big4"), ()))
    run_merge(spark, landing.config, "src")
    # later runs: an update that leaves `body` out (NULL there means unknown), a row created and
    # updated the same way within one run, a real NULL, and a delete
    transaction((u, (1, "a", None), (1, "a2", None), ("body",)), (c, None, (3, "c", "big3"), ()))
    transaction((u, (3, "c", None), (3, "c2", None), ("body",)), (u, (2, "b", "big2"), (2, "b2", None), ()))
    transaction((d, (4, "d", "big4"), None, ()))
    run_merge(spark, landing.config, "src")
    transaction((u, (1, "a2", None), (1, "a3", None), ("body",)))
    run_merge(spark, landing.config, "src")

    target = iceberg_state(spark, "logtide.toast.db__docs")
    assert target == {
        (1,): {"id": 1, "title": "a3", "body": "big1"},
        (2,): {"id": 2, "title": "b2", "body": None},
        (3,): {"id": 3, "title": "c2", "body": "big3"},
    }
    stream, _ = reconcile_table(landing.zone, "db", "docs")
    assert {k: dict(v) for k, v in apply(stream).items()} == target
    assert changelog_replay(spark, "logtide.toast.db__docs__changelog") == target


def test_chunk_rows_a_postgres_snapshot_could_not_see_updated_are_dropped(spark, catalogs, tmp_path):
    """A chunk's snapshot (xmin:xmax:xip) misses a transaction whose commit is already in the WAL
    before LOW: that chunk row is older than the log, as reconcile.py's `hidden_events` says."""
    landing = Landing(tmp_path, catalogs, "visibility")
    c, u = Op.CREATE, Op.UPDATE
    landing.commit(110, DOCS, *(Change(Lsn(110, i), c, None, (i, f"t{i}", "old")) for i in range(1, 7)), xid=100)
    run_merge(spark, landing.config, "src")
    before_low = Lsn(125).encode()
    in_progress = Change(Lsn(127), u, (2, "t2", "old"), (2, "t2", "new"))
    landing.commit(127, DOCS, in_progress, xid=480)  # in progress for the snapshot
    landing.commit(130, DOCS, Change(Lsn(130), u, (3, "t3", "old"), (3, "t3", "new")), xid=500)  # xid >= xmax: not seen
    landing.commit(135, DOCS, Change(Lsn(135), u, (4, "t4", "old"), (4, "t4", "new")), xid=450)  # seen by the snapshot
    landing.mark(140, "LOW", "low-1", xid=230)
    landing.commit(150, DOCS, Change(Lsn(150), u, (5, "t5", "old"), (5, "t5", "new")), xid=510)  # in the window
    rows = [(1, "t1", "old"), (2, "t2", "old"), (3, "t3", "old"), (4, "t4", "new"), (5, "t5", "old"), (6, "t6", "x")]
    landing.chunk(rows, read_view=PgSnapshot.parse("470:495:480", before_low))
    landing.mark(160, "HIGH", "high-1", xid=250)
    report = run_merge(spark, landing.config, "src")["tables"][0]

    stream, stats = reconcile_table(landing.zone, "db", "docs")
    assert stats.dropped_by_visibility == 2 and stats.dropped_by_window == 3
    assert report["dropped_by_window"] == 3
    expected = {k: dict(v) for k, v in apply(stream).items()}
    assert iceberg_state(spark, "logtide.visibility.db__docs") == expected
    assert expected[(2,)]["body"] == expected[(3,)]["body"] == "new" and expected[(6,)]["body"] == "x"


def test_a_key_a_postgres_snapshot_could_not_see_created_is_not_deleted_by_the_repair(spark, catalogs, tmp_path):
    """A row created by a transaction whose commit is in the WAL before LOW but that the chunk's
    snapshot still saw in progress: the chunk does not return it, and the target (which has it from
    the log, merged earlier) must keep it: the source holds it."""
    landing = Landing(tmp_path, catalogs, "hidden_repair")
    c = Op.CREATE
    landing.commit(110, DOCS, Change(Lsn(110), c, None, (1, "t1", "x")), xid=100)
    landing.commit(127, DOCS, Change(Lsn(127), c, None, (7, "t7", "x")), xid=480)  # in progress for the snapshot
    run_merge(spark, landing.config, "src")
    landing.mark(140, "LOW", "low-1", xid=230)
    landing.chunk([(1, "t1", "x")], read_view=PgSnapshot.parse("470:495:480", Lsn(125).encode()))
    landing.mark(160, "HIGH", "high-1", xid=250)
    report = run_merge(spark, landing.config, "src")["tables"][0]

    assert report["chunks"] == 1 and report["repair_deletes"] == 0
    assert set(iceberg_state(spark, "logtide.hidden_repair.db__docs")) == {(1,), (7,)}


def test_a_completed_full_dump_deletes_what_none_of_its_chunks_returned_under_any_order(spark, catalogs, tmp_path):
    """Chunks whose key order is not Spark's make no range deletes; the run that merges the dump's
    last chunk deletes the target keys none of its chunks returned (7, which the source lost
    behind the capture's back), but not a key created during the dump behind a chunk already
    read (0), nor one the log touched during the dump (5 is returned; 9 is deleted by the log).
    The dump's chunks are merged by two runs."""
    landing = Landing(tmp_path, catalogs, "completed")
    c, d = Op.CREATE, Op.DELETE
    landing.commit(100, DOCS, *(Change(Lsn(100, i), c, None, (k, f"t{k}", "x")) for i, k in enumerate((1, 5, 7, 9))))
    run_merge(spark, landing.config, "src")
    landing.mark(110, "LOW", "low-1")
    landing.chunk([(1, "t1", "x")], number=1, last=False, exact_order=False)
    landing.mark(120, "HIGH", "high-1")
    first = run_merge(spark, landing.config, "src", frontier=Lsn(121).encode())["tables"][0]
    landing.commit(125, DOCS, Change(Lsn(125), c, None, (0, "t0", "new")))  # behind chunk 1: no chunk returns it
    landing.commit(126, DOCS, Change(Lsn(126), d, (9, "t9", "x"), None))
    landing.mark(130, "LOW", "low-2", chunk=2)
    landing.chunk([(5, "t5", "x")], number=2, after=(1,), exact_order=False)
    landing.mark(140, "HIGH", "high-2", chunk=2)
    second = run_merge(spark, landing.config, "src")["tables"][0]

    assert (first["chunks"], first["repair_deletes"]) == (1, 0)
    assert (second["chunks"], second["repair_deletes"]) == (1, 1)
    target = iceberg_state(spark, "logtide.completed.db__docs")
    assert set(target) == {(0,), (1,), (5,)}
    assert changelog_replay(spark, "logtide.completed.db__docs__changelog") == target


def test_a_target_merged_from_another_landing_zone_is_refused(spark, catalogs, tmp_path):
    """A source set up again (a new landing zone, its LSNs starting low) beside the old warehouse:
    its targets hold a frontier past all the new zone has committed. Skipped as up to date, they
    would keep the old rows and never take the new zone's events below that frontier."""
    c = Op.CREATE
    old = Landing(tmp_path / "old", catalogs, "moved")
    old.commit(900, DOCS, Change(Lsn(900), c, None, (1, "old", "x")), Change(Lsn(900, 1), c, None, (2, "old", "y")))
    run_merge(spark, old.config, "src")
    new = Landing(tmp_path / "new", catalogs, "moved")
    new.commit(110, DOCS, Change(Lsn(110), c, None, (7, "new", "z")))

    report = run_merge(spark, new.config, "src")
    assert [f["table"] for f in report["failed"]] == ["db.docs"]
    assert "another landing zone" in report["failed"][0]["failed"]
    assert iceberg_state(spark, "logtide.moved.db__docs") == {  # nothing changed
        (1,): {"id": 1, "title": "old", "body": "x"},
        (2,): {"id": 2, "title": "old", "body": "y"},
    }
    spark.sql("DROP TABLE logtide.moved.db__docs")  # what the message says to do
    spark.sql("DROP TABLE logtide.moved.db__docs__changelog")
    run_merge(spark, new.config, "src")
    assert iceberg_state(spark, "logtide.moved.db__docs") == {(7,): {"id": 7, "title": "new", "body": "z"}}
