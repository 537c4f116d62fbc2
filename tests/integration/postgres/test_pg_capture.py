"""The capture service against a real PostgreSQL 15 (pgoutput): what lands, in which order,
across stops, restarts and resets, and what is refused."""

from __future__ import annotations

import signal
import tempfile
import urllib.request
from pathlib import Path

import pytest

from capture.dump.reconcile import apply, reconcile_table
from capture.landing.reader import landed_truncates
from capture.sources.base import Watermark
from capture.sources.postgres.connection import parse_lsn
from tests.integration.events import op_keys, write_watermark
from tests.servers import PostgreSQL, wait_for

pytestmark = pytest.mark.integration

# random, hence incompressible: stored out of line (TOASTed), not inline
BIG_TEXT = "(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 300))"


def test_row_changes_land_in_commit_order_with_images(postgres, pg_database, make_pg_capture):
    postgres.execute(
        "CREATE TABLE items (id int PRIMARY KEY, name text, qty int)",
        "CREATE TABLE skipped (id int PRIMARY KEY)",
        database=pg_database,
    )
    capture = make_pg_capture(["public.*"], exclude=["public.skipped"]).start()
    capture.wait_running()
    first = postgres.connect(pg_database, autocommit=False)
    second = postgres.connect(pg_database, autocommit=False)
    with first.cursor() as a, second.cursor() as b:
        a.execute("INSERT INTO items VALUES (1, 'one', 1), (2, 'two', 2)")  # begins first ...
        b.execute("INSERT INTO items VALUES (3, 'three', 3)")
        b.execute("INSERT INTO skipped VALUES (1)")
        second.commit()  # ... but commits second: commit order wins
        first.commit()
        a.execute("UPDATE items SET qty = 10 WHERE id = 1")
        a.execute("UPDATE items SET id = 20 WHERE id = 2")  # key change
        first.commit()
    first.close()
    second.close()
    write_watermark(capture, Watermark("d1", f"{pg_database}.items", 1, "LOW", "wm-1"))
    postgres.execute("DELETE FROM items WHERE id = 1", database=pg_database)

    events = capture.wait_events("public", "items", 7)
    assert op_keys(events) == [
        ("c", None, 3),
        ("c", None, 1),
        ("c", None, 2),
        ("u", None, 1),  # REPLICA IDENTITY DEFAULT: no before image of an update
        ("d", 2, None),
        ("c", None, 20),
        ("d", 1, None),
    ]
    assert events[3]["after"] == {"id": 1, "name": "one", "qty": 10}
    assert events[4]["before"] == {"id": 2, "name": None, "qty": None}  # a key-only old image ...
    assert events[4]["_missing"] == ["name", "qty"]  # ... says which values it does not carry
    assert events[5]["after"] == {"id": 20, "name": "two", "qty": 2} and not events[5]["_missing"]
    lsns = [int(e["_lsn"]) for e in events]
    assert lsns == sorted(lsns) and len(set(lsns)) == len(lsns)
    # one transaction: one xid, one commit LSN (the major), consecutive minors
    assert events[1]["_txid"] == events[2]["_txid"] != events[0]["_txid"]
    assert all(e["_txid"].isdigit() for e in events)
    assert lsns[2] - lsns[1] == 1 and lsns[1] >> 32 == lsns[2] >> 32
    assert not any(e["_watermark"] for e in events)

    watermarks = capture.wait_events("logtide", "watermarks", 1)
    mark = watermarks[-1]["after"]
    assert watermarks[-1]["_watermark"] is True
    assert (mark["dump_id"], mark["kind"], mark["watermark_id"]) == ("d1", "LOW", "wm-1")
    assert lsns[-2] < int(watermarks[-1]["_lsn"]) < lsns[-1]
    assert capture.events("public", "skipped") == []
    history = capture.zone.read_schema_history().to_pylist()
    items = [h for h in history if h["table"] == "items"]
    assert [(c["name"], c["source_type"]) for c in items[0]["columns"]] == [
        ("id", "integer"),
        ("name", "text"),
        ("qty", "integer"),
    ]
    assert items[0]["key"] == ["id"]
    assert capture.stop() == 0
    assert "capture.stopped" in capture.log()


@pytest.mark.parametrize("identity", ["DEFAULT", "FULL"])
def test_unchanged_toasted_values_are_never_null(postgres, pg_database, make_pg_capture, identity):
    postgres.execute(
        "CREATE TABLE docs (id int PRIMARY KEY, v int, body text, doc jsonb)",
        f"ALTER TABLE docs REPLICA IDENTITY {identity}",
        database=pg_database,
    )
    capture = make_pg_capture().start()
    capture.wait_running()
    postgres.execute(
        f"INSERT INTO docs VALUES (1, 0, {BIG_TEXT}, jsonb_build_object('k', {BIG_TEXT})), (2, 0, 'short', '{{}}')",
        "UPDATE docs SET v = v + 1",  # the TOASTed values are not touched
        "UPDATE docs SET id = 10 WHERE id = 1",  # key change of a row with TOASTed values
        "UPDATE docs SET body = 'changed', v = 5 WHERE id = 10",
        database=pg_database,
    )
    events = capture.wait_events("public", "docs", 7)
    body = postgres.query("SELECT body, doc::text FROM docs WHERE id = 10", database=pg_database)[0]
    update = events[2]
    assert update["_op"] == "u" and update["after"]["id"] == 1 and update["after"]["v"] == 1
    if identity == "FULL":
        # the old row carries every value: the new image is completed from it
        assert update["before"]["body"] == update["after"]["body"] and len(update["after"]["body"]) == 9600
        assert not update.get("_missing")
    else:
        assert update["before"] is None
        assert update["after"]["body"] is None and update["after"]["doc"] is None
        assert update["_missing"] == ["body", "doc"]
    assert events[3]["after"] == {"id": 2, "v": 1, "body": "short", "doc": "{}"}
    if identity == "DEFAULT":
        # a key change under REPLICA IDENTITY DEFAULT creates a row whose untouched TOASTed values the log lacks
        assert events[5]["_op"] == "c" and events[5]["_missing"] == ["body", "doc"]
    # replaying the log keeps stored values where the log has none, across the key change too
    # (the new key takes the old key's values: capture/dump/key_changes.py)
    state = apply(reconcile_table(capture.zone, "public", "docs")[0])
    rows = {r[0]: r for r in postgres.query("SELECT id, v, body, doc::text FROM docs", database=pg_database)}
    assert {k[0]: (v["id"], v["v"], v["body"], v["doc"]) for k, v in state.items()} == rows
    assert state[(10,)]["doc"] == body[1] and state[(10,)]["body"] == "changed"


def test_sigterm_stops_cleanly_and_restart_resumes_exactly(postgres, pg_database, make_pg_capture):
    postgres.execute("CREATE TABLE t (id int PRIMARY KEY)", database=pg_database)
    capture = make_pg_capture().start()
    capture.wait_running()
    postgres.execute("INSERT INTO t SELECT generate_series(1, 100)", database=pg_database)
    capture.wait_events("public", "t", 100)
    assert capture.stop(signal.SIGTERM) == 0
    slot = capture.config.source("src").slot
    confirmed = postgres.query(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
    )[0][0]
    assert parse_lsn(confirmed) >= capture.zone.checkpoint().frontier.major  # feedback reached the slot
    for start in range(101, 251, 50):  # while stopped
        postgres.execute(f"INSERT INTO t SELECT generate_series({start}, {start + 49})", database=pg_database)
    capture.start()
    events = capture.wait_events("public", "t", 250)
    assert [e["after"]["id"] for e in events] == list(range(1, 251))
    assert "capture.resuming" in capture.log()
    assert capture.stop(signal.SIGINT) == 0


def test_truncate_lands_in_order_one_per_relation_and_once_across_a_kill(postgres, pg_database, make_pg_capture):
    """TRUNCATE lands as one `truncate` record per captured relation the message lists (CASCADE
    included), in log order inside its transaction; replayed, the landing zone gives SELECT's rows.
    A SIGKILL and a restart neither lose nor double one."""
    postgres.execute(
        "CREATE TABLE t (id int PRIMARY KEY, v int)",
        "CREATE TABLE child (id int PRIMARY KEY, t_id int REFERENCES t (id))",
        "CREATE TABLE skipped (id int PRIMARY KEY)",
        database=pg_database,
    )
    capture = make_pg_capture(["public.*"], exclude=["public.skipped"]).start()
    capture.wait_running()
    postgres.execute(
        "INSERT INTO t VALUES (1, 1), (2, 2)",
        "INSERT INTO child VALUES (10, 1)",
        # a key change before it (a delete and a create: two places in the transaction)
        "BEGIN; UPDATE t SET v = 20 WHERE id = 2; UPDATE t SET id = 4 WHERE id = 2;"
        " TRUNCATE t, skipped CASCADE; INSERT INTO t VALUES (2, 5); COMMIT",
        database=pg_database,
    )
    capture.wait_events("public", "t", 6)
    capture.kill()
    postgres.execute(
        "INSERT INTO t VALUES (3, 3)", "INSERT INTO child VALUES (11, 3)", "TRUNCATE child", database=pg_database
    )
    capture.start()
    capture.wait_running()
    capture.wait_events("public", "t", 7)
    postgres.execute("INSERT INTO child VALUES (12, 2)", database=pg_database)
    capture.wait_events("public", "child", 3)
    frontier = capture.zone.checkpoint().frontier.encode()
    truncates = landed_truncates(capture.zone, frontier)
    assert [(t.table) for t in truncates] == ["t", "child", "child"]  # `skipped` is not captured
    assert truncates[0].lsn >> 32 == truncates[1].lsn >> 32  # one transaction, consecutive places
    assert truncates[1].lsn == truncates[0].lsn + 1
    t_events = [int(e["_lsn"]) for e in capture.events("public", "t")]
    assert [e["_op"] for e in capture.events("public", "t")][2:6] == ["u", "d", "c", "c"]
    assert t_events[4] < truncates[0].lsn < t_events[5]  # after the key change, before the insert
    for table in ("t", "child"):
        state = apply(reconcile_table(capture.zone, "public", table)[0])
        rows = postgres.query(f"SELECT * FROM {table}", database=pg_database)
        assert sorted(tuple(r.values()) for r in state.values()) == sorted(rows), table
    assert capture.stop(signal.SIGINT) == 0


def test_missing_slot_is_refused_and_reset_recreates_it(postgres, pg_database, make_pg_capture):
    postgres.execute("CREATE TABLE t (id int PRIMARY KEY)", database=pg_database)
    capture = make_pg_capture().start()
    capture.wait_running()
    assert capture.stop() == 0
    before = capture.zone.checkpoint()
    slot = capture.config.source("src").slot
    postgres.execute(f"SELECT pg_drop_replication_slot('{slot}')")
    postgres.execute("INSERT INTO t VALUES (1)", database=pg_database)

    assert capture.run_to_exit() == 2
    log = capture.log()
    assert f"replication slot '{slot}' does not exist" in log and "--reset" in log and "full dump" in log
    assert capture.zone.checkpoint() == before  # refused: nothing changed

    capture.start("--reset")
    wait_for(lambda: "capture.reset" in capture.log(), 30, what="reset")
    postgres.execute("INSERT INTO t VALUES (2)", database=pg_database)
    events = capture.wait_events("public", "t", 1)
    assert [e["after"]["id"] for e in events] == [2]
    assert capture.zone.checkpoint().frontier > before.frontier
    assert capture.stop() == 0

    capture.start("--reset")  # an existing slot: dropped and created again, and said so
    wait_for(lambda: capture.log().count("capture.reset") == 2, 30, what="second reset")
    assert "capture.slot_dropped" in capture.log()
    assert capture.stop() == 0


def test_user_errors_and_passwords_never_reach_the_log(postgres, pg_database, make_pg_capture):
    secret = "Sup3r-Secret-Pa55"
    postgres.execute(
        "DROP ROLE IF EXISTS weak",
        f"CREATE ROLE weak LOGIN PASSWORD '{secret}'",
    )
    capture = make_pg_capture(user="weak")
    assert capture.run_to_exit(env={"TEST_DB_PASSWORD": secret}) == 2
    log = capture.log()
    assert 'lacks the REPLICATION attribute: ALTER ROLE "weak" WITH REPLICATION' in log
    assert secret not in log
    postgres.execute("ALTER ROLE weak WITH REPLICATION")
    assert capture.run_to_exit(env={"TEST_DB_PASSWORD": secret}) == 2
    assert "user 'weak' may not create it" in capture.log()  # the tables' owner must create the publication
    postgres.execute("CREATE PUBLICATION logtide_src", database=pg_database)
    capture.start(env={"TEST_DB_PASSWORD": secret})
    capture.wait_running()
    assert capture.stop() == 0
    assert secret not in capture.log()
    postgres.execute("DROP OWNED BY weak", database=pg_database)


def test_preflight_names_every_wrong_setting(make_pg_capture):
    """wal_level and slots need a server restart, so this one gets a server of its own."""
    base = Path(tempfile.mkdtemp(prefix="logtide-pg-"))
    server = PostgreSQL(base, options={"wal_level": "replica", "max_replication_slots": "1"})
    server.start()
    try:
        server.execute("SELECT pg_create_physical_replication_slot('taken')")
        capture = make_pg_capture(port=server.port, database="postgres")
        assert capture.run_to_exit() == 2
        log = capture.log()
        assert "wal_level is replica, must be logical: ALTER SYSTEM SET wal_level = logical" in log
        assert "all 1 replication slots are in use (taken)" in log
        assert capture.zone.checkpoint() is None
    finally:
        server.destroy()


def test_metrics_show_slot_lag_and_retained_wal_with_a_warning(postgres, pg_database, make_pg_capture):
    postgres.execute("CREATE TABLE t (id int PRIMARY KEY)", database=pg_database)
    capture = make_pg_capture(retained_warn_bytes=1).start()
    capture.wait_running()
    postgres.execute("INSERT INTO t SELECT generate_series(1, 30)", database=pg_database)
    capture.wait_events("public", "t", 30)
    port = capture.config.source("src").metrics.port

    def metrics() -> str | None:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
        return (
            text
            if 'logtide_capture_retained_bytes{source="src"}' in text and "retained_wal_high" in capture.log()
            else None
        )

    text = wait_for(metrics, 20, interval=0.5, what="retained WAL metric and warning")
    assert 'logtide_capture_events_total{source="src"} 30.0' in text
    assert 'logtide_capture_lag_bytes{source="src"}' in text
    assert "capture.retained_wal_high" in capture.log() and "limit_bytes=1" in capture.log()


def test_foreign_key_cascades_are_in_the_log(postgres, pg_database, make_pg_capture):
    """Unlike InnoDB's, PostgreSQL's cascades (ON DELETE CASCADE, ON UPDATE SET NULL / CASCADE) are
    ordinary row changes in the WAL: the children's landed state equals SELECT."""
    postgres.execute(
        "CREATE TABLE parent (id int PRIMARY KEY, v int)",
        "CREATE TABLE child (id int PRIMARY KEY, parent_id int REFERENCES parent (id) ON DELETE CASCADE"
        " ON UPDATE SET NULL)",
        "CREATE TABLE grandchild (id int PRIMARY KEY, child_id int REFERENCES child (id) ON DELETE CASCADE"
        " ON UPDATE CASCADE)",
        database=pg_database,
    )
    capture = make_pg_capture(["public.*"]).start()
    capture.wait_running()
    postgres.execute(
        "INSERT INTO parent VALUES (1, 1), (2, 2)",
        "INSERT INTO child VALUES (10, 1), (11, 1), (20, 2)",
        "INSERT INTO grandchild VALUES (100, 10), (200, 20)",
        "DELETE FROM parent WHERE id = 1",  # deletes children 10, 11 and grandchild 100
        "UPDATE parent SET id = 3 WHERE id = 2",  # child 20's parent_id to NULL
        "UPDATE child SET id = 21 WHERE id = 20",  # grandchild 200's child_id to 21
        database=pg_database,
    )
    capture.wait_events("public", "grandchild", 4)
    for table in ("parent", "child", "grandchild"):
        state = apply(reconcile_table(capture.zone, "public", table)[0])
        rows = postgres.query(f"SELECT * FROM {table}", database=pg_database)
        assert sorted(tuple(r.values()) for r in state.values()) == sorted(rows), table
    assert postgres.query("SELECT * FROM child", database=pg_database) == [(21, None)]
    assert capture.stop(signal.SIGINT) == 0


def test_a_truncate_undone_by_a_rollback_lands_nothing(postgres, pg_database, make_pg_capture):
    """A TRUNCATE rolled back to a savepoint, or with its whole transaction, is not in the landed
    log; one in a released savepoint is. Replayed, the landing zone gives SELECT's rows."""
    postgres.execute("CREATE TABLE t (id int PRIMARY KEY, v int)", database=pg_database)
    capture = make_pg_capture(["public.*"]).start()
    capture.wait_running()
    postgres.execute(
        "INSERT INTO t VALUES (1, 1), (2, 2)",
        "BEGIN; INSERT INTO t VALUES (3, 3); SAVEPOINT s; TRUNCATE t; INSERT INTO t VALUES (9, 9);"
        " ROLLBACK TO SAVEPOINT s; INSERT INTO t VALUES (4, 4); COMMIT",
        "BEGIN; TRUNCATE t; INSERT INTO t VALUES (8, 8); ROLLBACK",
        "BEGIN; UPDATE t SET v = 5 WHERE id = 1; SAVEPOINT s; TRUNCATE t; INSERT INTO t VALUES (6, 6);"
        " RELEASE SAVEPOINT s; INSERT INTO t VALUES (7, 7); COMMIT",
        "INSERT INTO t VALUES (10, 10)",
        database=pg_database,
    )
    capture.wait_events("public", "t", 8)  # 1, 2, 3, 4, the update of 1, 6, 7, 10
    frontier = capture.zone.checkpoint().frontier.encode()
    assert len(landed_truncates(capture.zone, frontier)) == 1
    state = apply(reconcile_table(capture.zone, "public", "t")[0])
    rows = postgres.query("SELECT * FROM t", database=pg_database)
    assert sorted(tuple(r.values()) for r in state.values()) == sorted(rows) == [(6, 6), (7, 7), (10, 10)]
    assert capture.stop(signal.SIGINT) == 0
