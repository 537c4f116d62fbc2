"""One keyless table among keyed ones (issue 10, part 4), on MariaDB and PostgreSQL with the real
capture: the all-tables dump and merge skip it (named once, with reason and fix) and handle the
rest, a table whose merge fails stops none of the others, `logtide status` says why, and once
`keys` names its key the keyless table converges to its source like a keyed one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from capture.config import LogtideConfig, load_config
from capture.dump.engine import DumpEngine, DumpRequest
from capture.merge.app import run_merge
from capture.sources import open_chunk_source
from capture.status import collect
from tests.conftest import CaptureProcess
from tests.integration.keyless import TABLES, Db, cli, open_db
from tests.integration.postgres.conftest import make_pg_capture, pg_database  # noqa: F401 - fixtures
from tests.spark.merging import iceberg_state

pytestmark = pytest.mark.spark

PG_TABLES = [
    "ALTER TABLE codes REPLICA IDENTITY USING INDEX codes_code",
    "ALTER TABLE events REPLICA IDENTITY FULL",
]
CHANGES = [
    "INSERT INTO orders VALUES (4, 40)",
    "UPDATE events SET v = v + 1 WHERE n = 2",
    "DELETE FROM events WHERE n = 3",
    "INSERT INTO events VALUES (5, 500)",
    "UPDATE codes SET v = 3 WHERE code = 'b'",
]
# after `keys` names events' key: updates, a key change, a delete, and codes changed by the log alone
MORE_CHANGES = [
    "UPDATE events SET v = v * 2 WHERE n IN (1, 5)",
    "UPDATE events SET n = 9 WHERE n = 4",
    "DELETE FROM events WHERE n = 2",
    "INSERT INTO events VALUES (6, 600)",
    "UPDATE codes SET v = 7 WHERE code = 'a'",
]


@pytest.fixture(params=["mariadb", "postgres"])
def db(request: pytest.FixtureRequest) -> Db:
    return open_db(request, request.param)


def _with_merge(capture: CaptureProcess, catalogs, namespace: str, path: Path) -> tuple[Path, LogtideConfig]:
    """The capture's config file with a `merge` section (the session's Hadoop catalog)."""
    data = yaml.safe_load(capture.config_path.read_text())
    merge = catalogs["hadoop"].model_copy(update={"namespace": namespace})
    data["merge"] = merge.model_dump(mode="json", exclude={"jdbc_password"})
    path.write_text(yaml.safe_dump(data))
    return path, load_config(path)


def _target(config: LogtideConfig, schema: str, table: str) -> str:
    return f"`{config.merge.catalog_name}`.`{config.merge.namespace}`.`{schema}__{table}`"


def _assert_target(spark, db: Db, config: LogtideConfig, table: str, key: tuple[str, ...]) -> None:
    got = iceberg_state(spark, _target(config, db.schema, table), key)
    assert got == db.state(table, key), table


def test_a_keyless_table_is_skipped_by_all_tables_commands_until_keys_names_its_key(db, catalogs, spark, tmp_path):
    db.execute(*TABLES, *(PG_TABLES if db.kind == "postgres" else ()))
    capture = db.capture().start()
    capture.wait_running()
    events, clash = f"{db.schema}.events", f"{db.schema}.clash"
    assert f"event=capture.keyless_tables source=src tables={events} " in capture.log()
    config_path, config = _with_merge(capture, catalogs, f"keyless_{db.kind}", tmp_path / "merge.yaml")
    db.execute(*CHANGES)

    dump = cli(config_path, "dump", "--source", "src", "--chunk-size", "2", "--dump-id", "all")
    assert dump.returncode == 0, dump.stderr
    summary = json.loads(dump.stdout)
    assert sorted(t["table"] for t in summary["tables"]) == [f"{db.schema}.{t}" for t in ("clash", "codes", "orders")]
    assert [s["table"] for s in summary["skipped"]] == [events]
    assert "no primary key" in summary["skipped"][0]["reason"] and "keys" in summary["skipped"][0]["fix"]
    assert dump.stderr.count("dump.table_skipped") == 1 and f"table={events}" in dump.stderr
    db.landed(capture)

    report = run_merge(spark, config, "src")  # `logtide merge` and its exit code: test_merge.py, the killed merge
    assert [s["table"] for s in report["skipped"]] == [events] and "keys" in report["skipped"][0]["fix"]
    assert [f["table"] for f in report["failed"]] == [clash] and "bookkeeping" in report["failed"][0]["failed"]
    _assert_target(spark, db, config, "orders", ("id",))
    _assert_target(spark, db, config, "codes", ("code",))

    status = collect(config, ["src"])[0]
    targets = {t["table"]: t for t in status["targets"]}
    assert "no primary key" in targets[events]["skipped"] and "keys" in targets[events]["fix"]
    assert "skipped" not in targets[f"{db.schema}.orders"]
    (dumped,) = status["dumps"]
    assert [s["table"] for s in dumped["skipped"]] == [events]

    # `keys` names events' key: capture lands it with that key, dumps and merges treat it as keyed
    assert capture.stop() == 0
    keyed = db.capture(keys={events: ["n"]})
    keyed.log_path.write_text("")  # the same log file: this run's lines only
    keyed.start().wait_running()
    assert "capture.keyless_tables" not in keyed.log()
    _, config = _with_merge(keyed, catalogs, f"keyless_{db.kind}", tmp_path / "merge.yaml")
    db.execute(*MORE_CHANGES)
    source = open_chunk_source("src", config.source("src"))
    try:
        result = DumpEngine(source, keyed.zone).run(DumpRequest(tables=[events], settings={"chunk_size": 2}))
    finally:
        source.close()
    assert result["tables"][0]["rows"] == 4
    db.landed(keyed)
    report = run_merge(spark, config, "src", [events, f"{db.schema}.codes"])
    assert report["failed"] == report["skipped"] == []
    for table, key in (("events", ("n",)), ("codes", ("code",))):  # codes: log events only, no chunk
        _assert_target(spark, db, config, table, key)
    assert keyed.stop() == 0
