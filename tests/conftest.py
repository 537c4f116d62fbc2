"""Fixtures: a private MariaDB per test session, and a capture service run as a real process."""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from capture.config import LogtideConfig, MergeConfig, load_config
from capture.landing import LandingZone
from tests.servers import MariaDB, NatsServer, PostgreSQL, ZooKeeper, free_port, wait_for

ROOT = Path(__file__).resolve().parent.parent
_server_ids = itertools.count(100)

# -- Airflow's home: one per pytest process -----------------------------------------------------------------------
# Airflow reads AIRFLOW_HOME, its database and its DAG and plugin folders once, when first imported, and two tests
# outside tests/airflow import it in this process (test_readonly_dump.py, test_deployment.py). Run alone, tests/airflow
# comes first and its `airflow_home` fixture set them in time; under pytest-xdist (scripts/test.sh) a worker may run
# another file first. So every pytest process (each xdist worker, and a run without xdist) sets them here, before
# any test, to a folder of its own (two workers never share one); `airflow_home` migrates its database.


def airflow_env(home: Path) -> dict[str, str]:
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
    }


AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="logtide-airflow-"))
os.environ.update(airflow_env(AIRFLOW_HOME))  # an xdist worker inherits its controller's: replaced


def pytest_unconfigure(config: pytest.Config) -> None:
    if not os.environ.get("KEEP_SERVERS"):
        shutil.rmtree(AIRFLOW_HOME, ignore_errors=True)


# -- pytest-xdist: scripts/test.sh runs the suite on 2 workers (`-n 2 --dist loadgroup`, README Tests) ----------------
# Each test file runs whole on one worker, as with `--dist loadfile` (a file's tests share module fixtures and
# servers), and all of tests/airflow (DAG tests, the live Airflow) with the tests elsewhere that import Airflow in
# this process, on one worker, in the order of a run without xdist: one Airflow at a time, and those two run after
# `airflow_home` put back the root logger Airflow's import configures. pytest 9 ignores the `xdist_group` marks
# xdist 3.8 reads (it renames `item._nodeid`, which pytest 9 no longer has), so the groups are told here by node id.
AIRFLOW_GROUP = (
    "tests/airflow/",
    "tests/integration/test_readonly_dump.py::test_the_airflow_merge_waits_for_read_only_highs",
    "tests/unit/test_deployment.py::test_airflow_pools_come_from_the_config",
)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class FileScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(AIRFLOW_GROUP):
                return "airflow"
            if nodeid.rfind("@") > nodeid.rfind("]"):  # an xdist_group mark, should xdist's renaming work again
                return super()._split_scope(nodeid)
            return nodeid.split("::", 1)[0]

    # in collection order, not largest group first: tests/airflow (the longest) and the convergence cases start
    # first, the short unit tests come last and even out the two workers' ends
    config.option.loadscopereorder = False
    return FileScheduling(config, log)


def _for_the_session(server: MariaDB | ZooKeeper | PostgreSQL | NatsServer) -> Iterator:
    """Start a private server for the whole run; afterwards stop it, and delete its files
    unless KEEP_SERVERS is set (to look at them)."""
    server.start()
    yield server
    if os.environ.get("KEEP_SERVERS"):
        server.stop()
    else:
        server.destroy()


@pytest.fixture(scope="session")
def mariadb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDB]:
    yield from _for_the_session(MariaDB(tmp_path_factory.mktemp("mariadb")))


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeper]:
    """A private ZooKeeper for the session (tests that restart it leave it running)."""
    yield from _for_the_session(ZooKeeper(tmp_path_factory.mktemp("zookeeper")))


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A private NATS server with JetStream for the session (`nats-server -js`)."""
    yield from _for_the_session(NatsServer(tmp_path_factory.mktemp("nats")))


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgreSQL]:
    """A private PostgreSQL 15 for the session, run as the user `postgres` (never the system one)."""
    # not under pytest's temp folder: any pytest run on the machine resets it to 0700, which
    # locks out the server's own user
    yield from _for_the_session(PostgreSQL(Path(tempfile.mkdtemp(prefix="logtide-pg-"))))


@pytest.fixture
def database(mariadb: MariaDB, request: pytest.FixtureRequest) -> str:
    """A fresh database named after the test."""
    name = "t_" + request.node.name.replace("[", "_").replace("]", "").replace("-", "_")[:50].lower()
    mariadb.execute(f"DROP DATABASE IF EXISTS `{name}`", f"CREATE DATABASE `{name}`")
    return name


@pytest.fixture
def drop_database_afterwards(mariadb: MariaDB, database: str) -> Iterator[None]:
    """For tests whose leftovers would disturb later ones on the session's shared MariaDB
    (a cascading foreign key, say, refuses later captures of `*.*`)."""
    yield
    mariadb.execute(f"DROP DATABASE IF EXISTS `{database}`")


class CaptureProcess:
    """`logtide capture` as a child process, the way an operator runs it."""

    def __init__(self, config_path: Path, source: str, workdir: Path) -> None:
        self.config_path = config_path
        self.source = source
        self.workdir = workdir
        self.log_path = workdir / f"capture-{source}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.config = load_config(config_path)
        self.zone = LandingZone(self.config.landing.path, source)

    def set_source(self, **settings: Any) -> None:
        """Change the source's settings in the config file, as an operator edits it before a restart."""
        raw = yaml.safe_load(self.config_path.read_text())
        raw["sources"][self.source].update(settings)
        self.config_path.write_text(yaml.safe_dump(raw))
        self.config = load_config(self.config_path)

    def start(self, *extra: str, env: dict[str, str] | None = None) -> CaptureProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "capture.cli",
                "--config",
                str(self.config_path),
                "capture",
                "--source",
                self.source,
                *extra,
            ],
            cwd=ROOT,
            stdout=log,
            stderr=log,
            env={**os.environ, **(env or {})},
        )
        return self

    def run_to_exit(self, *extra: str, timeout: float = 60, env: dict[str, str] | None = None) -> int:
        self.start(*extra, env=env)
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def wait_running(self, timeout: float = 30) -> None:
        def running() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"capture exited with {self.process.returncode}:\n{self.log()}")
            return (
                "capture.first_start" in self.log() or "capture.resuming" in self.log() or "capture.reset" in self.log()
            )

        wait_for(running, timeout, what="capture to start")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        assert self.process is not None
        self.process.send_signal(sig)
        code = self.process.wait(timeout=timeout)
        return code

    def wait_exit(self, timeout: float = 30) -> int:
        """Wait for capture to stop on its own; its exit code."""
        assert self.process is not None
        wait_for(lambda: self.process.poll() is not None, timeout, what="capture to stop")
        return self.process.returncode

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def events(self, schema: str, table: str) -> list[dict]:
        data = self.zone.read_table(schema, table)
        return [] if data is None else data.to_pylist()

    def wait_events(self, schema: str, table: str, count: int, timeout: float = 30) -> list[dict]:
        def enough() -> list[dict] | None:
            events = self.events(schema, table)
            return events if len(events) >= count else None

        try:
            return wait_for(enough, timeout, interval=0.1, what=f"{count} events of {schema}.{table}")
        except TimeoutError:
            raise AssertionError(
                f"only {len(self.events(schema, table))} of {count} events landed; capture log:\n{self.log()}"
            ) from None


def capture_factory(
    tmp_path: Path, settings: Callable[[str], dict[str, Any]]
) -> Iterator[Callable[..., CaptureProcess]]:
    """Yield `make(include, source="src", **overrides)`: a config of one source (`settings(source)`,
    then `include`, then the keyword arguments; `landing` and `log_level` override the top-level
    ones) and a CaptureProcess for it; each still running afterwards is killed."""
    processes: list[CaptureProcess] = []

    def make(include: list[str] | None = None, source: str = "src", **overrides: Any) -> CaptureProcess:
        landing = {"path": str(tmp_path / "landing"), "flush_interval_s": 0.2}
        landing.update(overrides.pop("landing", {}))
        top = {"log_level": overrides.pop("log_level")} if "log_level" in overrides else {}
        source_config = {**settings(source), "heartbeat_s": 0.2, "metrics": {"port": free_port()}}
        if include is not None:
            source_config["include"] = include
        source_config.update(overrides)
        path = tmp_path / f"logtide-{source}.yaml"
        path.write_text(yaml.safe_dump({**top, "landing": landing, "sources": {source: source_config}}))
        processes.append(CaptureProcess(path, source, tmp_path))
        return processes[-1]

    yield make
    for process in processes:
        process.kill()


@pytest.fixture
def make_capture(mariadb: MariaDB, tmp_path: Path) -> Iterator:
    """Build a config for the private MariaDB and return a CaptureProcess for it (keyword
    arguments override the source's settings; `landing` and `log_level` the top-level ones)."""
    yield from capture_factory(
        tmp_path,
        lambda source: {
            "kind": "mariadb",
            "host": "127.0.0.1",
            "port": mariadb.port,
            "user": "root",
            "password": "${TEST_DB_PASSWORD:-}",
            "server_id": next(_server_ids),
        },
    )


@pytest.fixture
def start_capture(mariadb: MariaDB, database: str, make_capture) -> Callable[..., CaptureProcess]:
    """Return a function that runs its setup statements in the test's database, then starts
    capture of `include` (default: all of the database; keyword arguments as for make_capture)
    and waits until it streams: the first steps of most capture tests (as start_pg_capture)."""

    def start(*setup: str, include: list[str] | None = None, **options: Any) -> CaptureProcess:
        if setup:
            mariadb.execute(*setup, database=database)
        capture = make_capture(include or [f"{database}.*"], **options).start()
        capture.wait_running()
        return capture

    return start


@pytest.fixture
def make_relay(tmp_path: Path) -> Iterator:
    """`logtide relay` for a config (tests/integration/outputs.py RelayProcess); killed afterwards if still running."""
    from tests.integration.outputs import RelayProcess

    relays: list[RelayProcess] = []

    def make(config_path: Path) -> RelayProcess:
        relays.append(RelayProcess(config_path, tmp_path))
        return relays[-1]

    yield make
    for relay in relays:
        relay.kill()


@pytest.fixture
def dump_in_thread() -> Iterator:
    """`dump_in_thread(capture, table, chunk_size, delay_s)` -> (thread, outcome): a dump running in a thread
    (tests/integration/outputs.py BackgroundDump), cancelled and waited for afterwards, pass or fail."""
    from tests.integration.outputs import BackgroundDump

    dumps: list[BackgroundDump] = []

    def start(capture, table: str, chunk_size: int, delay_s: float) -> tuple:
        dumps.append(BackgroundDump(capture, table, chunk_size, delay_s))
        return dumps[-1].thread, dumps[-1].outcome

    yield start
    for dump in dumps:
        dump.stop()


def settle(seconds: float = 0.3) -> None:
    time.sleep(seconds)


# -- Spark and Iceberg (tests/spark, tests/airflow, the status test): ONE session for the whole run
# (one JVM and SparkContext start); a later build_session in this process (tests/airflow's `iceberg`)
# gets a session of its own on the same SparkContext, with its own catalogs (capture/merge/session.py). ----------

JARS = ROOT / "var" / "jars"


@pytest.fixture(scope="session")
def iceberg_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("iceberg")


@pytest.fixture(scope="session")
def catalogs(iceberg_dir: Path) -> dict[str, MergeConfig]:
    return {
        "hadoop": MergeConfig(catalog_name="logtide", warehouse=str(iceberg_dir / "warehouse"), jars_dir=JARS),
        "jdbc": MergeConfig(
            catalog="jdbc",
            catalog_name="logtide_jdbc",
            warehouse=str(iceberg_dir / "jdbc-warehouse"),
            jdbc_uri=f"jdbc:sqlite:{iceberg_dir / 'catalog.db'}",
            jars_dir=JARS,
        ),
    }


@pytest.fixture(scope="session")
def spark(catalogs: dict[str, MergeConfig]) -> Iterator:
    from capture.merge.session import build_session, session_conf  # pyspark only where Spark runs

    conf = {
        **session_conf(catalogs["hadoop"]),
        **session_conf(catalogs["jdbc"]),
        "spark.sql.shuffle.partitions": "4",
        "spark.pyspark.python": sys.executable,  # Python workers (if any) run the venv's Python, as under submit
    }
    session = build_session(conf, master="local[2]", app_name="logtide-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def merge_config(catalogs: dict[str, MergeConfig], database: str):
    """The capture's config with a `merge` section: catalog by kind, the test's database as namespace."""

    def make(config: LogtideConfig, kind: str = "hadoop") -> LogtideConfig:
        merge = catalogs[kind].model_copy(update={"namespace": database})
        return config.model_copy(update={"merge": merge})

    return make
