"""A key named in the configuration (`sources.<name>.keys`) that cannot be used is refused at
startup by capture, `logtide dump` and `logtide setup`, each problem named, nothing written; one
that rows share is refused by each dump before it writes (skipped by a dump of every table)."""

from __future__ import annotations

import json

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


def test_a_named_key_that_rows_share_is_refused_by_each_dump_before_it_writes(db):
    db.execute(
        "CREATE TABLE orders (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE tags (n INT NOT NULL, tag VARCHAR(10) NOT NULL)",
        "INSERT INTO orders VALUES (1, 1)",
        "INSERT INTO tags VALUES (1, 'a'), (2, 'b'), (2, 'c')",
        *(["ALTER TABLE tags REPLICA IDENTITY FULL"] if db.kind == "postgres" else []),
    )
    tags = f"{db.schema}.tags"
    capture = db.capture(keys={tags: ["n"]})
    every = cli(capture.config_path, "dump", "--source", "src")
    assert every.returncode == 0, every.stderr
    summary = json.loads(every.stdout)
    assert [t["table"] for t in summary["tables"]] == [f"{db.schema}.orders"]
    (skipped,) = summary["skipped"]
    assert skipped["table"] == tags and "share the key sources.src.keys names for it (n = " in skipped["reason"]
    named = cli(capture.config_path, "dump", "--source", "src", "--table", tags)
    assert named.returncode == 2 and f"table {tags} has rows that share the key" in named.stderr
    db.execute("DELETE FROM tags WHERE tag = 'c'")  # unique now: dumped as a keyed table
    again = cli(capture.config_path, "dump", "--source", "src", "--table", tags)
    assert again.returncode == 0 and json.loads(again.stdout)["rows"] == 2, again.stderr
