"""How the Spark merge is submitted: the one place that turns the config into spark-submit's
application, arguments, jars (or packages), Spark settings and environment.

`logtide merge` (capture/cli.py) runs the command it builds; the Airflow DAGs hand the same
parts to the Spark provider's SparkSubmitOperator (plugins/logtide_airflow/merge.py), so a
merge started from either place runs the same application with the same jars and settings.
Nothing here imports Spark or Airflow.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
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

    def command(self, binary: str) -> list[str]:
        cmd = [binary, "--master", self.master]
        if self.packages:
            cmd += ["--packages", self.packages]
        if self.jars:
            cmd += ["--jars", ",".join(self.jars)]
        for key, value in self.conf.items():
            cmd += ["--conf", f"{key}={value}"]
        return [*cmd, self.application, *self.application_args]


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
) -> MergeSubmit:
    """spark-submit's parts for merging `tables` of `source` (none: every table that landed).

    `config_path` is passed on to the application; without it the application reads
    $LOGTIDE_CONFIG, which spark-submit inherits.
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
    return MergeSubmit(
        application=str(APPLICATION),
        application_args=args,
        master=master or merge.spark_master,
        jars=[] if packages else merge_jars(config),
        packages=packages,
        conf=conf,
        env={"PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)},
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
