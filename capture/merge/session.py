"""The merge's Spark session: Iceberg's extensions, the configured catalog and the jars."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from capture.config import MergeConfig
from capture.errors import MergeError

ICEBERG_RUNTIME = "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2"  # for spark.jars.packages


def _uri(location: str) -> str:
    return location if "://" in location or location.startswith("file:") else Path(location).resolve().as_uri()


def jar_paths(cfg: MergeConfig) -> list[str]:
    jars = sorted(str(p.resolve()) for p in Path(cfg.jars_dir).glob("*.jar"))
    if not any("iceberg-spark-runtime" in Path(j).name for j in jars):
        raise MergeError(
            f"no Iceberg runtime jar in {cfg.jars_dir}: run scripts/jars.sh (or scripts/setup.sh), or set "
            f"merge.jars_dir; with Maven access set spark_conf spark.jars.packages={ICEBERG_RUNTIME}"
        )
    return jars


def session_conf(cfg: MergeConfig, with_jars: bool = True) -> dict[str, str]:
    """Spark settings for the merge: Iceberg's extensions and the configured catalog."""
    prefix = f"spark.sql.catalog.{cfg.catalog_name}"
    conf = {
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.warehouse": _uri(cfg.warehouse),
        f"{prefix}.cache-enabled": "false",  # always see the latest commit (frontiers)
        "spark.sql.session.timeZone": "UTC",
        # The landing zone's files are pyarrow's: dates and timestamps in the proleptic Gregorian
        # calendar, as Spark 3 and Iceberg count them. Spark's default (EXCEPTION) refuses dates before
        # 1582-10-15 and timestamps before 1900 in files it did not write; LEGACY would shift them.
        "spark.sql.parquet.datetimeRebaseModeInRead": "CORRECTED",
        "spark.sql.parquet.int96RebaseModeInRead": "CORRECTED",
        "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
        "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED",
        "spark.sql.shuffle.partitions": "8",
        # the tables of a run merge at once (merge.parallel_tables), each in a pool of its own
        "spark.scheduler.mode": "FAIR",
        # the landing zone's files are named one by one: list them on the driver, not in a Spark job
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    }
    if cfg.catalog == "hadoop":
        conf[f"{prefix}.type"] = "hadoop"
    else:
        conf[f"{prefix}.catalog-impl"] = "org.apache.iceberg.jdbc.JdbcCatalog"
        conf[f"{prefix}.uri"] = cfg.jdbc_uri or ""
        if cfg.jdbc_user:
            conf[f"{prefix}.jdbc.user"] = cfg.jdbc_user
        if cfg.jdbc_password.get_secret_value():
            conf[f"{prefix}.jdbc.password"] = cfg.jdbc_password.get_secret_value()
    if with_jars and "spark.jars.packages" not in cfg.spark_conf:
        conf["spark.jars"] = ",".join(jar_paths(cfg))
    conf.update(cfg.spark_conf)
    return conf


def build_session(conf: dict[str, str], master: str | None = None, app_name: str = "logtide-merge") -> Any:
    """A Spark session with `conf`. A process has one SparkContext: where one runs already (a test
    process, a notebook), the session is a new one on it, with a SQL conf and catalogs of its own
    (SparkSession.builder.getOrCreate would hand back the first session, with the first catalogs:
    another warehouse). What only a context sets (jars, extensions) must then be what it has."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    context = SparkContext._active_spark_context
    if context is None:
        builder = SparkSession.builder.appName(app_name)
        if master:
            builder = builder.master(master)
        for key, value in conf.items():
            builder = builder.config(key, value)
        return builder.getOrCreate()
    session = SparkSession(context).newSession()
    session._logtide_shared_context = context  # for `stop_session`
    running = context.getConf()
    for key, value in conf.items():
        if running.get(key) == value:
            continue
        try:
            session.conf.set(key, value)
        except Exception as exc:  # a static or core setting: the running context's holds
            raise MergeError(
                f"a Spark session runs in this process with {key}={running.get(key)!r}, this merge needs "
                f"{value!r}, which only a new process can set: {str(exc).splitlines()[0]}"
            ) from None
    return session


def stop_session(session: Any) -> None:
    """Stop what `build_session` started: the SparkContext when no other session shares it, else
    only this session's cached tables (the context belongs to whoever started it)."""
    if session.sparkContext is getattr(session, "_logtide_shared_context", None):
        session.catalog.clearCache()
        return
    session.stop()


_jvm_functions: dict[str, tuple[Any, Any]] = {}  # function name -> (the JVM view, its static method)


def cache_jvm_functions() -> None:
    """Make pyspark find the JVM side of `pyspark.sql.functions` (`sf.col`, `sf.lit`, ...) once
    per name instead of on every call. pyspark 3.5 asks the JVM twice per call: which class
    `functions` is (py4j tries the bare name on the whole class path first, then each of
    pyspark's imported packages: a dozen failed class lookups in every jar), then which member
    the name is; a small table's merge makes over a hundred such calls (and a column named by a
    string, `frame.select("a")`, is a `col` too). Idempotent; a pyspark without these private
    functions is left alone."""
    from pyspark.sql import column, functions

    original = getattr(functions, "_get_jvm_function", None)
    by_name = getattr(column, "_create_column_from_name", None)
    if original is None or by_name is None or getattr(functions, "_logtide_cached", False):
        return

    def cached(name: str, sc: Any) -> Any:
        jvm = sc._jvm
        hit = _jvm_functions.get(name)
        if hit is not None and hit[0] is jvm:  # a new gateway (another JVM) looks its functions up again
            return hit[1]
        member = original(name, sc)
        _jvm_functions[name] = (jvm, member)
        return member

    def from_name(name: str) -> Any:
        return cached("col", column.get_active_spark_context())(name)

    functions._get_jvm_function = cached
    column._create_column_from_name = from_name
    functions._logtide_cached = True  # type: ignore[attr-defined]


def cache_jvm_lookups() -> None:
    """Make py4j resolve a name on the JVM (`jvm.PythonUtils`, `jvm.org.apache.iceberg.X`, a static
    method `X.f`) once per process instead of on every use. Each level of such a path is a round
    trip to the JVM, and each package level or bare name is a class lookup that fails first (py4j
    tries the name, then every package pyspark imported, as a class in every jar on the class
    path): pyspark itself asks for `PythonUtils` on every `select` and `join`, and these failed
    lookups were about a tenth of a warm table's driver time (flight recorder). Packages, classes
    and static methods are kept on the object that found them (a field's value is not: it may
    change). Idempotent; a py4j without these classes is left alone."""
    from py4j import java_gateway as gw

    view, package, klass = (getattr(gw, n, None) for n in ("JVMView", "JavaPackage", "JavaClass"))
    member = getattr(gw, "JavaMember", None)
    if None in (view, package, klass, member) or getattr(view, "_logtide_cached", False):
        return

    def keeping(original: Any, kinds: tuple[type, ...]) -> Any:
        def lookup(self: Any, name: str) -> Any:
            found = original(self, name)
            if isinstance(found, kinds) and not name.startswith("_"):
                self.__dict__[name] = found  # found by plain attribute lookup from now on
            return found

        return lookup

    view.__getattr__ = keeping(view.__getattr__, (package, klass))
    package.__getattr__ = keeping(package.__getattr__, (package, klass))
    klass.__getattr__ = keeping(klass.__getattr__, (klass, member))
    view._logtide_cached = True


def skip_local_checksums(spark: Any) -> None:
    """Write no Hadoop `.crc` file beside the files the merge writes to a `file:` warehouse.
    Hadoop's local file system writes one beside every file and, without its native library
    (pyspark ships none), sets the permissions of the file and of its `.crc` by starting a `chmod`
    process each: 34 processes per new table of a run (data, manifests, manifest lists, metadata
    and version hints of its target and changelog, and their folders), about a sixth of the CPU
    such a table costs. Without the `.crc` it is 20 (one per file and folder; table.py creates a
    new table's folders itself, 14). Files written before keep their `.crc` and are still checked
    when read; a deleted or renamed file's `.crc` goes with it (the version hint's, rewritten at
    every commit, too), so none goes stale. The setting belongs to the JVM's cached local file
    system, the one Iceberg and a local master's tasks use. Hadoop's raw file system would write
    none either, but Iceberg's scans ask a file system for its scheme, which the raw one lacks."""
    jvm = spark._jvm  # `get`, not `getLocal`: that one casts to LocalFileSystem, which fs.file.impl may not be
    local = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), spark._jsc.hadoopConfiguration())
    local.setWriteChecksum(False)
