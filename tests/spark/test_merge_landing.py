"""The merge on landing zones written by capture's own LogWriter, without a database: columns a
log event does not carry (PostgreSQL leaves unchanged TOASTed values out of updates) keep the
stored value, as capture/dump/reconcile.py's `apply` does."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest

from capture.config import parse_config
from capture.dump.reconcile import apply, reconcile_table
from capture.events import Change, ChangeBatch, Column, Lsn, Op, TableSchema, TransactionEnd
from capture.landing import Checkpoint, LandingZone
from capture.landing.log_writer import LogWriter
from spark_apps.merge import run_merge
from tests.spark.merging import changelog_replay, iceberg_state

pytestmark = pytest.mark.spark

DOCS = TableSchema(
    "db",
    "docs",
    (Column("id", pa.int32(), "integer"), Column("title", pa.string(), "text"), Column("body", pa.string(), "text")),
    ("id",),
)


class Log:
    """Transactions written through LogWriter, one commit (checkpoint) each."""

    def __init__(self, zone: LandingZone) -> None:
        self.writer = LogWriter(zone, Checkpoint(Lsn(1), {}), flush_interval_s=0, max_buffer_rows=1_000_000)
        self.major = 100

    def transaction(self, *changes: tuple[Op, tuple | None, tuple | None, tuple[str, ...]]) -> None:
        self.major += 10
        now = datetime.now(UTC)
        batch = [Change(Lsn(self.major, i), op, before, after, missing) for i, (op, before, after, missing) in
                 enumerate(changes)]  # fmt: skip
        self.writer.add(ChangeBatch(DOCS, str(self.major), now, False, batch))
        self.writer.end_transaction(TransactionEnd(Lsn(self.major + 1), {}, now))
        self.writer.commit()


def test_columns_an_event_does_not_carry_keep_the_stored_value(spark, catalogs, tmp_path):
    zone = LandingZone(tmp_path / "landing", "src")
    merge = catalogs["hadoop"].model_copy(update={"namespace": "toast"}).model_dump(mode="json")
    config = parse_config(
        {
            "landing": {"path": str(tmp_path / "landing")},
            "sources": {"src": {"kind": "mariadb", "user": "u", "server_id": 3}},
            "merge": merge,
        },
        require_env=False,
    )
    log = Log(zone)
    c, u, d = Op.CREATE, Op.UPDATE, Op.DELETE
    log.transaction((c, None, (1, "a", "big1"), ()), (c, None, (2, "b", "big2"), ()), (c, None, (4, "d", "big4"), ()))
    run_merge(spark, config, "src")
    # later runs: an update that leaves `body` out (NULL there means unknown), a row created and
    # updated the same way within one run, a real NULL, and a delete
    log.transaction((u, (1, "a", None), (1, "a2", None), ("body",)), (c, None, (3, "c", "big3"), ()))
    log.transaction((u, (3, "c", None), (3, "c2", None), ("body",)), (u, (2, "b", "big2"), (2, "b2", None), ()))
    log.transaction((d, (4, "d", "big4"), None, ()))
    run_merge(spark, config, "src")
    log.transaction((u, (1, "a2", None), (1, "a3", None), ("body",)))
    run_merge(spark, config, "src")

    target = iceberg_state(spark, "logtide.toast.db__docs")
    assert target == {
        (1,): {"id": 1, "title": "a3", "body": "big1"},
        (2,): {"id": 2, "title": "b2", "body": None},
        (3,): {"id": 3, "title": "c2", "body": "big3"},
    }
    stream, _ = reconcile_table(zone, "db", "docs")
    assert {k: dict(v) for k, v in apply(stream).items()} == target
    assert changelog_replay(spark, "logtide.toast.db__docs__changelog") == target


WATERMARKS = TableSchema(
    "logtide",
    "watermarks",
    tuple(
        Column(name, arrow_type, source)
        for name, arrow_type, source in (
            ("slot", pa.string(), "varchar(255)"),
            ("dump_id", pa.string(), "varchar(64)"),
            ("table_name", pa.string(), "varchar(200)"),
            ("chunk", pa.int32(), "int"),
            ("kind", pa.string(), "varchar(4)"),
            ("watermark_id", pa.string(), "char(36)"),
            ("written_at", pa.timestamp("us", tz="UTC"), "timestamp(6)"),
        )
    ),
    ("slot",),
)


def test_chunk_rows_a_postgres_snapshot_could_not_see_updated_are_dropped(spark, catalogs, tmp_path):
    """A chunk's snapshot (xmin:xmax:xip) misses a transaction whose commit is already in the WAL
    before LOW: that chunk row is older than the log, as reconcile.py's `hidden_events` says."""
    from capture.landing.chunks import ChunkMeta, write_chunk

    zone = LandingZone(tmp_path / "landing", "src")
    merge = catalogs["hadoop"].model_copy(update={"namespace": "visibility"}).model_dump(mode="json")
    config = parse_config(
        {"landing": {"path": str(tmp_path / "landing")}, "sources": {"src": {"kind": "mariadb", "user": "u",
         "server_id": 3}}, "merge": merge},
        require_env=False,
    )  # fmt: skip
    writer = LogWriter(zone, Checkpoint(Lsn(1), {}), flush_interval_s=0, max_buffer_rows=1_000_000)
    now = datetime.now(UTC)

    def commit(major: int, xid: int, table: TableSchema, *changes: Change, watermark: bool = False) -> None:
        writer.add(ChangeBatch(table, str(xid), now, watermark, list(changes)))
        writer.end_transaction(TransactionEnd(Lsn(major + 1), {}, now))
        writer.commit()

    def mark(major: int, kind: str, mark_id: str) -> None:
        row = ("d1/db.docs", "d1", "db.docs", 1, kind, mark_id, now)
        commit(major, 90 + major, WATERMARKS, Change(Lsn(major), Op.UPDATE, row, row), watermark=True)

    c, u = Op.CREATE, Op.UPDATE
    commit(110, 100, DOCS, *(Change(Lsn(110, i), c, None, (i, f"t{i}", "old")) for i in range(1, 7)))
    run_merge(spark, config, "src")
    before_low = Lsn(125).encode()
    commit(127, 480, DOCS, Change(Lsn(127), u, (2, "t2", "old"), (2, "t2", "new")))  # in progress for the snapshot
    commit(130, 500, DOCS, Change(Lsn(130), u, (3, "t3", "old"), (3, "t3", "new")))  # xid >= xmax: not seen
    commit(135, 450, DOCS, Change(Lsn(135), u, (4, "t4", "old"), (4, "t4", "new")))  # seen by the snapshot
    mark(140, "LOW", "low-1")
    commit(150, 510, DOCS, Change(Lsn(150), u, (5, "t5", "old"), (5, "t5", "new")))  # in the window
    rows = [(1, "t1", "old"), (2, "t2", "old"), (3, "t3", "old"), (4, "t4", "new"), (5, "t5", "old"), (6, "t6", "x")]
    meta = ChunkMeta("d1", "db.docs", 1, "low-1", "high-1", ("id",), None, None, None, True, None, len(rows),
                     read_view={"snapshot": "470:495:480", "before_low": before_low})  # fmt: skip
    write_chunk(zone, DOCS, meta, pa.array([dict(zip(DOCS.names, r, strict=True)) for r in rows], DOCS.row_type))
    mark(160, "HIGH", "high-1")
    report = run_merge(spark, config, "src")["tables"][0]

    stream, stats = reconcile_table(zone, "db", "docs")
    assert stats.dropped_by_visibility == 2 and stats.dropped_by_window == 3
    assert report["dropped_by_window"] == 3
    expected = {k: dict(v) for k, v in apply(stream).items()}
    assert iceberg_state(spark, "logtide.visibility.db__docs") == expected
    assert expected[(2,)]["body"] == expected[(3,)]["body"] == "new" and expected[(6,)]["body"] == "x"
