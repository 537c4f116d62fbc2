"""The capture's publication (issue 10, part 4): only the captured tables PostgreSQL can publish,
never a table whose UPDATEs and DELETEs would then fail in the application, kept in step with
tables created while capture runs, and each table left out named with the statement that fixes it."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from capture.config import load_config
from capture.status import render, source_status
from tests.conftest import ROOT
from tests.integration.postgres.dumping import assert_target_holds_source, dump_table, wait_until_landed
from tests.servers import wait_for

pytestmark = pytest.mark.integration


def _published(postgres, database: str) -> list[str]:
    rows = postgres.query(
        "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = 'logtide_src' ORDER BY 1",
        database=database,
    )
    return [r[0] for r in rows]


def test_setup_and_capture_publish_the_captured_tables_and_leave_the_applications_writes_alone(
    postgres, pg_database, make_pg_capture
):
    postgres.execute(
        "CREATE TABLE keyed (id int PRIMARY KEY, v int)",
        "CREATE TABLE bare (a int, b int)",  # captured, no key, REPLICA IDENTITY DEFAULT
        "CREATE TABLE unique_only (code text NOT NULL UNIQUE, v int)",  # a dump key, but no replica identity
        "CREATE TABLE app_log (a int, b int)",  # not captured, no key
        "INSERT INTO bare VALUES (1, 1)",
        "INSERT INTO unique_only VALUES ('x', 1)",
        "INSERT INTO app_log VALUES (1, 1)",
        database=pg_database,
    )
    capture = make_pg_capture(exclude=["public.app_log"])
    setup = subprocess.run(
        [sys.executable, "-m", "capture.cli", "--config", str(capture.config_path), "setup", "--source", "src"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert setup.returncode == 0, setup.stderr
    for table in ("bare", "unique_only"):  # named, with the statement that fixes it
        line = next(x for x in setup.stderr.splitlines() if "publication.table_left_out" in x and f".{table} " in x)
        assert f'ALTER TABLE \\"public\\".\\"{table}\\" REPLICA IDENTITY FULL' in line
    assert "app_log" not in setup.stderr
    assert _published(postgres, pg_database) == ["logtide.watermarks", "public.keyed"]
    identities = postgres.query(
        "SELECT relname, relreplident FROM pg_class WHERE relname IN ('bare', 'unique_only', 'app_log') ORDER BY 1",
        database=pg_database,
    )
    assert identities == [("app_log", "d"), ("bare", "d"), ("unique_only", "d")]  # not changed unasked

    capture.start()
    capture.wait_running()
    # the application's UPDATEs and DELETEs on tables without a replica identity still work
    postgres.execute(
        "UPDATE app_log SET b = 2",
        "DELETE FROM app_log",
        "UPDATE bare SET b = 2",
        "UPDATE unique_only SET v = 2",
        "DELETE FROM unique_only",
        database=pg_database,
    )
    # a table created while capture runs is published by its next sync; rows from then on land
    postgres.execute("CREATE TABLE later (id int PRIMARY KEY)", database=pg_database)
    wait_for(lambda: "public.later" in _published(postgres, pg_database), 30, what="later published")
    # the line is written after the ALTER PUBLICATION commits, which the catalog shows first
    added = "event=publication.table_added source=src publication=logtide_src table=public.later"
    wait_for(lambda: added in capture.log(), 10, what="the publication.table_added line")
    # once it has a replica identity (the statement setup gave), a captured table is published too
    postgres.execute("ALTER TABLE bare REPLICA IDENTITY FULL", database=pg_database)
    wait_for(lambda: "public.bare" in _published(postgres, pg_database), 30, what="bare published")
    postgres.execute(
        "INSERT INTO later VALUES (1)", "UPDATE bare SET b = 3", "INSERT INTO keyed VALUES (1, 1)", database=pg_database
    )
    assert [e["after"]["id"] for e in capture.wait_events("public", "later", 1)] == [1]
    assert [(e["before"]["b"], e["after"]["b"]) for e in capture.wait_events("public", "bare", 1)] == [(2, 3)]
    assert capture.stop() == 0


def _not_converged(capture) -> list[str]:
    report = source_status(load_config(capture.config_path), "src")
    return [t["table"] for t in report["not_converged"]]


def test_a_table_added_to_the_publication_is_listed_not_converged_until_dumped(postgres, pg_database, start_pg_capture):
    """A table created with rows while capture runs is published by the next sync: its earlier rows are in
    no log. On main only a warning said so; now `logtide status` lists it as not converged, with the dump
    to run, across a restart, until a dump of it finishes, and the target then holds the source."""
    capture = start_pg_capture("CREATE TABLE keep (id int PRIMARY KEY)")
    postgres.execute(
        "CREATE TABLE late (id int PRIMARY KEY, v int)",
        "INSERT INTO late SELECT i, i FROM generate_series(1, 4) i",
        database=pg_database,
    )
    wait_for(lambda: "public.late" in _published(postgres, pg_database), 30, what="late published")
    wait_for(lambda: _not_converged(capture) == ["public.late"], 10, what="late listed not converged")
    text = render([source_status(load_config(capture.config_path), "src")])
    assert "public.late" in text and "not converged: run logtide dump --source src --table public.late" in text
    assert capture.stop() == 0
    capture.start()
    capture.wait_running()
    assert _not_converged(capture) == ["public.late"]  # kept in the landing zone
    time.sleep(1.1)  # the dump's record is to the second: it finishes in a later one
    dump_table(capture, "late")
    assert _not_converged(capture) == []
    wait_until_landed(postgres, pg_database, capture)
    assert_target_holds_source(capture, postgres, pg_database, "late")
    assert capture.stop() == 0


def test_a_table_added_to_the_publication_while_capture_is_stopped_is_listed_not_converged(
    postgres, pg_database, start_pg_capture
):
    """A table with rows published while capture is stopped (here by hand; `logtide setup` or a dump's
    plan does the same) holds rows no log carries. On main capture's first sync found it already in the
    publication and compared it with nothing (what the last run covered was not kept): status listed
    nothing. A dump that began before it was found does not converge it; one begun after does."""
    capture = start_pg_capture("CREATE TABLE keep (id int PRIMARY KEY)")
    assert capture.stop() == 0
    postgres.execute(
        "CREATE TABLE late (id int PRIMARY KEY, v int)",
        "INSERT INTO late SELECT i, i FROM generate_series(1, 4) i",
        "ALTER PUBLICATION logtide_src ADD TABLE late",
        database=pg_database,
    )
    capture.start()
    capture.wait_running()
    wait_for(lambda: _not_converged(capture) == ["public.late"], 10, what="late listed not converged")
    time.sleep(1.1)  # the dump's record is to the second: it starts in a later one
    dump_table(capture, "late")
    assert _not_converged(capture) == []
    wait_until_landed(postgres, pg_database, capture)
    assert_target_holds_source(capture, postgres, pg_database, "late")
    assert capture.stop() == 0


def test_only_a_dump_of_the_whole_table_converges_it(postgres, pg_database, start_pg_capture):
    """A key-list dump (`--keys`) or a key range (`--from` / `--to`) reads some rows only: on main any
    finished dump cleared the table's mark, and `logtide status` said nothing while the target still
    lacked the rows outside the keys or the range. Now only a dump of the whole table clears it."""
    capture = start_pg_capture("CREATE TABLE keep (id int PRIMARY KEY)")
    postgres.execute(
        "CREATE TABLE late (id int PRIMARY KEY, v int)",
        "INSERT INTO late SELECT i, i FROM generate_series(1, 6) i",
        database=pg_database,
    )
    wait_for(lambda: _not_converged(capture) == ["public.late"], 30, what="late listed not converged")
    time.sleep(1.1)  # the dump's record is to the second: it starts in a later one
    for narrowed in (["--keys", "[1, 2]"], ["--from", "2", "--to", "4"], ["--from", "3"]):
        dump = subprocess.run(
            [sys.executable, "-m", "capture.cli", "--config", str(capture.config_path), "dump", "--source", "src",
             "--table", "public.late", *narrowed],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert dump.returncode == 0, dump.stderr
        assert _not_converged(capture) == ["public.late"], narrowed
    dump_table(capture, "late")
    assert _not_converged(capture) == []
    wait_until_landed(postgres, pg_database, capture)
    assert_target_holds_source(capture, postgres, pg_database, "late")
    assert capture.stop() == 0


def test_capture_keeps_its_tables_listed_when_an_administrator_publishes_and_unpublishes_their_schema(
    postgres, pg_database, start_pg_capture
):
    """`ADD TABLES IN SCHEMA` on capture's own publication: a captured table created in the same transaction
    is published by the schema and added by name too, so `DROP TABLES IN SCHEMA` later loses none of its
    changes; a table without a replica identity the schema publishes is named (its UPDATEs fail in the
    application), where on main nothing said so."""
    capture = start_pg_capture("CREATE TABLE keep (id int PRIMARY KEY)", "CREATE TABLE bare (a int)")
    postgres.execute(
        "BEGIN; CREATE TABLE fresh (id int PRIMARY KEY, v int);"
        " ALTER PUBLICATION logtide_src ADD TABLES IN SCHEMA public; COMMIT",
        database=pg_database,
    )
    named = "event=publication.schema_without_identity source=src publication=logtide_src table=public.bare"
    wait_for(lambda: named in capture.log(), 20, what="bare named")
    listed = "SELECT prrelid::regclass::text FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid"
    wait_for(lambda: ("fresh",) in postgres.query(listed, database=pg_database), 20, what="fresh added by name")
    assert "public.fresh" in _not_converged(capture)  # added: its rows before then are in no log
    postgres.execute("ALTER PUBLICATION logtide_src DROP TABLES IN SCHEMA public", database=pg_database)
    postgres.execute("INSERT INTO fresh VALUES (1, 1)", "INSERT INTO keep VALUES (1)", database=pg_database)
    assert [e["after"]["id"] for e in capture.wait_events("public", "fresh", 1)] == [1]
    assert [e["after"]["id"] for e in capture.wait_events("public", "keep", 1)] == [1]
    assert "publication.sync_failed" not in capture.log()
    assert capture.stop() == 0
