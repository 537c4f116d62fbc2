"""capture/landing/reader.py on landing zones written by capture's own LogWriter: committed files
below a frontier, the watermark index, and the chunk a HIGH watermark closes."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from capture.errors import WatermarkError
from capture.events import Change, ChangeBatch, Column, Lsn, Op, TableSchema, TransactionEnd
from capture.landing import Checkpoint, LandingZone
from capture.landing.chunks import ChunkMeta, chunk_path, read_chunk_meta, write_chunk, write_chunk_high
from capture.landing.files import segment_name
from capture.landing.log_writer import LogWriter
from capture.landing.reader import (
    DumpedTables,
    Watermarks,
    chunk_files,
    chunk_window,
    closed_chunks,
    dump_chunks,
    merge_tables,
    table_segments,
)
from capture.landing.zone import table_folder
from tests.spark.landing import WATERMARKS

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, tzinfo=UTC)
# a hostile name: a slash and a percent sign are percent-encoded in folder names
T = TableSchema("d b", "t.1/%", (Column("id", pa.int32(), "integer"), Column("v", pa.string(), "text")), ("id",))


class Zone:
    """Source `src` under tmp_path: each `commit` is one transaction ending at `major + 1` and a checkpoint."""

    def __init__(self, tmp_path) -> None:
        self.zone = LandingZone(tmp_path, "src")
        self.writer = LogWriter(self.zone, Checkpoint(Lsn(1), {}), flush_interval_s=0, max_buffer_rows=10**6)

    def commit(self, major: int, table: TableSchema, row: tuple, watermark: bool = False) -> None:
        self.writer.add(ChangeBatch(table, str(major), NOW, watermark, [Change(Lsn(major), Op.UPDATE, row, row)]))
        self.writer.end_transaction(TransactionEnd(Lsn(major + 1), {}, NOW))
        self.writer.commit()

    def mark(self, major: int, kind: str, mark_id: str, chunk: int = 1, dump: str = "d1") -> None:
        row = (f"{dump}/{T.schema}.{T.table}", dump, f"{T.schema}.{T.table}", chunk, kind, mark_id, NOW)
        self.commit(major, WATERMARKS, row, watermark=True)

    def chunk(
        self, number: int, low: str, high: str, rows: int = 2, dump: str = "d1", low_lsn: int | None = None
    ) -> ChunkMeta:
        meta = ChunkMeta(dump, f"{T.schema}.{T.table}", number, low, high, ("id",), None, None, None,
                         False, None, rows, low_lsn=low_lsn)  # fmt: skip
        write_chunk(self.zone, T, meta, pa.array([{"id": i, "v": "x"} for i in range(rows)], T.row_type))
        return meta

    def readonly_chunk(self, number: int, low: int, high: int | None, rows: int = 2, high_id: str = "") -> ChunkMeta:
        """A chunk dumped with read-only watermarks: LOW in its file; HIGH (when given) in its HIGH
        file, naming `high_id` when given (a file left by an attempt the chunk was redone after)."""
        meta = self.chunk(number, f"low-{number}", f"high-{number}", rows, low_lsn=Lsn(low).encode())
        if high is not None:
            path = chunk_path(self.zone, "d1", T.schema, T.table, number)
            write_chunk_high(path, replace(meta, high_id=high_id or meta.high_id), Lsn(high).encode())
        return meta


def test_segments_are_the_committed_files_below_the_frontier(tmp_path):
    z = Zone(tmp_path)
    for major in (10, 20, 30):
        z.commit(major, T, (major, "v"))
    folder = z.zone.log_dir / table_folder(T.schema, T.table)
    assert sorted(p.name for p in folder.iterdir()) == [
        segment_name(Lsn(m).encode(), Lsn(m).encode()) for m in (10, 20, 30)
    ]
    # a file past the frontier (a crash before the checkpoint) and a temp file are not committed
    (folder / segment_name(Lsn(40).encode(), Lsn(40).encode())).write_bytes(b"")
    (folder / (".tmp-" + segment_name(Lsn(5).encode(), Lsn(5).encode()))).write_bytes(b"")
    frontier = z.zone.checkpoint().frontier.encode()
    assert [s.first for s in table_segments(z.zone, T.schema, T.table, frontier)] == [
        Lsn(m).encode() for m in (10, 20, 30)
    ]
    assert [s.first for s in table_segments(z.zone, T.schema, T.table, frontier, since=Lsn(20).encode())] == [
        Lsn(20).encode(),
        Lsn(30).encode(),
    ]
    # a merge "as of" an earlier frontier sees the files starting below it
    assert [s.first for s in table_segments(z.zone, T.schema, T.table, Lsn(20).encode())] == [Lsn(10).encode()]
    assert z.zone.committed_files(table_folder(T.schema, T.table)) == [
        s.path for s in table_segments(z.zone, T.schema, T.table, frontier)
    ]
    assert table_segments(z.zone, "d b", "absent", frontier) == []


def test_watermarks_are_found_by_id_and_follow_the_checkpoint(tmp_path):
    z = Zone(tmp_path)
    z.mark(10, "LOW", "a")
    z.mark(20, "HIGH", "b")
    marks = Watermarks(z.zone)
    assert marks.find("b").lsn == Lsn(20).encode() and marks.find("b").kind == "HIGH"
    assert marks.find("a").lsn == Lsn(10).encode() and marks.find("a").table == "d b.t.1/%"
    assert marks.find("c") is None
    z.mark(30, "LOW", "c")
    assert marks.find("c") is None  # not looked for past the frontier it has seen
    marks.refresh()
    assert marks.find_all({"a", "c", "x"}).keys() == {"a", "c"}
    assert [m.id for m in marks.since(Lsn(20).encode())] == ["b", "c"]
    assert [m.id for m in marks.all()] == ["a", "b", "c"]
    # as of an earlier frontier: what came at or after it is not there, and it does not move
    fixed = Watermarks(z.zone, Lsn(20).encode())
    assert [m.id for m in fixed.all()] == ["a"]
    fixed.refresh()
    assert [m.id for m in fixed.all()] == ["a"]


def test_no_checkpoint_means_no_watermarks(tmp_path):
    marks = Watermarks(LandingZone(tmp_path, "src"))
    assert marks.frontier == 0 and marks.all() == [] and marks.find("a") is None


def test_closed_chunks_skip_redone_and_missing_chunk_files(tmp_path):
    z = Zone(tmp_path)
    z.chunk(1, "low-1", "high-1")
    z.mark(10, "LOW", "low-1")
    z.mark(20, "HIGH", "high-1")
    z.mark(30, "LOW", "low-2a")
    z.mark(40, "HIGH", "high-2a", chunk=2)  # chunk 2 redone below: its file carries high-2b
    z.chunk(2, "low-2b", "high-2b", rows=3)
    z.mark(50, "LOW", "low-2b", chunk=2)
    z.mark(60, "HIGH", "high-2b", chunk=2)
    z.mark(70, "HIGH", "high-3", chunk=3)  # no chunk file at all
    marks = Watermarks(z.zone)
    found, stale = closed_chunks(z.zone, marks, T.schema, T.table, 0)
    assert [(c.meta.chunk, c.low, c.high, c.meta.rows) for c in found] == [
        (1, Lsn(10).encode(), Lsn(20).encode(), 2),
        (2, Lsn(50).encode(), Lsn(60).encode(), 3),
    ]
    assert found[1].path == chunk_path(z.zone, "d1", T.schema, T.table, 2) and found[1].row_type == T.row_type
    assert [m.id for m in stale] == ["high-2a", "high-3"]
    since = closed_chunks(z.zone, marks, T.schema, T.table, Lsn(30).encode())[0]
    assert [c.meta.chunk for c in since] == [2]
    assert [c.meta.chunk for c in dump_chunks(z.zone, marks, "d1", T.schema, T.table)] == [1, 2]
    assert chunk_files(z.zone, T.schema, T.table) == [chunk_path(z.zone, "d1", T.schema, T.table, n) for n in (1, 2)]


def test_a_high_without_its_low_before_it_is_refused(tmp_path):
    z = Zone(tmp_path)
    z.chunk(1, "low-1", "high-1")
    z.mark(10, "HIGH", "high-1")
    z.mark(20, "LOW", "low-1")
    with pytest.raises(WatermarkError, match="its LOW after it"):
        closed_chunks(z.zone, Watermarks(z.zone), T.schema, T.table, 0)
    z.chunk(1, "low-9", "high-9", dump="d2")
    z.mark(30, "HIGH", "high-9", dump="d2")
    with pytest.raises(WatermarkError, match="no LOW"):
        closed_chunks(z.zone, Watermarks(z.zone), T.schema, T.table, Lsn(25).encode())


def test_a_dump_whose_high_is_past_the_frontier_is_not_complete(tmp_path):
    z = Zone(tmp_path)
    z.chunk(1, "low-1", "high-1")
    z.mark(10, "LOW", "low-1")
    z.mark(20, "HIGH", "high-1")
    z.chunk(2, "low-2", "high-2")
    z.mark(30, "LOW", "low-2", chunk=2)
    z.mark(40, "HIGH", "high-2", chunk=2)
    assert dump_chunks(z.zone, Watermarks(z.zone, Lsn(40).encode()), "d1", T.schema, T.table) is None
    assert len(dump_chunks(z.zone, Watermarks(z.zone), "d1", T.schema, T.table)) == 2


def test_merge_tables_are_the_logged_and_the_dumped_tables(tmp_path):
    z = Zone(tmp_path)
    other = TableSchema("shop", "orders", T.columns, ("id",))
    z.commit(10, other, (1, "v"))
    z.mark(20, "LOW", "low-1")
    z.chunk(1, "low-1", "high-1")  # the hostile table has only a chunk
    assert merge_tables(z.zone) == ["d b.t.1/%", "shop.orders"]
    assert merge_tables(LandingZone(tmp_path, "empty")) == []


def test_the_dumped_tables_are_listed_again_only_when_a_dump_folder_changed(tmp_path):
    zone = LandingZone(tmp_path, "src")
    chunks = zone.root / "chunks"
    listed = DumpedTables(zone)
    assert listed() == set()

    def add(dump: str, table: str, age_s: int) -> None:  # made `age_s` ago: not recent (DumpedTables.RACY_S)
        (chunks / dump / table_folder("s", table)).mkdir(parents=True)
        for folder in (chunks, chunks / dump):
            os.utime(folder, ns=(time.time_ns() - age_s * 10**9,) * 2)

    add("d1", "a", 60)
    first = listed()
    assert first == {("s", "a")} and listed() is first  # unchanged: the same object, nothing listed
    add("d1", "b", 50)  # a table's folder in a dump folder
    second = listed()
    assert second == {("s", "a"), ("s", "b")} and listed() is second
    add("d2", "a", 40)  # a new dump of a table
    assert listed() is not second
    (chunks / "d3").mkdir()  # changed just now: listed again until it is not recent
    third = listed()
    assert listed() is not third


def test_read_only_chunks_are_closed_by_their_high_file_below_the_frontier(tmp_path):
    """Read-only chunks (no watermark rows) take LOW from their file and HIGH from their HIGH file, in
    HIGH order with the table-watermark chunks; not while the HIGH file is missing, names another
    attempt, or is at or past the frontier."""
    z = Zone(tmp_path)
    z.chunk(1, "low-1", "high-1")
    z.mark(10, "LOW", "low-1")
    z.mark(30, "HIGH", "high-1")
    z.readonly_chunk(2, low=20, high=25)  # HIGH before chunk 1's: placed first
    z.readonly_chunk(3, low=25, high=25, rows=3)  # nothing committed while it was read: LOW = HIGH
    z.readonly_chunk(4, low=26, high=None)  # HIGH not read yet
    z.readonly_chunk(5, low=27, high=28, high_id="high-5-before-redo")
    z.readonly_chunk(6, low=40, high=60)  # past the frontier
    z.commit(50, T, (50, "v"))
    marks = Watermarks(z.zone)
    found, stale = closed_chunks(z.zone, marks, T.schema, T.table, 0)
    assert [(c.meta.chunk, c.low, c.high, c.meta.rows) for c in found] == [
        (2, Lsn(20).encode(), Lsn(25).encode(), 2),
        (3, Lsn(25).encode(), Lsn(25).encode(), 3),
        (1, Lsn(10).encode(), Lsn(30).encode(), 2),
    ]
    assert stale == [] and found[0].row_type == T.row_type and found[0].high_ts is not None
    assert [c.meta.chunk for c in closed_chunks(z.zone, marks, T.schema, T.table, Lsn(26).encode())[0]] == [1]
    assert dump_chunks(z.zone, marks, "d1", T.schema, T.table) is None  # 4, 5 and 6 are not closed
    path = chunk_path(z.zone, "d1", T.schema, T.table, 6)
    meta = read_chunk_meta(path)
    assert chunk_window(marks, path, meta) is None
    z.commit(70, T, (70, "v"))
    marks.refresh()
    window = chunk_window(marks, path, meta)
    assert (window.low, window.high) == (Lsn(40).encode(), Lsn(60).encode())
    z.readonly_chunk(4, low=26, high=27)
    z.readonly_chunk(5, low=27, high=28)  # redone: its HIGH file names the chunk file's HIGH now
    assert [c.meta.chunk for c in dump_chunks(z.zone, marks, "d1", T.schema, T.table)] == [1, 2, 3, 4, 5, 6]
    assert [c.meta.chunk for c in closed_chunks(z.zone, marks, T.schema, T.table, 0)[0]] == [2, 3, 4, 5, 1, 6]


def test_read_only_chunks_sharing_a_high_keep_chunk_order_across_dumps(tmp_path):
    """On an idle server many read-only chunks share one HIGH (the binlog end, the frontier a
    heartbeat placed there): they are placed in chunk order, dump by dump (chunk 10 after chunk 9),
    and another table's HIGH files are not theirs."""
    z = Zone(tmp_path)
    other = TableSchema("d b", "t.2", T.columns, ("id",))
    for dump in ("d1", "d0"):
        for number in (10, 9, 2):
            meta = z.chunk(number, f"low-{dump}-{number}", f"high-{dump}-{number}", dump=dump, low_lsn=Lsn(20).encode())
            path = chunk_path(z.zone, dump, T.schema, T.table, number)
            write_chunk_high(path, meta, Lsn(25, 3).encode())
            other_path = chunk_path(z.zone, dump, other.schema, other.table, number)
            other_path.parent.mkdir(parents=True, exist_ok=True)
            (other_path.with_name(f"{number:08d}.high.json")).write_text(path.with_suffix("").name)  # not JSON
    z.commit(25, T, (25, "v"))  # frontier 26: past HIGH (25, 3)
    found, _ = closed_chunks(z.zone, Watermarks(z.zone), T.schema, T.table, 0)
    assert [(c.meta.dump_id, c.meta.chunk) for c in found] == [
        ("d0", 2), ("d0", 9), ("d0", 10), ("d1", 2), ("d1", 9), ("d1", 10)
    ]  # fmt: skip
    assert {c.high for c in found} == {Lsn(25, 3).encode()}


def test_a_heartbeat_moves_the_committed_frontier_past_a_high_at_the_log_end(tmp_path):
    """`LogWriter.advance`: the first move to a log end commits minor 1, each later one at the same end
    one past the committed minor; a move at or behind what is pending or committed changes nothing,
    and a transaction after it commits past it."""
    z = Zone(tmp_path)
    z.commit(40, T, (40, "v"))  # frontier (41, 0)
    z.writer.advance(Lsn(41), {"pos": 41})
    z.writer.advance(Lsn(41), {"pos": 41})  # pending already: no second move
    z.writer.commit()
    assert z.zone.checkpoint().frontier == Lsn(41, 1) and z.zone.checkpoint().resume == {"pos": 41}
    z.writer.advance(Lsn(41), {"pos": 41})
    z.writer.commit()
    assert z.zone.checkpoint().frontier == Lsn(41, 2)
    z.writer.advance(Lsn(30), {"pos": 30})  # behind: ignored
    z.writer.advance(Lsn(60), {"pos": 60})  # a later end (e.g. after a rotation): minor 1 there
    z.writer.commit()
    assert z.zone.checkpoint().frontier == Lsn(60, 1)
    z.commit(70, T, (70, "v"))
    assert z.zone.checkpoint().frontier == Lsn(71)
    assert [int(e["_lsn"]) for e in pq_rows(z.zone)] == [Lsn(40).encode(), Lsn(70).encode()]


def pq_rows(zone: LandingZone) -> list[dict]:
    import pyarrow.parquet as pq

    folder = zone.log_dir / table_folder(T.schema, T.table)
    return [r for f in sorted(folder.glob("*.parquet")) for r in pq.read_table(f, columns=["_lsn"]).to_pylist()]
