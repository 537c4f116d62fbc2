"""A chunk row dropped for events that leave a TOASTed column out (PostgreSQL, REPLICA IDENTITY
DEFAULT) still holds that column's only full copy: the merge and reconcile.py keep it, whether the
events are in the chunk's window or before LOW but hidden from the chunk's snapshot. Found by the
PostgreSQL end-to-end test (tests/spark/test_merge.py), made deterministic here."""

from __future__ import annotations

import logging

import pytest

from capture.dump.reconcile import apply, reconcile_table
from capture.events import Change, Lsn, Op
from capture.merge.app import run_merge
from capture.sources.postgres.read_view import PgSnapshot
from capture.status import collect, render
from tests.integration.postgres.conftest import make_pg_capture, pg_database  # noqa: F401 - fixtures
from tests.integration.postgres.dumping import table_state, wait_until_landed
from tests.spark.landing import DOCS, Landing
from tests.spark.merging import changelog_replay, iceberg_state

pytestmark = pytest.mark.spark


def test_a_window_update_without_the_toasted_value_keeps_the_chunks_copy(spark, catalogs, tmp_path):
    landing = Landing(tmp_path, catalogs, "toast_window")
    commit, mark = landing.commit, landing.mark
    u, d, c = Op.UPDATE, Op.DELETE, Op.CREATE
    missing = ("body",)
    commit(100, DOCS, Change(Lsn(100), c, None, (9, "other", "x")))  # a target to MERGE into
    run_merge(spark, landing.config, "src")
    # committed before LOW (xid 106) but not yet visible to the chunk's snapshot (xmax 106)
    commit(106, DOCS, Change(Lsn(106), u, None, (6, "t6-new", None), missing))
    view = PgSnapshot.parse("100:106:", Lsn(105).encode())
    mark(110, "LOW", "low-1")
    commit(120, DOCS, Change(Lsn(120), u, None, (1, "t1-new", None), missing))  # body only in the chunk
    commit(121, DOCS, Change(Lsn(121), u, None, (2, "t2-new", "changed")))  # the event carries body
    commit(122, DOCS, Change(Lsn(122), d, (3, None, None), None, ("title", "body")))  # deleted: stays deleted
    commit(123, DOCS, Change(Lsn(123), u, None, (4, "t4-a", None), missing))  # two updates, both without body
    commit(124, DOCS, Change(Lsn(124), u, None, (4, "t4-b", None), missing))
    rows = [
        (1, "t1", "big1"),
        (2, "t2", "big2"),
        (3, "t3", "big3"),
        (4, "t4-a", "big4"),
        (5, "t5", "big5"),
        (6, "t6", "big6"),  # stale: the snapshot missed xid 106
        (9, "other", "x"),
    ]
    landing.chunk(rows, read_view=view)
    mark(130, "HIGH", "high-1")
    commit(140, DOCS, Change(Lsn(140), u, None, (1, "t1-later", None), missing))  # after HIGH: keeps it too
    run_merge(spark, landing.config, "src")

    expected = {
        (1,): {"id": 1, "title": "t1-later", "body": "big1"},
        (2,): {"id": 2, "title": "t2-new", "body": "changed"},
        (4,): {"id": 4, "title": "t4-b", "body": "big4"},
        (5,): {"id": 5, "title": "t5", "body": "big5"},
        (6,): {"id": 6, "title": "t6-new", "body": "big6"},
        (9,): {"id": 9, "title": "other", "body": "x"},
    }
    stream, stats = reconcile_table(landing.zone, "db", "docs")
    assert {k: dict(v) for k, v in apply(stream).items()} == expected
    assert (stats.dropped_by_window, stats.dropped_by_visibility) == (5, 1)
    assert iceberg_state(spark, "logtide.toast_window.db__docs") == expected
    assert changelog_replay(spark, "logtide.toast_window.db__docs__changelog") == expected


def test_a_key_change_takes_the_toasted_value_from_a_chunk_row_of_the_old_key(spark, catalogs, tmp_path):
    """A key change's create that leaves the body out (PostgreSQL, REPLICA IDENTITY DEFAULT) gets it from
    the old key's chunk row of the same run: one placed at HIGH before the key change, and ones the
    key change itself dropped (in the chunk's window, or committed before LOW but hidden from its
    snapshot), which were read before it. No row of these keys is in the target or the log before."""
    landing = Landing(tmp_path, catalogs, "toast_moved")
    commit, mark = landing.commit, landing.mark
    d, c = Op.DELETE, Op.CREATE
    key_only, no_body = ("title", "body"), ("body",)
    commit(100, DOCS, Change(Lsn(100), c, None, (9, "other", "x")))  # a target to MERGE into
    run_merge(spark, landing.config, "src")

    def move(major: int, old: int, new: int, title: str, xid: int | None = None) -> None:
        delete = Change(Lsn(major, 0), d, (old, None, None), None, key_only)
        commit(major, DOCS, delete, Change(Lsn(major, 1), c, None, (new, title, None), no_body), xid=xid)

    move(106, 3, 4, "t3")  # committed before LOW, invisible to the chunk's snapshot (xmax 106)
    mark(110, "LOW", "low-1")
    move(120, 7, 8, "t7")  # in the window, after the chunk read 7
    landing.chunk(
        [(3, "t3", "big3"), (5, "t5", "big5"), (7, "t7", "big7"), (9, "other", "x")],
        read_view=PgSnapshot.parse("100:106:", Lsn(105).encode()),
    )
    mark(130, "HIGH", "high-1")
    move(140, 5, 6, "t5")  # after HIGH: 5's chunk row is at HIGH
    (report,) = run_merge(spark, landing.config, "src")["tables"]

    expected = {
        (4,): {"id": 4, "title": "t3", "body": "big3"},
        (6,): {"id": 6, "title": "t5", "body": "big5"},
        (8,): {"id": 8, "title": "t7", "body": "big7"},
        (9,): {"id": 9, "title": "other", "body": "x"},
    }
    stream, stats = reconcile_table(landing.zone, "db", "docs")
    assert {k: dict(v) for k, v in apply(stream).items()} == expected and stats.unknown_values == []
    assert iceberg_state(spark, "logtide.toast_moved.db__docs") == expected
    assert changelog_replay(spark, "logtide.toast_moved.db__docs__changelog") == expected
    assert (report["key_changes_completed"], report["unknown_values"]) == (3, 0)


ROWS = [(3, "t3", "big3"), (7, "t7", "big7"), (9, "other", "x")]


def test_a_key_swap_inside_the_window_moves_the_toasted_values_with_the_rows(spark, catalogs, tmp_path):
    """Keys 3 and 7 trade rows through 8 in one transaction inside the chunk's window, after the
    chunk read both: each key ends with the other's body, which the swap's creates leave out (the
    key changes carry it over from the rows the target holds). The chunk's own rows of 3 and 7 are
    stale for that body and must not be placed again at HIGH as its only copy. Found by the
    convergence harness (PostgreSQL seed 105, `--ddl`): the target kept 3967's own TOASTed values
    where the source held 3713's."""
    landing = Landing(tmp_path, catalogs, "toast_swap")
    commit, mark = landing.commit, landing.mark
    d, c = Op.DELETE, Op.CREATE
    key_only, no_body = ("title", "body"), ("body",)
    commit(100, DOCS, *(Change(Lsn(100, i), c, None, r) for i, r in enumerate(ROWS)))  # the target holds them
    run_merge(spark, landing.config, "src")
    mark(110, "LOW", "low-1")
    landing.chunk(
        ROWS,
        read_view=PgSnapshot.parse("100:100:", Lsn(105).encode()),
    )
    swap = []
    for i, (old, new) in enumerate(((7, 8), (3, 7), (8, 3))):
        title = {7: "t7", 3: "t3", 8: "t7"}[old]
        swap.append(Change(Lsn(120, 2 * i), d, (old, None, None), None, key_only))
        swap.append(Change(Lsn(120, 2 * i + 1), c, None, (new, title, None), no_body))
    commit(120, DOCS, *swap)
    mark(130, "HIGH", "high-1")
    (report,) = run_merge(spark, landing.config, "src")["tables"]

    expected = {
        (3,): {"id": 3, "title": "t7", "body": "big7"},
        (7,): {"id": 7, "title": "t3", "body": "big3"},
        (9,): {"id": 9, "title": "other", "body": "x"},
    }
    stream, stats = reconcile_table(landing.zone, "db", "docs")
    assert {k: dict(v) for k, v in apply(stream).items()} == expected and stats.unknown_values == []
    assert iceberg_state(spark, "logtide.toast_swap.db__docs") == expected
    assert changelog_replay(spark, "logtide.toast_swap.db__docs__changelog") == expected
    assert report["unknown_values"] == 0


@pytest.mark.parametrize(
    ("snapshot", "read"),
    [("115:125:120", [(3, "t3", "big3"), (7, "t7", "big7")]), ("115:125:122", [(3, "t7", "big7"), (7, "t3", "big3")])],
    ids=["swap_in_progress", "other_in_progress"],
)
def test_a_first_dumps_snapshot_tells_whether_its_rows_saw_the_swap(spark, catalogs, tmp_path, snapshot, read):
    """The swap above (xid 120) in a first dump's window: no target row, nothing in the log before.
    The chunk's snapshot lists xid 120 in progress (its rows are the old keys': each gives the
    body its key change moved), or another one (120 had committed: the rows are the swapped ones).
    tests/unit/test_reconcile_visibility.py has reconcile.py's side, test_first_dump_key_swap_in_window
    a real server's."""
    landing = Landing(tmp_path, catalogs, f"toast_first_{snapshot.rsplit(':', 1)[1]}")
    commit, mark = landing.commit, landing.mark
    d, c = Op.DELETE, Op.CREATE
    key_only, no_body = ("title", "body"), ("body",)
    mark(110, "LOW", "low-1", xid=110)
    swap = []
    for i, (old, new) in enumerate(((7, 8), (3, 7), (8, 3))):
        title = {7: "t7", 3: "t3", 8: "t7"}[old]
        swap.append(Change(Lsn(120, 2 * i), d, (old, None, None), None, key_only))
        swap.append(Change(Lsn(120, 2 * i + 1), c, None, (new, title, None), no_body))
    commit(120, DOCS, *swap, xid=120)
    landing.chunk([*read, (9, "other", "x")], read_view=PgSnapshot.parse(snapshot, Lsn(105).encode()))
    mark(130, "HIGH", "high-1", xid=130)
    (report,) = run_merge(spark, landing.config, "src")["tables"]

    expected = {
        (3,): {"id": 3, "title": "t7", "body": "big7"},
        (7,): {"id": 7, "title": "t3", "body": "big3"},
        (9,): {"id": 9, "title": "other", "body": "x"},
    }
    target = f"logtide.{landing.config.merge.namespace}.db__docs"
    assert iceberg_state(spark, target) == expected
    assert changelog_replay(spark, target + "__changelog") == expected
    assert report["unknown_values"] == 0


# -- a primary-key change of a row whose TOASTed value it leaves alone (real PostgreSQL) ----------

BODY = "(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 1000))"  # 32,000 characters


def test_a_key_change_keeps_the_toasted_value_the_new_key_arrives_without(postgres, spark, catalogs, caplog, request):
    """Under REPLICA IDENTITY DEFAULT, `UPDATE ... SET id = new` arrives as a delete of the old key and
    a create of the new one without the unchanged out-of-line value (`_missing`). The merge completes
    it from the old key's state: (a) the target's stored row, (b) the row inserted earlier in the same
    run, (c) a chain of key changes in one run; (d) where nothing holds it (written before capture
    started, never dumped) the merge writes NULL and says so: a warning, the report, `logtide status`."""
    db, make = request.getfixturevalue("pg_database"), request.getfixturevalue("make_pg_capture")
    postgres.execute(
        "CREATE TABLE docs (id int PRIMARY KEY, title text, body text)",
        "ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL",  # out of line, uncompressed
        f"INSERT INTO docs VALUES (31, 't31', {BODY})",  # (d) history only the database holds
        database=db,
    )
    capture = make(["public.docs", "public.lt_marker"]).start()  # the marker: wait_until_landed
    capture.wait_running()
    config = capture.config.model_copy(
        update={"merge": catalogs["hadoop"].model_copy(update={"namespace": f"toast_{db}"})}
    )
    target = f"`logtide`.`toast_{db}`.`public__docs`"
    postgres.execute(f"INSERT INTO docs VALUES (1, 't1', {BODY}), (21, 't21', {BODY})", database=db)
    wait_until_landed(postgres, db, capture)
    run_merge(spark, config, "src")
    history = dict(table_state(postgres, db, "docs")[(31,)])

    postgres.execute(
        "UPDATE docs SET id = 2 WHERE id = 1",  # (a) the value is in the target
        f"INSERT INTO docs VALUES (11, 't11', {BODY})",
        "UPDATE docs SET id = 12 WHERE id = 11",  # (b) ... in this run's insert
        "UPDATE docs SET id = 22 WHERE id = 21",  # (c) ... through a chain
        "UPDATE docs SET id = 23, title = 't23' WHERE id = 22",
        "UPDATE docs SET id = 32 WHERE id = 31",  # (d) nowhere
        database=db,
    )
    wait_until_landed(postgres, db, capture)
    created = [e for e in capture.events("public", "docs") if e["_op"] == "c" and e["_missing"]]
    assert [(e["after"]["id"], e["after"]["body"], e["_missing"]) for e in created] == [
        (k, None, ["body"]) for k in (2, 12, 22, 23, 32)
    ]  # the new keys arrive without the body
    caplog.set_level(logging.INFO, logger="logtide.merge")
    (report,) = run_merge(spark, config, "src", ["public.docs"])["tables"]

    source = {k: dict(v) for k, v in table_state(postgres, db, "docs").items()}
    assert sorted(source) == [(2,), (12,), (23,), (32,)]
    want = {**source, (32,): {**source[(32,)], "body": None}}  # (d): unknowable, NULL and reported
    assert iceberg_state(spark, target) == want
    assert changelog_replay(spark, target[:-1] + "__changelog`") == want
    stream, stats = reconcile_table(capture.zone, "public", "docs")
    assert {k: dict(v) for k, v in apply(stream).items()} == want
    assert [(u.key, u.column) for u in stats.unknown_values] == [((32,), "body")]
    stream, stats = reconcile_table(capture.zone, "public", "docs", stored={(31,): history})  # as a target held it
    assert {k: dict(v) for k, v in apply(stream).items()} == source and stats.unknown_values == []

    assert report["unknown_values"] == 1
    warned = [r.fields for r in caplog.records if getattr(r, "event", None) == "merge.value_unknown"]
    assert [(w["table"], w["key"], w["column"]) for w in warned] == [("public.docs", "[32]", "body")]
    (status,) = [t for t in collect(config, ["src"])[0]["targets"] if t["table"] == "public.docs"]
    assert status["unknown_values"] == 1 and status["unknown_sample"][0]["key"] == [32]
    assert "1 value unknown after key changes" in render(collect(config, ["src"]))
    capture.stop()


# -- a key swap inside a first dump's window (real PostgreSQL): the chunk's snapshot decides -------

SWAP = (
    "BEGIN; UPDATE docs SET id = 100 WHERE id = 3; UPDATE docs SET id = 3 WHERE id = 7; "
    "UPDATE docs SET id = 7 WHERE id = 100; COMMIT"
)


# ids short enough that the database name (50 characters of the test's) differs per case: it is
# also the Iceberg namespace
@pytest.mark.parametrize("where", ["after LOW", "before HIGH"], ids=["read_after", "read_before"])
def test_first_dump_key_swap_in_window(postgres, spark, catalogs, request, where):
    """Rows 3 and 7 (TOASTed bodies, written before capture started) trade keys through 100 in one
    transaction inside the window of the chunk that reads them, in a table's first dump: the target
    holds neither row, and the swap's creates leave the bodies out. `after LOW`: the swap commits
    before the chunk's SELECT, whose snapshot sees it: the chunk's rows are the swapped ones and are
    the bodies' only copy at the new keys. `before HIGH`: the SELECT read the rows before the swap:
    each old key's chunk row holds the body its key change moved. Either way the target must equal
    the source with no value unknown; on main both cases left 3's and 7's bodies NULL, counted in
    `logtide.unknown-values`."""
    from tests.integration.dumping import StatementAt, run_dump

    db, make = request.getfixturevalue("pg_database"), request.getfixturevalue("make_pg_capture")
    postgres.execute(
        "CREATE TABLE docs (id int PRIMARY KEY, title text, body text)",
        "ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL",  # out of line, uncompressed
        "INSERT INTO docs SELECT g, 't' || g, repeat(md5(g::text), 1000) FROM generate_series(1, 9) g",
        database=db,
    )
    capture = make(["public.docs", "public.lt_marker"]).start()
    capture.wait_running()
    run_dump(
        capture,
        "public.docs",
        chunk_size=100,
        wrap=lambda source: StatementAt(source, lambda sql: postgres.execute(sql, database=db), 1, where, SWAP),
    )
    wait_until_landed(postgres, db, capture)
    created = [e for e in capture.events("public", "docs") if e["_op"] == "c"]
    assert [(e["after"]["id"], e["_missing"]) for e in created] == [(k, ["body"]) for k in (100, 3, 7)]
    config = capture.config.model_copy(
        update={"merge": catalogs["hadoop"].model_copy(update={"namespace": f"toast_{db}"})}
    )
    target = f"`logtide`.`toast_{db}`.`public__docs`"
    (report,) = run_merge(spark, config, "src", ["public.docs"])["tables"]

    source = {k: dict(v) for k, v in table_state(postgres, db, "docs").items()}
    assert source[(3,)]["title"] == "t7" and source[(3,)]["body"].startswith("8f14e45f")  # md5('7')
    stream, stats = reconcile_table(capture.zone, "public", "docs")
    assert {k: dict(v) for k, v in apply(stream).items()} == source and stats.unknown_values == []
    assert iceberg_state(spark, target) == source
    assert changelog_replay(spark, target[:-1] + "__changelog`") == source
    assert report["unknown_values"] == 0
    (status,) = [t for t in collect(config, ["src"])[0]["targets"] if t["table"] == "public.docs"]
    assert not status.get("unknown_values")
    capture.stop()
