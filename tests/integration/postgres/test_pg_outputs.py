"""Real-time outputs of a PostgreSQL source: capture and `logtide relay` as processes, a private JetStream,
a dump under a concurrent workload, capture killed once; the stream rebuilds the table."""

from __future__ import annotations

import pytest

from capture.output.landing import Position, read_position
from tests.integration.outputs import (
    add_jetstream,
    debezium_state,
    expected_stream,
    read_all,
    start_relay,
)
from tests.integration.postgres.dumping import Workload, reconciled_state, table_state, wait_until_landed
from tests.servers import wait_for

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("watermarks", ["table", "readonly"])
def test_jetstream_stream_of_a_postgresql_dump_under_load_rebuilds_the_table(
    postgres, pg_database, make_pg_capture, nats_server, tmp_path, make_relay, dump_in_thread, watermarks
):
    """Both kinds of watermarks; read-only: the relay places each chunk at its HIGH file's position, and
    drops the rows the chunk's snapshot rule says (an xid in xip or at/after xmax, whatever its LSN)."""
    postgres.execute(
        "CREATE TABLE ledger (id int PRIMARY KEY, v int, note text)",
        "INSERT INTO ledger SELECT i, i % 100, 'row' || i FROM generate_series(1, 3000) i",
        database=pg_database,
    )
    if watermarks == "readonly":  # Logtide creates nothing: the administrator's publication
        postgres.execute("CREATE PUBLICATION logtide_src FOR TABLE public.ledger", database=pg_database)
    capture = make_pg_capture(watermarks=watermarks)
    # Debezium's envelope, and only the ledger (not the test's marker table)
    stream, prefix = add_jetstream(
        capture.config_path, nats_server.url, start="beginning", format="debezium", tables=["public.ledger"]
    )
    capture.start().wait_running()
    relay = start_relay(make_relay, capture)
    workload = Workload(postgres, pg_database, "ledger", 100_000, seed=5)
    workload.start()
    dump, outcome = dump_in_thread(capture, "public.ledger", chunk_size=100, delay_s=0.15)
    try:
        wait_for(lambda: (read_position(capture.zone, "js") or Position(0, 0, 0)).delivered > 200, 30)
        capture.kill()  # SIGKILL mid-dump, under load
        capture.start()
        dump_running_at_kill = dump.is_alive()
        dump.join(timeout=120)
    finally:
        workload.stop()
    assert outcome and not isinstance(outcome[0], BaseException), outcome
    assert dump_running_at_kill, "capture was killed after the dump ended: make the dump longer"
    wait_until_landed(postgres, pg_database, capture)

    expected = expected_stream(capture.zone, {"public.ledger"})
    got = [m for _, m in read_all(nats_server.url, stream, prefix, len(expected), relay)]
    assert [(int(m["source"]["lsn"]), m["source"]["order"]) for m in got] == [(e.lsn, e.order) for e in expected]
    assert {m["source"]["table"] for m in got} == {"ledger"} and got[0]["source"]["db"] == pg_database
    assert sum(m["op"] == "r" for m in got) > 1000 and workload.transactions > 50
    source = {k[0]: row for k, row in table_state(postgres, pg_database, "ledger").items()}
    assert debezium_state(got) == source
    assert {k[0]: row for k, row in reconciled_state(capture, "public", "ledger")[0].items()} == source
