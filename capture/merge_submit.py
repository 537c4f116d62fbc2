"""How the Spark merge is submitted: the one place that turns the config into spark-submit's
application, arguments, jars (or packages), Spark settings and environment.

`logtide merge` (capture/cli.py) runs the command it builds; the Airflow DAGs hand the same
parts to the Spark provider's SparkSubmitOperator (plugins/logtide_airflow/merge.py), so a
merge started from either place runs the same application with the same jars and settings.
Nothing here imports Spark or Airflow.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shutil
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from capture.config import LogtideConfig
from capture.errors import ConfigError
from capture.log import get_logger

log = get_logger(__name__)

# the merge package's own entry file: part of the package, so an installed wheel has it as a checkout does
APPLICATION = Path(__file__).resolve().parent / "merge" / "__main__.py"
PACKAGES_KEY = "spark.jars.packages"
# A merge's driver JVM lives for seconds to minutes, most of them warming up: C1 compiles alone,
# with no C2 threads competing for the cores (`logtide merge` of a 10,000-row table: 16.5 and
# 19.7 s instead of 39.6 and 40.7 s, back to back at load 15 on 2 cores). merge.spark_conf's
# spark.driver.extraJavaOptions come after these, so they win. C1 alone makes JDK 17 reserve 48 MB of
# code cache (240 MB otherwise): a long merge of many tables filled it and its driver died
# (`Out of space in CodeCache for method handle intrinsic`), so the usual size is asked for.
LOCAL_DRIVER_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:ReservedCodeCacheSize=240m")
STALE_ARCHIVE_S = 6 * 3600  # an archive still being written after this long belongs to a killed merge


@dataclass(frozen=True)
class MergeSubmit:
    """What spark-submit needs to run the merge (capture/merge/__main__.py) for one source."""

    application: str
    application_args: list[str]
    master: str  # merge.spark_master unless overridden; Airflow's spark_default connection wins there
    jars: list[str] = field(default_factory=list)  # empty when `packages` is set
    packages: str | None = None
    conf: dict[str, str] = field(default_factory=dict)  # merge.spark_conf, passed at launch too (driver settings)
    env: dict[str, str] = field(default_factory=dict)  # added to the environment of spark-submit
    archive: ClassArchive | None = None  # the driver JVM's class archive, when used or written by this run

    def finish(self, returncode: int) -> None:
        """After spark-submit exited: keep the class archive this run wrote (if it succeeded)."""
        if self.archive is not None:
            self.archive.finish(returncode == 0)

    def command(self, binary: str) -> list[str]:
        cmd = [binary, "--master", self.master]
        if self.packages:
            cmd += ["--packages", self.packages]
        if self.jars:
            cmd += ["--jars", ",".join(self.jars)]
        for key, value in self.conf.items():
            cmd += ["--conf", f"{key}={value}"]
        return [*cmd, self.application, *self.application_args]


@dataclass(frozen=True)
class ClassArchive:
    """The driver JVM's class-data-sharing archive (JDK AppCDS): the classes of Spark, Iceberg and
    their dependencies mapped from one file at start instead of found, read and verified in jars
    (about 4 of the 11 s a `logtide merge` of nothing took on 2 cores). The first merge on a host
    writes it at exit (`-XX:ArchiveClassesAtExit`, about 150 MB, once); every later one maps it.
    Its name is a digest of the JVM and the jars, so another JDK or jar writes a new one; a JVM
    that cannot use an archive ignores it. Local masters only (the driver is this host's JVM)."""

    path: Path
    writing: Path | None  # where this run writes it (renamed to `path` when the merge succeeds)

    def java_options(self) -> str:
        if self.writing is not None:
            # the JVM writes it at exit and lists every class it leaves out ("[warning][cds] Skipping ...:
            # Signed JAR", hundreds of lines) after the merge's own last line: not an operator's concern
            return f"-XX:ArchiveClassesAtExit={self.writing} -Xlog:cds=off,cds+dynamic=off"
        return f"-XX:SharedArchiveFile={self.path}"

    def finish(self, succeeded: bool) -> None:
        if self.writing is None or not self.writing.exists():
            return
        if succeeded:
            os.replace(self.writing, self.path)
            log.info("merge.class_archive_written", path=str(self.path), bytes=self.path.stat().st_size)
        else:
            self.writing.unlink()


def class_archive(folder: Path, jars: Sequence[str], write: bool) -> ClassArchive | None:
    """The archive for this JVM and these jars in `folder`: to use when it exists, else to write
    when `write` (the caller then calls `finish`), else none."""
    home = os.environ.get("JAVA_HOME")
    java = (home and shutil.which("java", path=os.path.join(home, "bin"))) or shutil.which("java")
    spec = importlib.util.find_spec("pyspark")
    if java is None or spec is None or spec.origin is None:
        return None
    spark_jars = sorted((Path(spec.origin).parent / "jars").glob("*.jar"))
    digest = hashlib.sha256()
    for path in [Path(os.path.realpath(java)), *spark_jars, *map(Path, jars)]:
        stat = path.stat()
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    path = folder.resolve() / f"merge-{digest.hexdigest()[:16]}.jsa"
    if path.exists():
        return ClassArchive(path, None)
    if not write:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("merge-*.jsa.*.tmp"):  # a killed merge's; a running one's is minutes old at most
        if time.time() - stale.stat().st_mtime > STALE_ARCHIVE_S:
            stale.unlink(missing_ok=True)
    return ClassArchive(path, path.with_name(f"{path.name}.{uuid.uuid4().hex[:8]}.tmp"))


def merge_jars(config: LogtideConfig) -> list[str]:
    """The jars of merge.jars_dir, as absolute paths (spark-submit may run elsewhere than the CWD)."""
    jars_dir = Path(config.merge.jars_dir)
    jars = sorted(str(p.resolve()) for p in jars_dir.glob("*.jar"))
    if not jars:
        raise ConfigError(
            f"no jars in {jars_dir.resolve()} (merge.jars_dir): run scripts/jars.sh, or with Maven access set "
            f"merge.spark_conf.{PACKAGES_KEY}"
        )
    return jars


def build_merge_submit(
    config: LogtideConfig,
    source: str,
    tables: Sequence[str] = (),
    *,
    config_path: str | os.PathLike[str] | None = None,
    master: str | None = None,
    write_archive: bool = False,
) -> MergeSubmit:
    """spark-submit's parts for merging `tables` of `source` (none: every table that landed).

    `config_path` is passed on to the application; without it the application reads
    $LOGTIDE_CONFIG, which spark-submit inherits. With a local master and merge.class_archive_dir
    set, the driver JVM maps the class archive (`ClassArchive`), or writes it when
    `write_archive` and it is missing (call `MergeSubmit.finish` after spark-submit exits).
    """
    config.source(source)  # an unknown source is refused here, with the known ones
    merge = config.merge
    args: list[str] = ["--source", source]
    if config_path is not None:
        args += ["--config", str(Path(config_path).resolve())]
    for table in tables:
        if table.count(".") != 1:
            raise ConfigError(f"table {table!r} must be given as database.table")
        args += ["--table", table]
    packages = merge.spark_conf.get(PACKAGES_KEY)
    conf = {k: v for k, v in merge.spark_conf.items() if k != PACKAGES_KEY}
    master = master or merge.spark_master
    jars = [] if packages else merge_jars(config)
    archive_wanted = bool(jars) and merge.class_archive_dir is not None
    archive = None
    if master.startswith("local"):  # the driver runs the merge's tasks: a JVM that starts fast pays
        archive = class_archive(Path(merge.class_archive_dir), jars, write_archive) if archive_wanted else None
        if archive is not None:  # the jars on the driver's own class path: --jars' loader is not archived
            conf["spark.driver.extraClassPath"] = os.pathsep.join(
                [*jars, *filter(None, [conf.get("spark.driver.extraClassPath")])]
            )
        options = [*LOCAL_DRIVER_OPTIONS, *([archive.java_options()] if archive else [])]
        options.append(conf.get("spark.driver.extraJavaOptions", ""))
        conf["spark.driver.extraJavaOptions"] = " ".join(options).strip()
    return MergeSubmit(
        application=str(APPLICATION),
        application_args=args,
        master=master,
        jars=jars,
        packages=packages,
        conf=conf,
        env={"PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)},
        archive=archive,
    )


def spark_submit_binary() -> str:
    """spark-submit beside this Python (pyspark in the same venv), else the one on PATH."""
    beside = Path(sys.executable).with_name("spark-submit")
    found = str(beside) if beside.exists() else shutil.which("spark-submit")
    if found is None:
        raise ConfigError("spark-submit not found: install pyspark 3.5 (pip install -e '.[dev]') or put it on PATH")
    return found


@contextmanager
def merge_lock(config: LogtideConfig, source: str) -> Iterator[None]:
    """One merge of a source at a time, from the CLI and Airflow alike: two at once would both append
    the same events to the changelog tables. A lock file in the source's landing zone (which every
    host that merges sees); a second merge waits for the first, then finds less to do."""
    path = Path(config.landing.path) / source / "merge.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            log.info("merge.waiting", source=source, lock=str(path), holder=handle.read().strip() or "unknown")
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        yield
