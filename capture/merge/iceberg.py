"""Iceberg through Spark: the targets' and changelogs' bookkeeping columns and layout, creating a
table in one metadata write, schema evolution, commits that carry the frontier in their snapshot
summary, and reading that frontier back (the contract itself: capture/merge/target.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from capture.config import LogtideConfig
from capture.errors import MergeError
from capture.log import get_logger
from capture.merge.spark_types import quote
from capture.merge.target import FRONTIER, Target, frontier_value
from capture.merge.target import recorded as target_recorded

log = get_logger("logtide.merge")


# bookkeeping columns of the targets and the changelog (source columns may not use these names)
TARGET_META = (("_lsn", "decimal(38,0)"), ("_applied_at", "timestamp"))


CHANGELOG_META = (
    ("_lsn", "decimal(38,0)"),  # the event's LSN; chunk rows and repairs: their HIGH watermark's
    ("_order", "bigint"),  # 0 log event (-1: the delete half of a key change), 1 + position: chunk row
    ("_op", "string"),  # c u d from the log, r a chunk row, d a repair delete
    ("_source", "string"),  # log | chunk | repair | truncate
    ("_txid", "string"),
    ("_commit_ts", "timestamp"),  # the transaction's; chunk rows and repairs: their HIGH watermark's
    ("_dump_id", "string"),
    ("_chunk", "int"),
    ("_missing", "array<string>"),  # columns the event does not carry (PostgreSQL TOAST): keep the stored value
    ("_applied_at", "timestamp"),
)


RESERVED = {name for name, _ in TARGET_META + CHANGELOG_META}


# Target layout: rows range-distributed by key before a write (`WRITE ORDERED BY`), files of at
# most this size, so that each file holds a narrow key range and a MERGE can skip the files its
# keys miss (`key_filter`). Tables created before carry no `logtide.layout`: `ensure_table` adds it.
LAYOUT = "2"


TARGET_FILE_SIZE = 16 * 1024 * 1024


class _Call:
    """A py4j callback (java.util.concurrent.Callable) running a Python function on the JVM's behalf."""

    def __init__(self, function: Callable[[], None]) -> None:
        self.function = function
        self.error: BaseException | None = None

    def call(self) -> None:
        try:
            self.function()
        except BaseException as exc:
            self.error = exc
            raise
        return None

    class Java:
        implements = ["java.util.concurrent.Callable"]  # noqa: RUF012 - py4j's protocol


def commit_with(spark: Any, properties: dict[str, str], function: Callable[[], None]) -> None:
    """Run `function` (one Iceberg write) so that its commit's snapshot summary carries `properties`."""
    from py4j.protocol import Py4JJavaError

    jvm = spark._jvm
    props = jvm.java.util.HashMap()
    for key, value in properties.items():
        props.put(key, value)
    callback = _Call(function)
    try:
        jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(
            props, callback, jvm.java.lang.RuntimeException().getClass()
        )
    except Py4JJavaError:
        if callback.error is not None:
            raise callback.error from None
        raise


def spark_file_path(spark: Any, path: str) -> str:
    """How Spark spells a local file in `_metadata.file_path`, without its scheme (`_chunk_rows`)."""
    jvm = spark._jvm
    return str(jvm.org.apache.spark.paths.SparkPath.fromPath(jvm.org.apache.hadoop.fs.Path(path)).urlEncoded())


def iceberg_table(spark: Any, name: str) -> Any:
    return spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, name)


def recorded(spark: Any, name: str, key: str) -> str | None:
    """`key` as the target contract reads it (capture/merge/target.py `recorded`), from Iceberg's
    Java table: the current ancestry's snapshot summaries, then the table property."""
    table = iceberg_table(spark, name)
    table.refresh()

    def ancestry() -> Iterator[Any]:
        snapshot = table.currentSnapshot()
        while snapshot is not None:
            yield snapshot.summary()
            parent = snapshot.parentId()
            snapshot = table.snapshot(parent) if parent is not None else None

    return target_recorded(ancestry(), table.properties() if table.currentSnapshot() is not None else None, key)


def applied_frontier(spark: Any, name: str) -> int:
    """`logtide.frontier` the target or changelog holds (0 for a table no merge wrote)."""
    return frontier_value(recorded(spark, name, FRONTIER))


def is_empty(spark: Any, name: str) -> bool:
    snapshot = iceberg_table(spark, name).currentSnapshot()
    return snapshot is None or snapshot.summary().get("total-records") == "0"


def sortable_prefix(keys: list[str], types: dict[str, Any]) -> list[str]:
    """The key columns a target's write order can name: those before the first one Iceberg cannot
    sort by (a list: PostgreSQL array keys; Iceberg sorts by primitive fields only). Empty: the
    target is written unordered and its MERGE reads it whole (`key_filter` has no literal either)."""
    from pyspark.sql import types as T

    prefix = []
    for key in keys:
        if isinstance(types[key], (T.ArrayType, T.MapType, T.StructType)):
            break
        prefix.append(key)
    return prefix


def table_exists(spark: Any, name: str) -> bool:
    return bool(spark.catalog.tableExists(name))


def local_table_folder(config: LogtideConfig, target: Target) -> Path | None:
    """Where a Hadoop catalog keeps the table in a local warehouse (`<warehouse>/<namespace>/<name>`);
    None for a JDBC catalog (it chooses) or a warehouse on another file system."""
    cfg = config.merge
    if cfg.catalog != "hadoop":
        return None
    if cfg.warehouse.startswith("file:"):
        root = Path(unquote(urlparse(cfg.warehouse).path))
    elif "://" in cfg.warehouse:
        return None
    else:
        root = Path(cfg.warehouse)
    return root.resolve() / target.namespace / target.name


def _columns_ddl(columns: Iterable[tuple[str, str]]) -> str:
    return ", ".join(f"{quote(c)} {t}" for c, t in columns)


def _create_table(spark: Any, target: Target, ddl: str, props: dict[str, str], clustered_by: list[str] | None) -> bool:
    """Create the table in ONE metadata write, through Iceberg's catalog: its schema, properties
    and (`clustered_by`) the write order with range distribution, what `CREATE TABLE ...
    TBLPROPERTIES` and `ALTER TABLE ... WRITE ORDERED BY` write in two (Spark's CREATE TABLE has no
    write order). False when the table exists already."""
    from py4j.protocol import Py4JJavaError

    jvm = spark._jvm
    iceberg = jvm.org.apache.iceberg
    catalog = spark._jsparkSession.sessionState().catalogManager().catalog(target.catalog).icebergCatalog()
    schema = iceberg.spark.SparkSchemaUtil.convert(jvm.org.apache.spark.sql.types.StructType.fromDDL(ddl))
    properties = jvm.java.util.HashMap()
    for key, value in props.items():
        properties.put(key, value)
    levels = spark.sparkContext._gateway.new_array(jvm.java.lang.String, 1)  # Namespace.of(String...)
    levels[0] = target.namespace
    builder = catalog.buildTable(
        iceberg.catalog.TableIdentifier.of(iceberg.catalog.Namespace.of(levels), target.name), schema
    )
    if clustered_by:
        order = iceberg.SortOrder.builderFor(schema)
        for column in clustered_by:
            order = order.asc(column)  # as WRITE ORDERED BY: ascending, nulls first
        builder = builder.withSortOrder(order.build())
        properties.put("write.distribution-mode", "range")
    try:
        builder.withProperties(properties).create()
    except Py4JJavaError as exc:
        if "AlreadyExistsException" in str(exc.java_exception.getClass().getName()):
            return False
        raise
    return True


def ensure_table(
    spark: Any,
    target: Target,
    columns: list[tuple[str, Any]],
    meta: tuple[tuple[str, str], ...],
    properties: dict[str, str],
    clustered_by: list[str] | None = None,
    exists: bool | None = None,
) -> bool:
    """Create the table, or add the columns it lacks (Iceberg schema evolution); True when this
    call created it. `clustered_by` (targets: the key): rows range-distributed by it before every
    write and files of at most TARGET_FILE_SIZE, so that files hold narrow key ranges a MERGE can
    skip; a table created before without that layout gets it for its future writes. `exists`:
    whether the table exists, when the caller knows (None: ask the catalog). Without it
    (changelogs) rows are written as computed: every run appends its own LSN range, and readers
    order by `lsn_column`. `properties` of a new table may include `logtide.frontier`: it counts only
    once a snapshot exists (target.py `recorded`), and every snapshot the merge writes carries its
    own frontier."""
    name = target.spark
    clustered = clustered_by is not None
    layout = {"write.target-file-size-bytes": str(TARGET_FILE_SIZE), "logtide.layout": LAYOUT} if clustered else {}
    ordered = f"WRITE ORDERED BY {', '.join(quote(c) for c in clustered_by or ())}"
    if not (table_exists(spark, name) if exists is None else exists):
        props = {
            "format-version": "2",
            "write.delete.mode": "merge-on-read",
            "write.update.mode": "merge-on-read",
            "write.merge.mode": "merge-on-read",
            "write.metadata.delete-after-commit.enabled": "true",
            "write.metadata.previous-versions-max": "50",
            **layout,
            **properties,
        }
        ddl = _columns_ddl([(c, t.simpleString()) for c, t in columns] + list(meta))
        if _create_table(spark, target, ddl, props, clustered_by):
            log.info("merge.table_created", table=name, columns=len(columns))
            return True
    if clustered_by and iceberg_table(spark, name).properties().get("logtide.layout") != LAYOUT:
        # metadata only: files written from now on are range-clustered; older ones keep their key
        # spread until rewritten (README, Merge: rewrite_data_files with strategy => 'sort')
        spark.sql(f"ALTER TABLE {name} {ordered}")
        tblprops = ", ".join(f"'{k}' = '{v}'" for k, v in layout.items())
        spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ({tblprops})")
        log.info("merge.layout_upgraded", table=name, layout=LAYOUT)
    existing = {f.name.lower(): f.dataType for f in spark.table(name).schema.fields}
    for c, t in columns:
        have = existing.get(c.lower())
        if have is not None and have != t:
            _evolve_type(spark, name, c, have, t)
    missing = [(c, t.simpleString()) for c, t in columns if c.lower() not in existing]
    missing += [(c, t) for c, t in meta if c.lower() not in existing]
    if missing:
        spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({_columns_ddl(missing)})")
        log.info("merge.columns_added", table=name, columns=",".join(c for c, _ in missing))
    return False


def _evolve_type(spark: Any, name: str, column: str, have: Any, want: Any) -> None:
    from pyspark.sql import types as T

    widen = (isinstance(have, T.IntegerType) and isinstance(want, T.LongType)) or (
        isinstance(have, T.FloatType) and isinstance(want, T.DoubleType)
    )
    if isinstance(have, T.DecimalType) and isinstance(want, T.DecimalType):
        widen = want.scale == have.scale and want.precision > have.precision
    narrower = (isinstance(have, T.LongType) and isinstance(want, T.IntegerType)) or (
        isinstance(have, T.DoubleType) and isinstance(want, T.FloatType)
    )
    if isinstance(have, T.DecimalType) and isinstance(want, T.DecimalType):
        narrower = want.scale == have.scale and want.precision < have.precision
    if widen:
        spark.sql(f"ALTER TABLE {name} ALTER COLUMN {quote(column)} TYPE {want.simpleString()}")
        log.info("merge.column_widened", table=name, column=column, type=want.simpleString())
    elif not narrower:
        raise MergeError(
            f"{name}: column {column!r} is {have.simpleString()} in the target but {want.simpleString()} in the "
            "landing zone; Iceberg cannot make that change: drop the target tables and run a full dump"
        )
