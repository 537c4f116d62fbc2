"""The issue's differential test: one run, two consumers of the same landing zone. The online stream
(`logtide relay` into NATS JetStream, consumed back) and the Spark merge (Iceberg target and its changelog)
give the same row for every key, and both equal the source table, on MariaDB and PostgreSQL, under a
concurrent workload during a dump with capture SIGKILLed mid-dump.

The table is small and plain (int, text, and on PostgreSQL an out-of-line TOASTed `doc` that the workload's
updates leave out, so the stream carries it in `missing`): the point is the two paths agreeing, which the
merge's own type tests (tests/spark/test_merge.py) do not cover."""

from __future__ import annotations

import uuid

import pytest

from capture.merge.app import run_merge
from capture.output.landing import Position, read_position
from tests.integration.outputs import (
    add_outputs,
    expected_stream,
    logtide_state,
    read_jetstream,
    read_state,
    wait_count,
)
from tests.integration.postgres.conftest import make_pg_capture, pg_database  # noqa: F401 - fixtures for `source`
from tests.servers import wait_for
from tests.spark.merging import changelog_replay, differences, iceberg_state
from tests.spark.sources import Source, Table, open_source

pytestmark = pytest.mark.spark

ROWS = 400
# history keys from 1,000,001 and the workload's new keys from 1, started once the first chunk is read:
# its inserts land behind the dump's cursor, so the dump lasts as long as the history, not as long as
# it takes to catch up with a table growing ahead of it
FIRST = 1_000_000
DDL = {
    "mariadb": [
        "CREATE TABLE ledger (id INT PRIMARY KEY, v INT, note VARCHAR(40), doc TEXT)",
        f"INSERT INTO ledger SELECT {FIRST} + seq, seq % 100, CONCAT('row', seq), REPEAT(MD5(seq), 3)"
        f" FROM seq_1_to_{ROWS}",
    ],
    "postgres": [
        "CREATE TABLE ledger (id int PRIMARY KEY, v int, note text, doc text DEFAULT repeat(md5(random()::text), 90))",
        "ALTER TABLE ledger ALTER COLUMN doc SET STORAGE EXTERNAL",
        f"INSERT INTO ledger SELECT {FIRST} + i, i % 100, 'row' || i, repeat(md5(i::text), 90)"
        f" FROM generate_series(1, {ROWS}) i",
    ],
}
# PostgreSQL: no key changes (an unchanged TOASTed value cannot follow a row to its new key under
# REPLICA IDENTITY DEFAULT when nobody holds the old one: README, PostgreSQL)
TYPES = {"id": "int", "v": "int", "note": "string", "doc": "string"}
TABLE = {
    "mariadb": Table("ledger", ("id",), TYPES),
    "postgres": Table("ledger", ("id",), TYPES, {"key_changes": False}),
}


@pytest.fixture
def source(request: pytest.FixtureRequest) -> Source:
    return open_source(request, request.param)


@pytest.mark.parametrize("source", ["mariadb", "postgres"], indirect=True)
def test_the_online_stream_and_the_spark_merge_agree_with_each_other_and_the_source(
    source, catalogs, spark, nats_server, make_relay, dump_in_thread
):
    source.server.execute(*DDL[source.kind], database=source.database)
    table = TABLE[source.kind]
    capture = source.capture()
    stream, prefix = f"D{uuid.uuid4().hex[:8]}", f"d{uuid.uuid4().hex[:8]}"
    output = {"source": "src", "kind": "nats", "url": nats_server.url, "stream": stream, "subject_prefix": prefix}
    add_outputs(capture.config_path, {"js": {**output, "start": "beginning", "tables": [f"{source.schema}.ledger"]}})
    capture.start().wait_running()
    relay = make_relay(capture.config_path).start()
    wait_for(lambda: read_state(capture.zone, "js"), 30, what="the relay to start")
    workload = source.workload(table, 1, seed=11)
    dump, outcome = dump_in_thread(capture, f"{source.schema}.ledger", chunk_size=20, delay_s=0.05)
    chunks = capture.zone.root / "chunks"
    try:
        wait_for(lambda: list(chunks.glob("*/*/*.parquet")), 30, what="the dump's first chunk")
        workload.start()
        wait_for(lambda: len(list(chunks.glob("*/*/*.parquet"))) >= 4, 30, what="the dump's 4th chunk")
        wait_for(lambda: (read_position(capture.zone, "js") or Position(0, 0, 0)).delivered > 50, 30)
        capture.kill()  # SIGKILL mid-dump, under load
        killed_mid_dump = dump.is_alive()
        capture.start()
        dump.join(timeout=120)
    finally:
        if workload.ident is not None:  # started
            workload.stop()
    assert outcome and not isinstance(outcome[0], BaseException), outcome
    assert killed_mid_dump, "capture was killed after the dump ended: make the dump longer"
    assert workload.transactions > 20
    source.wait_until_landed(capture)

    # the online stream, as a JetStream consumer reads it
    expected = expected_stream(capture.zone, {f"{source.schema}.ledger"})
    wait_count(nats_server.url, stream, len(expected), relay)
    got = [m for _, m in read_jetstream(nats_server.url, stream, f"{prefix}.>")]
    relay.stop()
    assert [(int(m["lsn"]), m["order"]) for m in got] == [(e.lsn, e.order) for e in expected]
    assert sum(m["op"] == "r" for m in got) >= ROWS // 2
    if source.kind == "postgres":  # the workload's updates left the TOASTed doc out: the stream says so
        assert sum(m["missing"] == ["doc"] for m in got if m["op"] == "u") > 5
    online = {(k,): row for k, row in logtide_state(got).items()}

    # the batch path, from the same landing zone
    config = source.merge_config(capture.config, catalogs["hadoop"], f"diff_{source.kind}")
    run_merge(spark, config, "src", [f"{source.schema}.ledger"])
    name = f"`{config.merge.catalog_name}`.`{config.merge.namespace}`.`{source.schema}__ledger"
    target = iceberg_state(spark, name + "`")
    changelog = changelog_replay(spark, name + "__changelog`")

    want = source.state(table)
    assert online == want, differences(online, want)
    assert target == want, differences(target, want)
    assert changelog == want, differences(changelog, want)
