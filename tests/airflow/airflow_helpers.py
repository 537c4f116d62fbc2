"""Small helpers over Airflow's models for the DAG tests (imported after `airflow_home` is set up)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from capture.config import LogtideConfig
from tests.airflow.conftest import DAGS
from tests.integration import dumping as maria
from tests.integration.postgres import dumping as pg


@contextmanager
def iceberg(config: LogtideConfig) -> Iterator[Any]:
    """A Spark session on the config's catalog, to read the targets as a user would. Tests that use
    it ask for the run's `spark` fixture (tests/conftest.py) first: this is then a session of its
    own on that one SparkContext (build_session), not a SparkContext started and stopped per call
    (each start a few seconds, tens under load)."""
    from capture.merge.session import build_session, session_conf, stop_session

    spark = build_session(session_conf(config.merge), "local[1]", "logtide-airflow-tests")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    finally:
        stop_session(spark)  # not a session-wide one another test started (tests/conftest.py `spark`)


def load_dag(dag_id: str) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}, bag.import_errors
    return bag.get_dag(dag_id)


def set_variable(key: str, value: str) -> None:
    from airflow.models import Variable

    Variable.set(key, value)


def delete_variable(key: str) -> None:
    from airflow.models import Variable

    Variable.delete(key)


def task_states(dag_id: str, run_id: str) -> dict[tuple[str, int], str | None]:
    from airflow.models import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=run_id).all()
        return {(ti.task_id, ti.map_index): ti.state for ti in tis}


def xcoms(dag_id: str, run_id: str) -> dict[tuple[str, int, str], Any]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(XComModel).filter_by(dag_id=dag_id, run_id=run_id).all()
        return {(x.task_id, x.map_index, x.key): XComModel.deserialize_value(x) for x in rows}


class EventRecorder(logging.Handler):
    """Logtide log events (name and fields) seen in this process, e.g. from tasks run by `dag.test()`."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.lines: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        return True  # sees records as logged, even when on the root logger where filters get added

    def emit(self, record: logging.LogRecord) -> None:
        self.events.append((getattr(record, "event", record.getMessage()), dict(getattr(record, "fields", {}) or {})))
        self.lines.append(f"{record.getMessage()} {record.exc_text or ''}")

    def text(self) -> str:
        return "\n".join(self.lines)

    def named(self, event: str) -> list[dict[str, Any]]:
        return [fields for name, fields in list(self.events) if name == event]


@contextmanager
def recorded_events(*names: str) -> Iterator[EventRecorder]:
    """Records of the loggers `names` (default: Logtide's; "" is the root, so every record)."""
    recorder = EventRecorder()
    loggers = [logging.getLogger(name) for name in names or ("capture", "logtide_airflow")]
    for logger in loggers:
        logger.addHandler(recorder)
    try:
        yield recorder
    finally:
        for logger in loggers:
            logger.removeHandler(recorder)


TABLES = ("ledger", "accounts")


def populate(mariadb, database: str, rows: int) -> None:
    """The MariaDB tables the dump DAG tests dump: `rows` rows each of (id, v, note)."""
    for table in TABLES:
        mariadb.execute(
            f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT, note VARCHAR(20))",
            f"INSERT INTO {table} SELECT seq, seq % 100, CONCAT('row', seq) FROM seq_1_to_{rows}",
            database=database,
        )


@dataclass
class DumpSource:
    """What a dump DAG test does with one database family: the TABLES with `rows` rows each, a
    capture, the random workload, catching up with the log and the table as SELECT returns it."""

    kind: str
    server: Any
    database: str
    schema: str  # MariaDB's database, PostgreSQL's schema: the first part of a table's name
    make_capture: Callable[..., Any]

    def populate(self, rows: int) -> None:
        if self.kind == "mariadb":
            populate(self.server, self.database, rows)
            return
        for table in TABLES:  # text under a non-C collation: the keyset order is the database's
            self.server.execute(
                f'CREATE TABLE "{table}" (id int PRIMARY KEY, v int, note text COLLATE "en-x-icu")',
                f"INSERT INTO \"{table}\" SELECT i, i % 100, 'row' || i FROM generate_series(1, {rows}) i",
                database=self.database,
            )

    def capture(self) -> Any:
        return self.make_capture([f"{self.database}.*"]) if self.kind == "mariadb" else self.make_capture()

    def workload(self, table: str, seed: int) -> Any:
        module = maria if self.kind == "mariadb" else pg
        return module.Workload(self.server, self.database, table, 100_000, seed)

    def wait_until_landed(self, capture: Any) -> None:
        if self.kind == "mariadb":
            maria.wait_until_landed(self.server, capture)
        else:
            pg.wait_until_landed(self.server, self.database, capture)

    def table_state(self, table: str) -> dict:
        module = maria if self.kind == "mariadb" else pg
        return module.table_state(self.server, self.database, table)


def dump_source(request: pytest.FixtureRequest, kind: str) -> DumpSource:
    """The adapter for `kind`, its fixtures taken from pytest (only that server starts)."""
    if kind == "mariadb":
        database = request.getfixturevalue("database")
        return DumpSource(kind, request.getfixturevalue("mariadb"), database, database,
                          request.getfixturevalue("make_capture"))  # fmt: skip
    return DumpSource(kind, request.getfixturevalue("postgres"), request.getfixturevalue("pg_database"), "public",
                      request.getfixturevalue("make_pg_capture"))  # fmt: skip
