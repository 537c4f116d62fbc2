"""The landing zone's commit protocol, without a database: LSN order, atomic commits, spills, recovery."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from capture.events import Change, ChangeBatch, Column, Lsn, Op, SchemaChange, TableSchema, TransactionEnd
from capture.landing import Checkpoint, LandingZone
from capture.landing.files import parse_segment_name, segment_name
from capture.landing.log_writer import LogWriter

pytestmark = pytest.mark.unit

T = TableSchema("shop", "orders", (Column("id", pa.int64(), "bigint"), Column("v", pa.string(), "varchar")), ("id",))
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _event(major: int, minor: int, key: int) -> ChangeBatch:
    return ChangeBatch(T, f"0-1-{major}", NOW, False, [Change(Lsn(major, minor), Op.CREATE, None, (key, f"v{key}"))])


def _end(major: int) -> TransactionEnd:
    return TransactionEnd(Lsn(major), {"pos": major}, NOW)


def _writer(tmp_path, max_rows: int = 1000) -> tuple[LandingZone, LogWriter]:
    zone = LandingZone(tmp_path, "src")
    start = Checkpoint(Lsn(1), {"pos": 1})
    zone.write_checkpoint(start)
    return zone, LogWriter(zone, start, flush_interval_s=60, max_buffer_rows=max_rows)


def test_lsn_encoding_sorts_like_the_lsn():
    lsns = [Lsn(5, 0), Lsn(5, 1), Lsn(5, 2**32 - 1), Lsn(6, 0), Lsn(2**64, 3)]
    encoded = [lsn.encode() for lsn in lsns]
    assert encoded == sorted(encoded) and [Lsn.decode(e) for e in encoded] == lsns
    names = [segment_name(e, e) for e in encoded]
    assert names == sorted(names) and parse_segment_name(names[-1]) == (encoded[-1], encoded[-1])
    with pytest.raises(ValueError):
        Lsn(1, 2**32).encode()


def test_nothing_is_visible_before_the_commit_and_everything_after(tmp_path):
    zone, writer = _writer(tmp_path)
    writer.add(_event(10, 0, 1))
    writer.add(_event(10, 1, 2))
    writer.end_transaction(_end(20))
    writer.add(_event(30, 0, 3))  # open transaction
    assert zone.read_table("shop", "orders") is None
    writer.commit()
    assert zone.checkpoint().frontier == Lsn(20)
    rows = zone.read_table("shop", "orders").to_pylist()
    assert [r["after"]["id"] for r in rows] == [1, 2]
    assert rows[0]["_lsn"] == Lsn(10, 0).encode() and rows[0]["_op"] == "c" and rows[0]["before"] is None


def test_a_big_transaction_spills_and_a_crash_discards_the_spill(tmp_path):
    zone, writer = _writer(tmp_path, max_rows=3)
    writer.add(_event(10, 0, 1))
    writer.end_transaction(_end(20))
    for i in range(5):
        writer.add(_event(30, i, 100 + i))
        if writer.due():
            writer.flush()
    spilled = zone.committed_files("shop.orders", Lsn(10**6))
    assert len(spilled) == 2  # the committed transaction and the spill of the open one
    assert zone.checkpoint().frontier == Lsn(20)
    assert [r["after"]["id"] for r in zone.read_table("shop", "orders").to_pylist()] == [1]

    # crash now: a restart discards what is past the frontier, and reads it again from the source
    assert LandingZone(tmp_path, "src").discard_uncommitted(Lsn(20)) == 1
    assert len(zone.committed_files("shop.orders", Lsn(10**6))) == 1


def test_a_spilled_transaction_commits_whole(tmp_path):
    zone, writer = _writer(tmp_path, max_rows=3)
    for i in range(7):
        writer.add(_event(30, i, i))
        if writer.due():
            writer.flush()
    writer.end_transaction(_end(40))
    writer.commit()
    rows = zone.read_table("shop", "orders").to_pylist()
    assert [r["after"]["id"] for r in rows] == list(range(7))
    assert zone.checkpoint().frontier == Lsn(40)


def test_schema_history_holds_ddl_and_table_versions(tmp_path):
    zone, writer = _writer(tmp_path)
    writer.add(_event(10, 0, 1))
    writer.end_transaction(_end(11))
    writer.add_schema_change(SchemaChange(Lsn(12), "0-1-2", NOW, "shop", "ALTER TABLE orders ADD c INT"))
    writer.end_transaction(_end(13))
    wider = TableSchema("shop", "orders", (*T.columns, Column("c", pa.int32(), "int")), ("id",))
    writer.add(ChangeBatch(wider, "0-1-3", NOW, False, [Change(Lsn(14, 0), Op.CREATE, None, (2, "x", 5))]))
    writer.end_transaction(_end(15))
    writer.commit()
    history = zone.read_schema_history().to_pylist()
    assert [h["kind"] for h in history] == ["table", "ddl", "table"]
    assert zone.table_fingerprints() == {"shop.orders": wider.fingerprint}
    rows = zone.read_table("shop", "orders").to_pylist()
    assert rows[0]["after"] == {"id": 1, "v": "v1", "c": None} and rows[1]["after"] == {
        "id": 2,
        "v": "x",
        "c": 5,
    }


def test_a_table_record_lands_again_when_column_definitions_change(tmp_path):
    """MariaDB/MySQL columns carry their whole type (`Column.definition`: a VARCHAR's length, its
    charset, nullability), which the fingerprint leaves out: a new definition lands a new `table`
    record, as does the first one after a record without any (a landing zone written before them)."""

    def schema(email: str | None) -> TableSchema:
        return TableSchema("shop", "orders", (T.columns[0], Column("v", pa.string(), "varchar", email)), ("id",))

    old, d255, d320 = schema(None), schema('{"length":255}'), schema('{"length":320}')
    assert old.fingerprint == d255.fingerprint == d320.fingerprint and old.definitions is None
    zone, writer = _writer(tmp_path)
    for major, table in zip((10, 12, 14, 16), (old, d255, d255, d320), strict=True):
        writer.add(ChangeBatch(table, f"0-1-{major}", NOW, False, [Change(Lsn(major), Op.CREATE, None, (major, "x"))]))
        writer.end_transaction(_end(major + 1))
    writer.commit()
    history = zone.read_schema_history().to_pylist()
    assert [[c["definition"] for c in h["columns"]] for h in history] == [
        [None, None],
        [None, '{"length":255}'],
        [None, '{"length":320}'],
    ]
    restarted = LogWriter(zone, zone.checkpoint(), flush_interval_s=60, max_buffer_rows=1000)
    restarted.add(ChangeBatch(d320, "0-1-20", NOW, False, [Change(Lsn(20), Op.CREATE, None, (20, "x"))]))
    restarted.end_transaction(_end(21))
    restarted.commit()
    assert len(zone.read_schema_history()) == 3  # the last record's definitions: none again


def test_a_second_writer_is_locked_out(tmp_path):
    zone = LandingZone(tmp_path, "src")
    with (
        zone.lock(),
        pytest.raises(Exception, match="another capture instance"),
        LandingZone(tmp_path, "src").lock(),
    ):
        pass


def test_the_flush_interval_counts_from_when_the_source_began_reading(tmp_path):
    """A source that held transactions (PostgreSQL's groups) says since when (`read_at`): the
    writer is due that much sooner, so holding adds nothing to the commit-to-landed time."""
    _zone, writer = _writer(tmp_path)  # flush interval 60 s
    writer.add(_event(10, 0, 1))
    writer.end_transaction(_end(20))
    assert not writer.due()
    writer.commit()
    writer.add(_event(30, 0, 2))
    writer.end_transaction(TransactionEnd(Lsn(40), {"pos": 40}, NOW, read_at=time.monotonic() - 61))
    assert writer.due()


def test_an_end_that_asks_for_a_flush_makes_the_writer_due_at_once_and_only_until_its_commit(tmp_path):
    """A source that read a backlog's last large group to the end (PostgreSQL) asks for the
    commit now (`TransactionEnd.flush`); the writer's flush interval (60 s here) is not waited."""
    zone, writer = _writer(tmp_path)
    writer.add(_event(10, 0, 1))
    writer.end_transaction(TransactionEnd(Lsn(20), {"pos": 20}, NOW, read_at=time.monotonic(), flush=True))
    writer.add(_event(30, 0, 2))  # the next transaction, still open
    assert writer.due()
    writer.commit()
    assert zone.checkpoint().frontier == Lsn(20)
    writer.end_transaction(_end(40))
    assert not writer.due()  # an ordinary end waits for the interval again


def test_the_checkpoint_carries_the_newest_landed_commit_and_older_ones_are_read_from_the_files(tmp_path):
    """Every Airflow merge task logs how far the landing zone reaches (`capture_state`); on main that read
    the newest file of every table, thousands of reads with thousands of tables. The checkpoint keeps it:
    the open transaction's commit does not count, a later commit of an older-timed event does not go back,
    the files are not read (garbage here), and a landing zone whose checkpoint predates it still answers."""
    from datetime import timedelta

    from capture.status import last_landed_commit

    zone, writer = _writer(tmp_path)
    other = TableSchema("shop", "items", T.columns, ("id",))
    late, early, open_ = NOW + timedelta(hours=2), NOW + timedelta(hours=1), NOW + timedelta(hours=3)
    writer.add(ChangeBatch(T, "0-1-10", late, False, [Change(Lsn(10, 0), Op.CREATE, None, (1, "a"))]))
    writer.add(ChangeBatch(other, "0-1-10", early, False, [Change(Lsn(10, 1), Op.CREATE, None, (2, "b"))]))
    writer.end_transaction(_end(20))
    writer.add(ChangeBatch(T, "0-1-30", open_, False, [Change(Lsn(30, 0), Op.CREATE, None, (3, "c"))]))
    writer.commit()
    assert zone.checkpoint().last_commit_at == late
    writer.abandon_open_transaction()
    writer.add(ChangeBatch(other, "0-1-40", early, False, [Change(Lsn(40, 0), Op.CREATE, None, (4, "d"))]))
    writer.end_transaction(_end(50))
    writer.commit()
    assert zone.checkpoint().last_commit_at == late and last_landed_commit(zone) == late.timestamp()
    files = sorted((zone.log_dir).rglob("*.parquet"))
    saved = {f: f.read_bytes() for f in files}
    for f in files:
        f.write_bytes(b"not parquet: not read")
    assert last_landed_commit(zone) == late.timestamp()

    for f, data in saved.items():
        f.write_bytes(data)
    old = zone.checkpoint().to_json()
    del old["last_commit_at"]  # a checkpoint written before it was kept
    zone.checkpoint_path.write_text(json.dumps(old))
    assert not zone.checkpoint().last_commit_known and last_landed_commit(zone) == late.timestamp()
    resumed = LogWriter(zone, zone.checkpoint(), flush_interval_s=60, max_buffer_rows=1000)  # the files, read once
    resumed.add(ChangeBatch(T, "0-1-60", early, False, [Change(Lsn(60, 0), Op.CREATE, None, (5, "e"))]))
    resumed.end_transaction(_end(70))
    resumed.commit()
    assert zone.checkpoint().last_commit_known and zone.checkpoint().last_commit_at == late
    empty = LandingZone(tmp_path, "new")
    empty.write_checkpoint(Checkpoint(Lsn(1), {"pos": 1}))
    assert last_landed_commit(empty) is None and "last_commit_at" in json.loads(empty.checkpoint_path.read_text())


def test_a_resume_key_carried_only_when_it_changed_stays_in_every_checkpoint(tmp_path):
    """`TransactionEnd.keep`: a key (PostgreSQL's enum labels) rides only in the end after it changed;
    the checkpoints of later ends, committed together with it or after it, still hold its last value."""
    zone, writer = _writer(tmp_path)
    writer.end_transaction(TransactionEnd(Lsn(10), {"pos": 10, "enums": {"1": "sad"}}, NOW, keep=("enums",)))
    writer.end_transaction(_end(20))  # committed together: the later end lacks it
    writer.commit()
    assert zone.checkpoint().resume == {"pos": 20, "enums": {"1": "sad"}}
    writer.end_transaction(_end(30))
    writer.commit()
    assert zone.checkpoint().resume == {"pos": 30, "enums": {"1": "sad"}}
    writer.end_transaction(TransactionEnd(Lsn(40), {"pos": 40, "enums": {"1": "blue"}}, NOW, keep=("enums",)))
    writer.end_transaction(_end(50))
    writer.commit()
    assert zone.checkpoint().resume == {"pos": 50, "enums": {"1": "blue"}}


def test_a_dump_begun_before_a_table_lacked_rows_does_not_converge_it(tmp_path):
    """Audit: `unconverged.pending` takes any dump of the table whose last record is past `since`. One
    that began (and read its chunks) before `since`, when the table was not yet published, misses the
    rows written between its chunks and `since`, which no log carries either."""
    from datetime import timedelta

    from capture.landing import unconverged

    zone = LandingZone(tmp_path, "src")
    unconverged.record(zone, "public.late", "added to the publication", "logtide dump --table public.late")
    since = datetime.fromisoformat(unconverged.read(zone)["public.late"]["since"])
    dumps = [
        {
            "dump_id": "d1",
            "started_at": (since - timedelta(minutes=5)).isoformat(),
            "tables": {
                "public.late": {"done": True, "whole": True, "updated_at": (since + timedelta(seconds=2)).isoformat()}
            },
        }
    ]
    assert [t["table"] for t in unconverged.pending(zone, dumps)] == ["public.late"]


def test_a_table_a_readonly_publication_lacks_stays_unconverged_until_recorded_published_and_dumped(tmp_path):
    """A captured table a read-only publication lacks: its changes are in no log, so no dump converges it
    while it is missing (on main a finished dump cleared it). Once capture finds it published it records
    it anew; a dump started after that clears it, one started before does not."""
    from datetime import timedelta

    from capture.landing import unconverged

    zone = LandingZone(tmp_path, "src")
    unconverged.record(zone, "public.t", "is not in publication", "ALTER PUBLICATION ...", unpublished=True)
    since = datetime.fromisoformat(unconverged.read(zone)["public.t"]["since"])

    def dump(started) -> dict:
        return {
            "dump_id": "d",
            "started_at": started.isoformat(timespec="seconds"),
            "tables": {"public.t": {"done": True, "whole": True}},
        }

    after = [dump(since + timedelta(seconds=5))]
    assert [t["table"] for t in unconverged.pending(zone, after)] == ["public.t"]
    unconverged.record(zone, "public.t", "added to the publication", "logtide dump --source src --table public.t")
    published = datetime.fromisoformat(unconverged.read(zone)["public.t"]["since"])
    before = [dump(published - timedelta(seconds=1))]
    assert [t["table"] for t in unconverged.pending(zone, before)] == ["public.t"]  # began before it was published
    assert unconverged.pending(zone, [dump(published + timedelta(seconds=1))]) == []
    assert [t["table"] for t in unconverged.pending(zone, [dump(published)])] == ["public.t"]  # the same second


def test_what_the_publication_covered_is_kept_across_runs(tmp_path):
    from capture.landing import unconverged

    zone = LandingZone(tmp_path, "src")
    assert unconverged.covered(zone) is None
    unconverged.remember_covered(zone, {"public.m", "public.m1"}, {"public.m1"})
    assert unconverged.covered(zone) == ({"public.m", "public.m1"}, {"public.m1"})


def test_only_a_dump_of_the_whole_table_converges_it(tmp_path):
    """Audit: a key-list or key-range dump (`whole` false in its progress file) cleared the mark on main;
    a progress file written before `whole` existed does not say, so it does not count either."""
    from datetime import timedelta

    from capture.landing import unconverged

    zone = LandingZone(tmp_path, "src")
    unconverged.record(zone, "public.t", "added to the publication", "logtide dump --source src --table public.t")
    since = datetime.fromisoformat(unconverged.read(zone)["public.t"]["since"])
    started = (since + timedelta(seconds=5)).isoformat(timespec="seconds")

    def dump(**fields) -> dict:
        return {"dump_id": "d", "started_at": started, "tables": {"public.t": {"done": True, **fields}}}

    assert [t["table"] for t in unconverged.pending(zone, [dump(whole=False)])] == ["public.t"]
    assert [t["table"] for t in unconverged.pending(zone, [dump()])] == ["public.t"]
    assert unconverged.pending(zone, [dump(whole=False), dump(whole=True)]) == []
