"""The target's layout and the MERGE's key filter: files hold narrow key ranges, a MERGE reads
only the files its keys can be in, and the filter never changes what a MERGE does (composite
and string keys with quotes, backslashes and non-ASCII text; a table of the older layout)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from capture.config import parse_config
from capture.dump.reconcile import apply, reconcile_table
from capture.events import Change, ChangeBatch, Column, Lsn, Op, TableSchema, TransactionEnd
from capture.landing import Checkpoint, LandingZone
from capture.landing.log_writer import LogWriter
from capture.merge import app as merge_app
from capture.merge import iceberg, pruning
from capture.merge import table as merge_table
from capture.merge.app import run_merge
from capture.merge.plan import chunks_since
from capture.merge.pruning import key_filter
from tests.spark.landing import Landing
from tests.spark.merging import iceberg_state

pytestmark = pytest.mark.spark

TAGS = TableSchema(
    "db",
    "tags",
    (Column("name", pa.string(), "varchar(40)"), Column("n", pa.int32(), "int"), Column("v", pa.string(), "text")),
    ("name", "n"),
)
ITEMS = TableSchema("db", "items", (Column("id", pa.int64(), "bigint"), Column("v", pa.string(), "text")), ("id",))


class Log:
    def __init__(self, zone: LandingZone) -> None:
        self.writer = LogWriter(zone, Checkpoint(Lsn(1), {}), flush_interval_s=0, max_buffer_rows=1_000_000)
        self.major = 100

    def transaction(self, table: TableSchema, changes: list[tuple[Op, tuple | None, tuple | None]]) -> None:
        self.major += 10
        now = datetime.now(UTC)
        batch = [Change(Lsn(self.major, i), op, before, after, ()) for i, (op, before, after) in enumerate(changes)]
        self.writer.add(ChangeBatch(table, str(self.major), now, False, batch))
        self.writer.end_transaction(TransactionEnd(Lsn(self.major + 1), {}, now))
        self.writer.commit()


def _config(catalogs, tmp_path, namespace: str):
    return parse_config(
        {
            "landing": {"path": str(tmp_path / "landing")},
            "sources": {"src": {"kind": "mariadb", "user": "u", "server_id": 3}},
            "merge": catalogs["hadoop"].model_copy(update={"namespace": namespace}).model_dump(mode="json"),
        },
        require_env=False,
    )


def _data_files(frame) -> tuple[int, int]:
    """(data files read, data files skipped) by Iceberg's scan of `frame`, run first."""
    frame.collect()
    plan = frame._jdf.queryExecution().executedPlan()
    if plan.getClass().getSimpleName() == "AdaptiveSparkPlanExec":
        plan = plan.executedPlan()
    leaves = plan.collectLeaves().iterator()
    while leaves.hasNext():
        metrics = leaves.next().metrics()
        if metrics.contains("resultDataFiles"):
            return metrics.apply("resultDataFiles").value(), metrics.apply("skippedDataFiles").value()
    raise AssertionError("no Iceberg scan in the plan")


def _hashable(value):
    return bytes(value) if isinstance(value, bytearray) else value


def _reference(zone: LandingZone, table: str) -> dict:
    stream, _ = reconcile_table(zone, "db", table)
    return {k: dict(v) for k, v in apply(stream).items()}


def test_string_and_composite_keys_merge_exactly_through_the_key_filter(spark, catalogs, tmp_path):
    zone = LandingZone(tmp_path / "landing", "src")
    config = _config(catalogs, tmp_path, "layout_keys")
    log = Log(zone)
    c, u, d = Op.CREATE, Op.UPDATE, Op.DELETE
    names = ["plain", "it's", "back\\slash", "", "é ü 中文 🙂", "x') OR 1=1 --", "new\nline", "Plain"]
    rows = [(name, n, f"{name}/{n}") for name in names for n in (1, 2)]
    log.transaction(TAGS, [(c, None, r) for r in rows])
    run_merge(spark, config, "src")
    changed = [r for r in rows if r[1] == 1]
    log.transaction(TAGS, [(u, r, (r[0], r[1], "changed")) for r in changed[:4]])
    log.transaction(TAGS, [(d, r, None) for r in changed[4:]] + [(c, None, ("zz'z", 7, "new"))])
    report = run_merge(spark, config, "src")["tables"][0]

    assert report["key_filter"] is True
    target = iceberg_state(spark, "logtide.layout_keys.db__tags", key=("name", "n"))
    assert target == _reference(zone, "tags")
    assert target[("it's", 1)]["v"] == "changed" and ("é ü 中文 🙂", 1) not in target
    assert target[("é ü 中文 🙂", 2)]["v"] == "é ü 中文 🙂/2" and target[("zz'z", 7)]["v"] == "new"


def test_a_merge_of_recent_keys_reads_only_the_files_that_can_hold_them(spark, catalogs, tmp_path, monkeypatch):
    zone = LandingZone(tmp_path / "landing", "src")
    config = _config(catalogs, tmp_path, "layout_files")
    log = Log(zone)
    c, u = Op.CREATE, Op.UPDATE
    for block in range(4):  # four merges of inserts: files of disjoint key ranges
        log.transaction(ITEMS, [(c, None, (i, "v0")) for i in range(block * 1000, block * 1000 + 1000)])
        run_merge(spark, config, "src")
    name = "logtide.layout_files.db__items"
    properties = iceberg.iceberg_table(spark, name).properties()
    assert properties.get("write.distribution-mode") == "range" and properties.get("logtide.layout") == iceberg.LAYOUT

    keys = [3990, 3995, 2999]
    source = spark.createDataFrame([(k,) for k in keys], "id bigint")
    predicate = key_filter(source, ["id"], {"id": spark.table(name).schema["id"].dataType})
    scanned = spark.table(name).alias("t").where(predicate)
    assert sorted(r["id"] for r in scanned.select("id").collect()) == sorted(keys)
    read, skipped = _data_files(scanned)
    assert read == 2 and skipped >= 2  # the files of keys 3000..3999 and 2000..2999
    assert _data_files(spark.table(name)) == (read + skipped, 0)

    monkeypatch.setattr(pruning, "PRUNE_MAX_KEYS", 2)  # more keys than that: no filter, same result
    log.transaction(ITEMS, [(u, (k, "v0"), (k, "v1")) for k in keys])
    report = run_merge(spark, config, "src")["tables"][0]
    assert report["key_filter"] is False
    state = iceberg_state(spark, name)
    assert state == _reference(zone, "items") and state[(2999,)]["v"] == "v1" and len(state) == 4000


def test_a_table_of_the_older_layout_gets_the_new_one_and_keeps_merging(spark, catalogs, tmp_path):
    zone = LandingZone(tmp_path / "landing", "src")
    config = _config(catalogs, tmp_path, "layout_old")
    name = "logtide.layout_old.db__items"
    spark.sql("CREATE NAMESPACE IF NOT EXISTS logtide.layout_old")
    spark.sql(
        f"CREATE TABLE {name} (id bigint, v string, _lsn decimal(38,0), _applied_at timestamp) USING iceberg "
        "TBLPROPERTIES ('format-version' = '2', 'write.merge.mode' = 'merge-on-read')"
    )
    spark.sql(f"ALTER TABLE {name} WRITE LOCALLY ORDERED BY id")
    log = Log(zone)
    log.transaction(ITEMS, [(Op.CREATE, None, (i, "a")) for i in range(10)])
    run_merge(spark, config, "src")
    log.transaction(ITEMS, [(Op.UPDATE, (3, "a"), (3, "b")), (Op.DELETE, (4, "a"), None)])
    run_merge(spark, config, "src")
    properties = iceberg.iceberg_table(spark, name).properties()
    assert properties.get("logtide.layout") == iceberg.LAYOUT and properties.get("write.distribution-mode") == "range"
    assert iceberg_state(spark, name) == _reference(zone, "items")


def test_the_key_filter_keeps_every_key_of_every_type_it_handles(spark):
    """The ranges round-trip each key type exactly (decimal, dates, timestamps with and without
    zone, binary, boolean, strings): filtering a frame by them keeps every key of the run."""
    from datetime import date
    from decimal import Decimal

    from pyspark.sql import functions as sf

    columns = {
        "d": ("decimal(20,0)", [Decimal(18446744073709551615 - i * 7919) for i in range(60)]),
        "day": ("date", [date(1999, 12, 31 - i % 28) for i in range(60)]),
        "ts": ("timestamp", [datetime(2021, 3, 28, 1, i % 60, 5, i * 11, tzinfo=UTC) for i in range(60)]),
        "ntz": ("timestamp_ntz", [datetime(2020, 10, 25, 2, i % 60, 0, 999_999 - i) for i in range(60)]),
        "b": ("binary", [bytes([255 - i, 0, i]) for i in range(60)]),
        "flag": ("boolean", [i % 2 == 0 for i in range(60)]),
        "s": ("string", [f"k{i:03d}'\\ü" for i in range(60)]),
    }
    for column, (type_name, values) in columns.items():
        frame = spark.createDataFrame([(v,) for v in values], f"{column} {type_name}")
        run = frame.where(sf.col(column).isin(values[::3]) if type_name != "boolean" else sf.col(column))
        predicate = key_filter(run, [column], {column: frame.schema[column].dataType})
        assert predicate is not None
        kept = {_hashable(r[0]) for r in frame.alias("t").where(predicate).collect()}
        assert {_hashable(r[0]) for r in run.collect()} <= kept, column
        if type_name not in ("boolean", "date"):
            assert len(kept) < len(set(values)), column  # and the ranges exclude something


def _metadata_versions(spark, name: str) -> int:
    """Metadata files the table has been written as (its current one and the ones before it)."""
    table = iceberg.iceberg_table(spark, name)
    table.refresh()
    return table.operations().current().previousFiles().size() + 1


def test_a_first_load_writes_each_table_twice_and_a_failed_one_reruns_to_the_same_rows(
    spark, catalogs, tmp_path, monkeypatch
):
    zone = LandingZone(tmp_path / "landing", "src")
    config = _config(catalogs, tmp_path, "layout_created")
    log = Log(zone)
    c, u, d = Op.CREATE, Op.UPDATE, Op.DELETE
    log.transaction(TAGS, [(c, None, (f"k{i}", i % 3, "a")) for i in range(30)])
    name, changelog = "logtide.layout_created.db__tags", "logtide.layout_created.db__tags__changelog"

    def failing(self, stream, props):
        raise RuntimeError("killed before the target's write")

    with monkeypatch.context() as patch:  # the changelog commits, the target is created and never written
        patch.setattr(merge_table.TableMerge, "_merge", failing)
        assert run_merge(spark, config, "src")["failed"]
    assert iceberg.applied_frontier(spark, name) == 0 < iceberg.applied_frontier(spark, changelog)
    log.transaction(TAGS, [(u, ("k1", 1, "a"), ("k1", 1, "b")), (d, ("k2", 2, "a"), None)])
    run_merge(spark, config, "src")
    assert iceberg_state(spark, name, key=("name", "n")) == _reference(zone, "tags")
    assert len(_reference(zone, "tags")) == 29

    fresh = _config(catalogs, tmp_path, "layout_fresh")  # a first load without failure
    report = run_merge(spark, fresh, "src")["tables"][0]
    target, frontier = "logtide.layout_fresh.db__tags", int(report["frontier"])
    # created with its layout, then written: two metadata files each (no ALTER, no property update)
    assert _metadata_versions(spark, target) == 2 and _metadata_versions(spark, target + "__changelog") == 2
    table = iceberg.iceberg_table(spark, target)
    order = [
        (str(f.direction()), str(f.nullOrder()), table.schema().findColumnName(f.sourceId()))
        for f in table.sortOrder().fields()
    ]
    assert order == [("ASC", "NULLS FIRST", "name"), ("ASC", "NULLS FIRST", "n")]
    properties = table.properties()
    assert properties.get("write.distribution-mode") == "range" and properties.get("logtide.layout") == "2"
    assert (
        properties.get("logtide.frontier") == str(frontier) == table.currentSnapshot().summary().get("logtide.frontier")
    )
    assert iceberg_state(spark, target, key=("name", "n")) == _reference(zone, "tags")


def _jobs(spark) -> set[int]:
    """The ids of the Spark jobs run so far (the listener's view, once it caught up)."""
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    return set(spark.sparkContext.statusTracker().getJobIdsForGroup(None))


def test_a_table_of_one_chunk_loads_sorted_by_key_in_two_single_stage_jobs(spark, catalogs, tmp_path):
    """A table below the chunk size (one chunk, into an empty target): the changelog's write and the
    target's, each one job of one stage (no join with the chunks' bounds, no shuffle for the
    target's layout), and the target's file still sorted by key although the chunk was not."""
    landing = Landing(tmp_path, catalogs, "one_chunk")
    landing.mark(110, "LOW", "low-1")
    landing.chunk([(i, f"t{i}", "x") for i in (5, 3, 9, 1, 7)])
    landing.mark(120, "HIGH", "high-1")
    before = _jobs(spark)
    report = run_merge(spark, landing.config, "src")["tables"][0]
    jobs = sorted(_jobs(spark) - before)

    tracker = spark.sparkContext.statusTracker()
    assert [len(tracker.getJobInfo(j).stageIds) for j in jobs] == [1, 1]
    assert report["chunks"] == 1 and report["added_records"] == 5
    name = "logtide.one_chunk.db__docs"
    assert iceberg_state(spark, name) == _reference(landing.zone, "docs")
    files = [r[0] for r in spark.sql(f"SELECT file_path FROM {name}.files").collect()]
    assert len(files) == 1
    assert pq.read_table(files[0].removeprefix("file:")).column("id").to_pylist() == [1, 3, 5, 7, 9]


def test_a_table_of_one_chunk_keeps_its_high_commit_time_in_the_changelog(spark, catalogs, tmp_path):
    """A one-chunk table's rows reach the changelog at its HIGH watermark: that LSN and the commit
    time of HIGH's transaction, to the microsecond (a column expression in the write, not a
    constant of the generated code: `row_constant`)."""
    from capture.landing.reader import Watermarks

    landing = Landing(tmp_path, catalogs, "one_chunk_ts")
    landing.mark(110, "LOW", "low-1")
    landing.chunk([(i, f"t{i}", "x") for i in (2, 1, 3)])
    landing.mark(120, "HIGH", "high-1")
    frontier = landing.zone.checkpoint().frontier.encode()
    (chunk,), _ = chunks_since(landing.zone, Watermarks(landing.zone, frontier), "db", "docs", 0)
    assert chunk.high_ts is not None
    run_merge(spark, landing.config, "src")

    rows = spark.sql(
        "SELECT DISTINCT CAST(_lsn AS STRING), unix_micros(_commit_ts), _dump_id, _chunk"
        " FROM logtide.one_chunk_ts.db__docs__changelog WHERE _source = 'chunk'"
    ).collect()
    micros = (chunk.high_ts - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    assert [tuple(r) for r in rows] == [(str(chunk.high), micros, "d1", 1)]


def test_a_fresh_one_chunk_table_writes_what_the_general_path_does_and_reruns_after_a_failed_target_write(
    spark, catalogs, tmp_path, monkeypatch
):
    """One chunk into a new target and changelog takes the short way (`_load_fresh_chunk`: two
    selects over the chunk file): the same changelog and target rows as the general path (the
    stream, the window, the changelog read back); and a run that fails between its changelog's
    commit and its target's write reruns (the general path, from the changelog) to the source's rows."""
    landing = Landing(tmp_path, catalogs, "fresh_short")
    landing.mark(110, "LOW", "low-1")
    landing.chunk([(i, f"t{i}", "x") for i in (5, 3, 9, 1, 7)])
    landing.mark(120, "HIGH", "high-1")

    def config(namespace: str):
        merge = landing.config.merge.model_copy(update={"namespace": namespace})
        return landing.config.model_copy(update={"merge": merge})

    short = []
    load = merge_table.TableMerge._load_fresh_chunk
    with monkeypatch.context() as patch:
        patch.setattr(merge_table.TableMerge, "_load_fresh_chunk", lambda self, *a: short.append(1) or load(self, *a))
        report = run_merge(spark, landing.config, "src")["tables"][0]
    with monkeypatch.context() as patch:
        patch.setattr(merge_table.TableMerge, "_fresh_chunk", lambda self, *a: False)
        general = run_merge(spark, config("fresh_general"), "src")["tables"][0]
    assert short == [1]
    assert {k: report[k] for k in ("chunks", "chunk_rows", "log_events", "dropped_by_window", "added_records")} == {
        k: general[k] for k in ("chunks", "chunk_rows", "log_events", "dropped_by_window", "added_records")
    }

    def rows(name: str) -> list[tuple]:
        frame = spark.table(name).drop("_applied_at")
        return sorted(tuple(r) for r in frame.collect())

    for suffix in ("", "__changelog"):
        assert rows(f"logtide.fresh_short.db__docs{suffix}") == rows(f"logtide.fresh_general.db__docs{suffix}")
    assert iceberg_state(spark, "logtide.fresh_short.db__docs") == _reference(landing.zone, "docs")

    commits = []
    commit = merge_table.commit_with

    def failing(spark_, props, function):
        commits.append(1)
        if len(commits) == 2:  # the target's write
            raise RuntimeError("killed before the target's write")
        commit(spark_, props, function)

    with monkeypatch.context() as patch:
        patch.setattr(merge_table, "commit_with", failing)
        assert run_merge(spark, config("fresh_failed"), "src")["failed"]
    name = "logtide.fresh_failed.db__docs"
    assert iceberg.applied_frontier(spark, name) == 0 < iceberg.applied_frontier(spark, name + "__changelog")
    run_merge(spark, config("fresh_failed"), "src")
    assert iceberg_state(spark, name) == _reference(landing.zone, "docs")
    assert rows(name + "__changelog") == rows("logtide.fresh_general.db__docs__changelog")


def test_merges_write_no_checksum_files_and_a_table_written_with_them_reads_back_whole(
    spark, catalogs, tmp_path, monkeypatch
):
    """A merge writes no Hadoop `.crc` beside its files (session.py `skip_local_checksums`: each one
    cost a `chmod` process). A table merges wrote with them before keeps merging, and a reader that
    checks them (Hadoop's local file system, as any default Spark reads the warehouse) reads every
    file of it back, the version hint rewritten at every commit included: no `.crc` is left stale
    or without its file, and the target holds the source's rows."""
    zone = LandingZone(tmp_path / "landing", "src")
    config = _config(catalogs, tmp_path, "layout_crc")
    log = Log(zone)
    c, u, d = Op.CREATE, Op.UPDATE, Op.DELETE
    rows = [(i, f"v{i}") for i in range(20)]
    log.transaction(ITEMS, [(c, None, r) for r in rows])
    jvm = spark._jvm
    local = jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark._jsc.hadoopConfiguration())
    with monkeypatch.context() as patch:  # the first merge as merges wrote before: with `.crc` files
        patch.setattr(merge_app, "skip_local_checksums", lambda _: local.setWriteChecksum(True))
        run_merge(spark, config, "src")
    folder = Path(catalogs["hadoop"].warehouse) / "layout_crc"
    old = set(folder.rglob(".*.crc"))
    assert any(p.name == ".version-hint.text.crc" for p in old)

    log.transaction(ITEMS, [(u, r, (r[0], "changed")) for r in rows[:5]] + [(d, r, None) for r in rows[5:8]])
    run_merge(spark, config, "src")
    log.transaction(ITEMS, [(c, None, (100, "new")), (u, rows[0], (0, "again"))])
    run_merge(spark, config, "src")

    crcs = set(folder.rglob(".*.crc"))
    assert crcs <= old  # none new (the old version hint's went with it)
    assert all((p.parent / p.name[1:].removesuffix(".crc")).exists() for p in crcs)
    for path in folder.rglob("*"):
        if path.is_file() and path.suffix != ".crc":  # read through the checking file system
            stream = local.open(jvm.org.apache.hadoop.fs.Path(str(path)))
            try:
                jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
            finally:
                stream.close()
    target = iceberg_state(spark, "logtide.layout_crc.db__items")
    assert target == _reference(zone, "items")
    assert target[(0,)]["v"] == "again" and (5,) not in target and target[(100,)]["v"] == "new"
