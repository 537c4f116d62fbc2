"""PostgreSQL fixtures: a fresh database per test on the session's private server, and a
capture service (a real child process) configured for it with a slot of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import CaptureProcess
from tests.servers import PostgreSQL, free_port


@pytest.fixture
def pg_database(postgres: PostgreSQL, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh database named after the test; its replication slots are dropped afterwards
    (an unread slot keeps WAL forever)."""
    name = "t_" + request.node.name.replace("[", "_").replace("]", "").replace("-", "_")[:50].lower()
    _drop(postgres, name)
    postgres.execute(f'CREATE DATABASE "{name}"')
    yield name
    _drop(postgres, name)


def _drop(postgres: PostgreSQL, name: str) -> None:
    postgres.execute(
        f"SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = '{name}'"
        " AND active_pid IS NOT NULL"
    )
    for (slot,) in postgres.query(f"SELECT slot_name FROM pg_replication_slots WHERE database = '{name}'"):
        for _ in range(50):
            try:
                postgres.execute(f"SELECT pg_drop_replication_slot('{slot}')")
                break
            except Exception:  # still active for a moment after its walsender was told to stop
                import time

                time.sleep(0.1)
    postgres.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def make_pg_capture(postgres: PostgreSQL, pg_database: str, tmp_path: Path) -> Iterator:
    """Build a config for the private PostgreSQL and return a CaptureProcess for it."""
    processes: list[CaptureProcess] = []

    def make(include: list[str] | None = None, source: str = "src", **overrides: object) -> CaptureProcess:
        landing = {"path": str(tmp_path / "landing"), "flush_interval_s": 0.2}
        landing.update(overrides.pop("landing", {}))  # type: ignore[arg-type]
        source_config = {
            "kind": "postgresql",
            "host": "127.0.0.1",
            "port": postgres.port,
            "user": "postgres",
            "password": "${TEST_DB_PASSWORD:-}",
            "database": pg_database,
            "slot": f"lt_{pg_database}_{source}"[:63].lower().replace("-", "_"),
            "include": include or ["public.*"],
            "heartbeat_s": 0.2,
            "metrics": {"port": free_port()},
        }
        source_config.update(overrides)
        path = tmp_path / f"logtide-{source}.yaml"
        path.write_text(yaml.safe_dump({"landing": landing, "sources": {source: source_config}}))
        process = CaptureProcess(path, source, tmp_path)
        processes.append(process)
        return process

    yield make
    for process in processes:
        process.kill()
