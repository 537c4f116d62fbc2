"""Watermark dumps against a real MariaDB with the capture service running."""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import subprocess
import sys
import threading
import time

import pyarrow.parquet as pq
import pymysql
import pytest

from capture.dump.control import DumpSettings, FileControl
from capture.dump.engine import DumpEngine, DumpRequest
from capture.dump.progress import dump_dir
from capture.errors import DumpInputError
from capture.events import Lsn
from capture.landing.chunks import read_chunk_meta
from capture.landing.reader import chunk_files, readonly_window
from capture.sources import open_chunk_source
from capture.sources.base import WATERMARK_SCHEMA, WATERMARK_TABLE
from tests.conftest import ROOT
from tests.integration.dumping import (
    Died,
    DiesBeforeHigh,
    Workload,
    assert_refused,
    check_schema_change_rereads,
    open_engine,
    populate_ledger,
    reconciled_state,
    run_dump,
    table_state,
    wait_until_landed,
)
from tests.servers import wait_for

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("seed", "watermarks"), [(1, "table"), (2, "table"), (1, "readonly")])
def test_dump_during_concurrent_writes_reconciles_to_the_table(mariadb, database, make_capture, seed, watermarks):
    populate_ledger(mariadb, database, 3000)  # history before capture started: only the dump has it
    capture = make_capture([f"{database}.*"], watermarks=watermarks).start()
    capture.wait_running()
    workload = Workload(mariadb, database, "ledger", 100_000, seed)
    workload.start()
    try:
        summary = run_dump(capture, f"{database}.ledger", 37)
    finally:
        workload.stop()
    wait_until_landed(mariadb, capture)

    state, stats = reconciled_state(capture, database, "ledger")
    assert state == table_state(mariadb, database, "ledger")
    assert workload.transactions > 50 and summary["tables"][0]["chunks"] > 50
    assert stats.chunks == summary["tables"][0]["chunks"] and stats.chunks_pending == 0
    # the log alone does not rebuild the table: the dump carried the history
    log_only = {k: v for k, v in state.items() if k[0] >= 100_000}
    assert len(log_only) < len(state)
    _check_watermarks(capture, summary["dump_id"], watermarks)


def _check_watermarks(capture, dump_id: str, watermarks: str) -> None:
    """Table watermarks land LOW/HIGH rows for the dump; read-only ones none: each chunk carries its
    LOW and has a HIGH file, and the windows follow each other in the log, chunk after chunk."""
    marks = [e for e in capture.events(WATERMARK_SCHEMA, WATERMARK_TABLE) if e["after"]["dump_id"] == dump_id]
    paths = sorted(capture.zone.root.glob(f"chunks/{dump_id}/*/*.parquet"))
    metas = [read_chunk_meta(p) for p in paths]
    assert metas
    if watermarks == "table":
        highs = [m for m in marks if m["after"]["kind"] == "HIGH"]
        assert len(highs) >= len(metas) and all(m.low_lsn is None for m in metas)
        return
    assert marks == []
    for table in {m.table for m in metas}:
        windows = [readonly_window(p, m) for p, m in sorted(zip(paths, metas, strict=True), key=lambda pm: pm[1].chunk)
                   if m.table == table]  # fmt: skip
        assert None not in windows
        # by binlog position: a HIGH an idle server's heartbeat placed is the binlog end with a minor
        # (capture/dump/engine.py `_place_high`), the next chunk's LOW that end with none; no event between
        bounds = [Lsn.decode(b).major for w in windows for b in (w.low, w.high)]
        assert bounds == sorted(bounds)


@pytest.mark.parametrize("watermarks", ["table", "readonly"])
def test_key_list_and_key_range(mariadb, database, make_capture, watermarks):
    populate_ledger(mariadb, database, 100)
    capture = make_capture([f"{database}.*"], watermarks=watermarks).start()
    capture.wait_running()
    engine, source = open_engine(capture)
    try:
        by_keys = engine.run(
            DumpRequest(tables=[f"{database}.ledger"], keys=[5, "7", 500, 9], settings=DumpSettings(chunk_size=2))
        )
        by_range = engine.run(
            DumpRequest(tables=[f"{database}.ledger"], key_from=10, key_to=20, settings=DumpSettings(chunk_size=4))
        )
    finally:
        source.close()
    assert by_keys["tables"][0]["rows"] == 3 and by_keys["tables"][0]["missing_keys"] == 1
    assert by_range["tables"][0]["rows"] == 11 and by_range["tables"][0]["chunks"] == 3
    metas = [read_chunk_meta(p) for p in chunk_files(capture.zone, database, "ledger")]
    keyed = [m for m in metas if m.dump_id == by_keys["dump_id"]]
    assert [m.keys for m in keyed] == [((5,), (7,)), ((500,), (9,))]
    ranged = sorted((m for m in metas if m.dump_id == by_range["dump_id"]), key=lambda m: m.chunk)
    assert [(m.start, m.after, m.stop, m.last) for m in ranged] == [
        ((10,), None, (20,), False),
        (None, (13,), (20,), False),
        (None, (17,), (20,), True),
    ]
    mariadb.execute("UPDATE ledger SET v = -5 WHERE id IN (7, 15)", database=database)
    wait_until_landed(mariadb, capture)
    state, stats = reconciled_state(capture, database, "ledger")
    assert stats.chunks == 5 and stats.chunks_pending == 0
    assert state == {k: r for k, r in table_state(mariadb, database, "ledger").items() if k in state}
    assert sorted(k[0] for k in state) == [5, 7, 9, *range(10, 21)]
    for dump in (by_keys, by_range):
        _check_watermarks(capture, dump["dump_id"], watermarks)


def test_key_list_under_a_case_insensitive_collation_counts_only_truly_missing_keys(
    mariadb, database, make_capture, caplog
):
    mariadb.execute(
        "CREATE TABLE people (code VARCHAR(10) COLLATE utf8mb4_general_ci PRIMARY KEY, v INT)",
        "INSERT INTO people VALUES ('ABC', 1), ('Def', 2), ('ghi', 3), ('x', 4)",
        database=database,
    )
    capture = make_capture([f"{database}.*"])
    engine, source = open_engine(capture)
    spelled_otherwise = ["abc", "DEF", "ghi ", "GHI", "ghi", "X"]  # 'ghi ': PAD SPACE; 'ghi' as stored
    truly_missing = [f"m{i:02}" for i in range(12)]
    caplog.set_level(logging.INFO, logger="capture")
    try:
        summary = engine.run(
            DumpRequest(
                tables=[f"{database}.people"],
                keys=[*spelled_otherwise[:3], *truly_missing, *spelled_otherwise[3:]],
                settings=DumpSettings(chunk_size=20),
            )
        )
    finally:
        source.close()
    table = summary["tables"][0]
    assert table["missing_keys"] == len(truly_missing) and table["rows"] == 4
    reports = [r.fields for r in caplog.records if getattr(r, "event", None) == "dump.keys_missing"]
    assert [r["count"] for r in reports] == [12]
    assert json.loads(reports[0]["first"]) == truly_missing[:10]  # bounded, in request order


def test_bad_requests_are_refused_before_anything_is_written(mariadb, database, make_capture):
    populate_ledger(mariadb, database, 10)
    mariadb.execute(
        "CREATE TABLE keyless (a INT, b INT)",
        "CREATE TABLE hidden (id INT PRIMARY KEY)",
        "CREATE TABLE hidden_keyless (a INT)",
        database=database,
    )
    capture = make_capture([f"{database}.*"], exclude=[f"{database}.hidden", f"{database}.hidden_keyless"])
    engine, source = open_engine(capture)
    mariadb.execute("CREATE DATABASE IF NOT EXISTS logtide")
    cases = [
        (DumpRequest(tables=[f"{database}.nope"]), f"table {database}.nope does not exist"),
        (DumpRequest(tables=[f"`{database}`.`ledger`"]), f"write table names without quotes: {database}.ledger"),
        (DumpRequest(tables=[f"{database}.LEDGER"]), f"did you mean {database}.ledger?"),
        (DumpRequest(tables=[f"{database}.keyless"]), "has no primary key and no UNIQUE index on NOT NULL"),
        (DumpRequest(tables=[f"{database}.hidden"]), f"table {database}.hidden is not captured"),
        # not captured comes first: a key the table lacks is beside the point
        (DumpRequest(tables=[f"{database}.hidden_keyless"]), f"table {database}.hidden_keyless is not captured"),
        (DumpRequest(tables=[f"{database}.ledger"], keys=[[1, 2]]), "has 2 value(s); " + database),
        (DumpRequest(tables=[f"{database}.ledger"], keys=["abc"]), "key value 'abc' for column 'id' is not an integer"),
        (DumpRequest(tables=[f"{database}.ledger"], key_from=1.5), "is not an integer"),
    ]
    try:
        assert_refused(engine, capture.zone, cases)
    finally:
        source.close()
    with pytest.raises(ValueError, match="need exactly one table"):
        DumpRequest(keys=[1])
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        DumpSettings(chunk_size=0)


def _cli(capture, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "capture.cli", "--config", str(capture.config_path), *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=check, timeout=120)


def test_the_cli_refuses_zero_settings_and_a_range_that_ends_before_it_starts(mariadb, database, make_capture):
    populate_ledger(mariadb, database, 10)
    mariadb.execute(
        "CREATE TABLE names (name VARCHAR(10) COLLATE utf8mb4_general_ci PRIMARY KEY, b VARBINARY(10) NOT NULL UNIQUE)",
        "CREATE TABLE pairs (a INT, b VARCHAR(5), PRIMARY KEY (a, b))",
        "CREATE TABLE sizes (e ENUM('z','b','a') NOT NULL, s SET('y','x') NOT NULL, PRIMARY KEY (e, s))",
        database=database,
    )
    capture = make_capture([f"{database}.*"])
    _cli(capture, "setup", "--source", "src")  # the watermark table exists: "nothing written" is no row in it
    ledger = ["--table", f"{database}.ledger"]
    cases = [  # each was dumped before (0 meant "the default") or wrote watermarks and an empty chunk
        ([*ledger, "--chunk-size", "0"], "settings.chunk_size: Input should be greater than or equal to 1"),
        ([*ledger, "--max-rows-per-s", "0"], "settings.max_rows_per_s: Input should be greater than 0"),
        ([*ledger, "--from", "300", "--to", "100"], f"key range of {database}.ledger is empty: key_from 300 comes"),
        (["--table", f"{database}.pairs", "--from", '[2, "a"]', "--to", '[1, "z"]'], 'key_from [2, "a"] comes after'),
        # utf8mb4_general_ci orders a < B; byte order would say B < a
        (["--table", f"{database}.names", "--from", '"B"', "--to", '"a"'], 'key_from "B" comes after key_to "a"'),
        # ENUM and SET keys are ordered by member number: z < b < a, y < x; as text a < z
        (["--table", f"{database}.sizes", "--from", '["a", "y"]', "--to", '["z", "y"]'], 'key_from ["a", "y"] comes'),
        (["--table", f"{database}.sizes", "--from", '["b", "x"]', "--to", '["b", "y"]'], 'key_from ["b", "x"] comes'),
        (["--table", f"{database}.sizes", "--from", '["q", "y"]'], "'q' is not a member of ENUM column e"),
        (["--table", f"{database}.sizes", "--to", '["a", "x,w"]'], "'x,w' is not a member of SET column s"),
    ]
    for number, (args, message) in enumerate(cases):
        dump_id = f"refused-{number}"
        refused = _cli(capture, "dump", "--source", "src", "--dump-id", dump_id, *args, check=False)
        assert refused.returncode == 2 and message in refused.stderr, (args, refused.stderr)
        assert not dump_dir(capture.zone, dump_id).exists() and not (capture.zone.root / "chunks" / dump_id).exists()
    with mariadb.connect(database="logtide") as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {WATERMARK_TABLE} WHERE table_name LIKE %s", (f"{database}.%",))
        assert cursor.fetchone() == (0,)
    source = open_chunk_source("src", capture.config.source("src"))
    try:  # the same letters in the VARBINARY column compare as bytes: B before a
        by_bytes = dataclasses.replace(source.describe(database, "names"), key=("b",))
        assert not source.key_after(by_bytes, (b"B",), (b"a",)) and source.key_after(by_bytes, (b"a",), (b"B",))
        sizes = source.describe(database, "sizes")  # in member order: accepted as a range
        assert not source.key_after(sizes, ("z", "x"), ("a", "y")) and source.key_after(sizes, ("a", "y"), ("z", "x"))
        assert not source.key_after(sizes, ("b", "y"), ("b", "x,y"))  # SET bits: y=1 < x,y=3
    finally:
        source.close()


@pytest.mark.parametrize("watermarks", ["table", "readonly"])
def test_cli_dump_survives_kill9_and_resumes_after_the_last_chunk(mariadb, database, make_capture, watermarks):
    populate_ledger(mariadb, database, 400)
    capture = make_capture([f"{database}.*"], watermarks=watermarks).start()
    capture.wait_running()
    cmd = [
        sys.executable,
        "-m",
        "capture.cli",
        "--config",
        str(capture.config_path),
        "dump",
        "--source",
        "src",
        "--table",
        f"{database}.ledger",
        "--chunk-size",
        "10",
        "--delay",
        "0.05",
        "--dump-id",
        "resumable",
    ]
    first = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    progress = dump_dir(capture.zone, "resumable") / f"{database}.ledger.json"
    wait_for(lambda: progress.exists() and json.loads(progress.read_text())["chunk"] >= 5, 60, what="5 chunks")
    first.send_signal(signal.SIGKILL)
    first.wait()
    done_before = json.loads(progress.read_text())["chunk"]
    assert done_before < 40

    second = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert f"dump.table_resumed dump_id=resumable table={database}.ledger after_chunk={done_before}" in second.stderr
    assert json.loads(second.stdout)["tables"][0]["rows"] == 400
    wait_until_landed(mariadb, capture)
    state, _ = reconciled_state(capture, database, "ledger")
    assert state == table_state(mariadb, database, "ledger")
    _check_watermarks(capture, "resumable", watermarks)


def test_a_chunk_whose_high_never_committed_is_redone_on_resume(mariadb, database, make_capture):
    populate_ledger(mariadb, database, 200)
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    request = DumpRequest(dump_id="redo", tables=[f"{database}.ledger"], settings=DumpSettings(chunk_size=20))
    source = open_chunk_source("src", capture.config.source("src"))
    dying = DiesBeforeHigh(source, chunk=4)
    try:
        with pytest.raises(Died):
            DumpEngine(dying, capture.zone).run(request)
    finally:
        source.close()
    progress = dump_dir(capture.zone, "redo") / f"{database}.ledger.json"
    assert json.loads(progress.read_text())["chunk"] == 3
    chunk4 = {read_chunk_meta(p).chunk: p for p in chunk_files(capture.zone, database, "ledger")}[4]
    assert read_chunk_meta(chunk4).low_id == dying.lows[4]  # its file was written, its HIGH never was
    mariadb.execute("UPDATE ledger SET v = -1 WHERE id BETWEEN 61 AND 80", database=database)  # chunk 4's rows

    summary = run_dump(capture, request)
    wait_until_landed(mariadb, capture)
    assert summary["tables"][0]["rows"] == 200 and summary["tables"][0]["chunks"] == 11
    redone = read_chunk_meta(chunk4)
    marks = [e["after"] for e in capture.events(WATERMARK_SCHEMA, WATERMARK_TABLE)]
    marks = [(m["chunk"], m["kind"], m["watermark_id"]) for m in marks if m["dump_id"] == "redo"]
    assert [m for m in marks if m[0] == 4] == [
        (4, "LOW", dying.lows[4]),
        (4, "LOW", redone.low_id),
        (4, "HIGH", redone.high_id),
    ]
    assert [m[0] for m in marks if m[1] == "HIGH"] == list(range(1, 12))  # chunks 1-3 not redone
    assert pq.read_table(chunk4).column("after").combine_chunks().field("v").to_pylist() == [-1] * 20
    state, stats = reconciled_state(capture, database, "ledger")
    assert state == table_state(mariadb, database, "ledger") and stats.chunks == 11 and stats.chunks_pending == 0


@pytest.mark.parametrize("watermarks", ["table", "readonly"])
def test_pause_resume_retune_and_cancel_from_the_cli(mariadb, database, make_capture, watermarks):
    populate_ledger(mariadb, database, 3000)
    capture = make_capture([f"{database}.*"], watermarks=watermarks)
    control = FileControl(dump_dir(capture.zone, "ctl") / "control.json")
    control.update(state="paused")
    engine, source = open_engine(capture, control)
    result: dict = {}

    def run() -> None:
        try:
            result["summary"] = engine.run(
                DumpRequest(
                    dump_id="ctl", tables=[f"{database}.ledger"], settings=DumpSettings(chunk_size=10, delay_s=0.05)
                )
            )
        except Exception as exc:
            result["error"] = exc

    def sizes() -> list[int]:
        """Rows of each chunk file, in chunk order."""
        return [read_chunk_meta(p).rows for p in chunk_files(capture.zone, database, "ledger")]

    thread = threading.Thread(target=run)
    thread.start()
    try:
        progress = dump_dir(capture.zone, "ctl") / f"{database}.ledger.json"
        thread.join(1.5)
        assert not progress.exists()  # paused before the first chunk
        assert _cli(capture, "dump-control", "--source", "src", "--dump-id", "ctl", "resume").returncode == 0
        wait_for(lambda: progress.exists() and json.loads(progress.read_text())["chunk"] >= 3, 30, what="chunks")
        bad = _cli(capture, "dump-control", "--source", "src", "--dump-id", "ctl", "--chunk-size", "0", check=False)
        assert bad.returncode == 2 and "chunk_size: Input should be greater than or equal to 1" in bad.stderr
        _cli(capture, "dump-control", "--source", "src", "--dump-id", "ctl", "--chunk-size", "25")
        wait_for(lambda: 25 in sizes(), 30, what="a chunk of 25 rows")
        _cli(capture, "dump-control", "--source", "src", "--dump-id", "ctl", "cancel")
        thread.join(30)
    finally:
        source.close()
    assert "was cancelled" in str(result["error"])
    assert json.loads(progress.read_text())["rows"] < 3000
    # in chunk order: 10 rows a chunk until the change, 25 from the next chunk on
    retuned = sizes().index(25)
    assert retuned >= 3 and set(sizes()[:retuned]) == {10} and set(sizes()[retuned:]) == {25}


@pytest.mark.parametrize("watermarks", ["table", "readonly"])
def test_a_rows_per_s_ceiling_and_a_delay_set_through_the_control_slow_the_dump(
    mariadb, database, make_capture, watermarks
):
    populate_ledger(mariadb, database, 600)
    capture = make_capture([f"{database}.*"], watermarks=watermarks)
    took: dict[str, float] = {}
    # what `logtide dump-control --max-rows-per-s 400` and `--delay 0.3` write; read before each chunk
    for dump_id, override in (("ceiling", {"max_rows_per_s": 400}), ("delay", {"delay_s": 0.3})):
        control = FileControl(dump_dir(capture.zone, dump_id) / "control.json")
        control.update(**override)
        began = time.monotonic()
        summary = run_dump(
            capture,
            DumpRequest(dump_id=dump_id, tables=[f"{database}.ledger"], settings=DumpSettings(chunk_size=200)),
            control=control,
        )
        took[dump_id] = time.monotonic() - began
        assert summary["tables"][0]["chunks"] == 4 and summary["rows"] == 600  # 3 full chunks and the empty one
    # lower bounds (unthrottled, 600 rows take a few tens of milliseconds): 600 rows at 400 rows/s; 4 delays
    assert took["ceiling"] >= 600 / 400
    assert took["delay"] >= 4 * 0.3


def _row_lock_waits(mariadb) -> dict[str, int]:
    """InnoDB's server-wide count of row lock waits and the milliseconds spent in them."""
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_row_lock_waits', 'Innodb_row_lock_time')")
        return {name: int(value) for name, value in cur.fetchall()}


def test_writers_never_wait_for_the_dump(mariadb, database, make_capture):
    populate_ledger(mariadb, database, 5000)
    capture = make_capture([f"{database}.*"])
    failures: list[Exception] = []
    stop = threading.Event()
    writes = [0, 0, 0]

    def writer(n: int) -> None:
        """Updates 51-row ranges inside its own stripe of ids, away from the others' (and their
        gap locks): a writer can only ever wait for the dump."""
        conn = mariadb.connect(database, autocommit=False)
        with conn, conn.cursor() as cur:
            cur.execute("SET SESSION innodb_lock_wait_timeout = 1, SESSION lock_wait_timeout = 1")
            while not stop.is_set():
                try:
                    low = n * 1600 + 100 + writes[n] * 37 % 1350
                    cur.execute("UPDATE ledger SET v = v + 1 WHERE id BETWEEN %s AND %s", (low, low + 50))
                    conn.commit()
                    writes[n] += 1
                except pymysql.MySQLError as exc:
                    failures.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    before = _row_lock_waits(mariadb)  # server-wide, but tests run one at a time and capture is off
    for thread in threads:
        thread.start()
    try:
        summary = run_dump(capture, f"{database}.ledger", 100)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    after = _row_lock_waits(mariadb)
    assert summary["rows"] >= 5000 and sum(writes) > 100 and failures == []
    assert {k: after[k] - before[k] for k in after} == {"Innodb_row_lock_waits": 0, "Innodb_row_lock_time": 0}


@pytest.mark.parametrize("watermarks", ["table", "readonly"])
def test_a_column_added_during_the_dump_reaches_the_following_chunks(mariadb, database, make_capture, watermarks):
    populate_ledger(mariadb, database, 600)
    # ADD COLUMN ... DEFAULT 5 rewrites rows without row events (column_rewrites): accepted, the dump repairs them
    capture = make_capture([f"{database}.*"], watermarks=watermarks, column_rewrites="accept").start()
    capture.wait_running()
    engine, source = open_engine(capture)
    request = DumpRequest(
        dump_id="alter", tables=[f"{database}.ledger"], settings=DumpSettings(chunk_size=20, delay_s=0.03)
    )
    thread = threading.Thread(target=engine.run, args=(request,))
    thread.start()
    progress = dump_dir(capture.zone, "alter") / f"{database}.ledger.json"
    try:
        wait_for(lambda: progress.exists() and json.loads(progress.read_text())["chunk"] >= 5, 30, what="chunks")
        mariadb.execute(
            "ALTER TABLE ledger ADD COLUMN extra INT DEFAULT 5",
            "UPDATE ledger SET v = -1 WHERE id < 50",
            database=database,
        )
        altered_at = json.loads(progress.read_text())["chunk"]
        thread.join(60)
    finally:
        source.close()
    wait_until_landed(mariadb, capture)
    columns = {
        read_chunk_meta(p).chunk: pq.read_schema(p).field("after").type.names
        for p in chunk_files(capture.zone, database, "ledger")
    }
    assert all("extra" in columns[n] for n in columns if n > altered_at + 1)
    assert all("extra" not in columns[n] for n in columns if n <= 5)
    state, _ = reconciled_state(capture, database, "ledger")
    table = table_state(mariadb, database, "ledger")
    original = ("id", "v", "note")
    assert {k: {c: r[c] for c in original} for k, r in state.items()} == {
        k: {c: r[c] for c in original} for k, r in table.items()
    }
    assert all(state[k]["extra"] == 5 for k in state if k[0] > 20 * (altered_at + 1))


@pytest.mark.parametrize("watermarks", ["table", "readonly"])
def test_a_schema_change_just_before_high_or_after_low_rereads_the_chunk(mariadb, database, make_capture, watermarks):
    populate_ledger(mariadb, database, 200)
    capture = make_capture([f"{database}.*"], watermarks=watermarks, column_rewrites="accept").start()
    capture.wait_running()
    check_schema_change_rereads(
        capture,
        database,
        execute=lambda sql: mariadb.execute(sql, database=database),
        landed=lambda: wait_until_landed(mariadb, capture),
        table=lambda: table_state(mariadb, database, "ledger"),
    )


def test_a_user_without_watermark_grants_is_told_which_grant(mariadb, database, make_capture):
    populate_ledger(mariadb, database, 10)
    mariadb.execute(
        "DROP USER IF EXISTS 'reader'@'%'",
        "CREATE USER 'reader'@'%' IDENTIFIED BY 'r'",
        f"GRANT SELECT ON `{database}`.* TO 'reader'@'%'",
        "GRANT SELECT ON logtide.* TO 'reader'@'%'",
    )
    mariadb.execute("DROP TABLE IF EXISTS logtide.watermarks")
    capture = make_capture([f"{database}.*"], user="reader", password="r")
    engine, source = open_engine(capture)
    try:
        with pytest.raises(DumpInputError, match=r"may not create .* GRANT CREATE, INSERT, UPDATE ON logtide\.\*"):
            engine.run(DumpRequest(tables=[f"{database}.ledger"]))
        admin = open_chunk_source("src", make_capture([f"{database}.*"], source="admin").config.source("admin"))
        admin.setup()  # what `logtide setup` does, as a user allowed to
        admin.close()
        with pytest.raises(DumpInputError, match=r"may not write .* GRANT INSERT, UPDATE ON logtide\.\* TO 'reader'"):
            engine.run(DumpRequest(tables=[f"{database}.ledger"]))
    finally:
        source.close()


def test_concurrent_dumps_of_different_tables_do_not_block_each_other(mariadb, database, make_capture):
    populate_ledger(mariadb, database, 500)
    mariadb.execute("CREATE TABLE other LIKE ledger", "INSERT INTO other SELECT * FROM ledger", database=database)
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    results: dict[str, dict] = {}

    def run(table: str) -> None:
        results[table] = run_dump(capture, f"{database}.{table}", 7)

    threads = [threading.Thread(target=run, args=(t,)) for t in ("ledger", "other")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert {t: r["rows"] for t, r in results.items()} == {"ledger": 500, "other": 500}
    wait_until_landed(mariadb, capture)
    for table in ("ledger", "other"):
        state, stats = reconciled_state(capture, database, table)
        assert state == table_state(mariadb, database, table) and stats.chunks == 72
