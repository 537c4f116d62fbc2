"""A key named in the configuration (`sources.<name>.keys`) that cannot be used is refused at
startup by capture, `logtide dump` and `logtide setup`, each problem named, nothing written."""

from __future__ import annotations

import pytest

from tests.integration.keyless import TABLES, Db, cli, open_db
from tests.integration.postgres.conftest import make_pg_capture, pg_database  # noqa: F401 - fixtures

pytestmark = pytest.mark.integration


@pytest.fixture(params=["mariadb", "postgres"])
def db(request: pytest.FixtureRequest) -> Db:
    return open_db(request, request.param)


def test_a_named_key_that_does_not_exist_is_refused_at_startup(db, tmp_path):
    db.execute(*TABLES[:3], "CREATE TABLE notes (a INT, b INT)")
    wrong = {
        f"{db.schema}.events": ["nope"],
        f"{db.schema}.ghost": ["id"],
        f"{db.schema}.orders": ["v"],
        f"{db.schema}.notes": ["b"],
    }
    capture = db.capture(source="bad", keys=wrong, landing={"path": str(tmp_path / "bad")})
    assert capture.run_to_exit() == 2
    log = capture.log()
    assert f"sources.bad.keys names (nope) for {db.schema}.events, which has no column nope" in log
    assert f"sources.bad.keys names {db.schema}.ghost, which does not exist" in log
    assert f"names (v) for {db.schema}.orders, which has a key of its own (id): remove the entry" in log
    assert f"names (b) for {db.schema}.notes, whose column b may be NULL: a key must be NULL-free" in log
    for command in (["dump", "--source", "bad"], ["setup", "--source", "bad"]):
        refused = cli(capture.config_path, *command)
        assert refused.returncode == 2 and "unusable keys in the configuration" in refused.stderr, refused.stderr
    # the lease's lock file and epoch, taken before the checks; no checkpoint, nothing landed, no dump record
    assert {p.name for p in capture.zone.root.iterdir()} == {"capture.lock", ".epoch-1"}
    if db.kind == "postgres":  # no publication either
        assert db.server.query("SELECT pubname FROM pg_publication", database=db.database) == []
