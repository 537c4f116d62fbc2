"""Airflow 3 on SQLite for the DAG tests: a migrated AIRFLOW_HOME in a temporary folder.

Airflow reads its configuration when it is first imported, so tests/conftest.py sets the AIRFLOW_*
variables of this pytest process (a home of its own per xdist worker) before any test runs; the
`airflow_home` fixture migrates that home's database and sets LOGTIDE_CONFIG, which the DAG files
read at parse time. When the package's tests end it puts back what Airflow changes in this
process and the other tests would notice: the environment and the root logger's handlers
(Airflow's writes to a stream pytest closes); each test gets back the SIGTERM/SIGINT handlers
that `dag.test()` replaces. Under xdist the tests elsewhere that import Airflow run after these, on
the same worker (tests/conftest.py, AIRFLOW_GROUP).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from capture.events import Change, Lsn, Op
from capture.merge_submit import class_archive, merge_jars
from tests.airflow.live import AIRFLOW
from tests.conftest import AIRFLOW_HOME, ROOT, airflow_env
from tests.spark.landing import DOCS, Landing

PLUGINS = ROOT / "plugins"
DAGS = ROOT / "dags"

if str(PLUGINS) not in sys.path:  # as Airflow does for its plugins folder
    sys.path.insert(0, str(PLUGINS))

# Sources the DAG files see at parse time: "src" is the name tests/conftest.py's make_capture
# gives its source; "nightly" has a backfill schedule (it is never dumped).
PARSE_CONFIG = {
    "landing": {"path": "unused-at-parse-time"},
    "sources": {
        "src": {"kind": "mariadb", "user": "root", "password": "${TEST_DB_PASSWORD}", "server_id": 9001},
        "nightly": {
            "kind": "mariadb",
            "user": "root",
            "server_id": 9002,
            "dump": {"backfill_schedule": "0 3 * * *", "backfill_tables": ["shop.orders"], "pool_slots": 3},
        },
    },
}


@dataclass
class AirflowHome:
    home: Path
    env: dict[str, str]
    parse_config: Path

    @property
    def database(self) -> Path:
        return self.home / "airflow.db"


@pytest.fixture(scope="package")
def airflow_home() -> Iterator[AirflowHome]:
    home = AIRFLOW_HOME  # this process's (tests/conftest.py)
    if "airflow" in sys.modules and Path(sys.modules["airflow"].configuration.AIRFLOW_HOME) != home:
        raise RuntimeError(f"airflow was imported with another AIRFLOW_HOME than this process's {home}")
    parse_config = home / "logtide-parse.yaml"
    parse_config.write_text(yaml.safe_dump(PARSE_CONFIG))
    env = {**airflow_env(home), "LOGTIDE_CONFIG": str(parse_config)}
    saved = {k: os.environ.get(k) for k in env}
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    os.environ.update(env)
    try:
        subprocess.run([str(AIRFLOW), "db", "migrate"], check=True, capture_output=True, env=os.environ, timeout=300)
        yield AirflowHome(home, env, parse_config)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        # pytest adds and removes its own handlers around each test phase; drop only Airflow's
        root.handlers[:] = [h for h in root.handlers if h in handlers or type(h).__module__.startswith("_pytest")]
        root.setLevel(level)


@pytest.fixture(autouse=True)
def _signal_handlers() -> Iterator[None]:
    """dag.test() runs tasks in this process, and a task installs its own SIGTERM handler."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.fixture(scope="package")
def airflow_ready(airflow_home: AirflowHome) -> AirflowHome:
    """Migrated, with the pools of the parse-time sources; Airflow may be imported from here on."""
    from airflow.models.pool import Pool

    for name, source in PARSE_CONFIG["sources"].items():
        slots = source.get("dump", {}).get("pool_slots", 2)
        Pool.create_or_update_pool(f"logtide_{name}", slots, f"Logtide dumps of {name}", include_deferred=False)
    return airflow_home


@pytest.fixture(scope="session")
def jvm_class_archive(catalogs: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The merge JVM's class archive (README, Merge, "Start-up") in this checkout's var/jvm before
    the first Airflow merge: a task maps the archive `logtide merge` wrote and writes none, so in a
    fresh clone every spark-submit of tests/airflow (the first tests to run) started its JVM cold.
    Written as on a host, by a `logtide merge` (of a one-row table); nothing to do when it is there."""
    landing = Landing(tmp_path_factory.mktemp("class-archive"), catalogs, "class_archive")
    folder = ROOT / landing.config.merge.class_archive_dir  # relative: the CWD of the suite's merges
    jars = merge_jars(landing.config)
    if (archive := class_archive(folder, jars, write=False)) is not None:
        return archive.path
    landing.commit(100, DOCS, Change(Lsn(100), Op.CREATE, None, (1, "a", "x")))
    cmd = [sys.executable, "-m", "capture.cli", "--config", str(landing.config_file()), "merge", "--source", "src"]
    done = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:]
    archive = class_archive(folder, jars, write=False)
    assert archive is not None, done.stdout[-3000:]
    return archive.path
