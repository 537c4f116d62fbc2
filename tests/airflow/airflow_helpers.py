"""Small helpers over Airflow's models for the DAG tests (imported after `airflow_home` is set up)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.airflow.conftest import DAGS


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
