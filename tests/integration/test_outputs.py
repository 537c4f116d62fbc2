"""Real-time outputs against real servers: MariaDB, the capture service and `logtide relay` as processes,
a private NATS JetStream server, and a local webhook that fails and times out on purpose."""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyarrow as pa
import pytest

from capture.config import OutputConfig, load_config
from capture.dump.control import DumpSettings
from capture.dump.engine import DumpEngine, DumpRequest
from capture.errors import DumpCancelledError
from capture.events import Change, ChangeBatch, Column, Lsn, Op, TableSchema, TransactionEnd
from capture.landing import Checkpoint, LandingZone
from capture.landing.chunks import ChunkMeta, read_chunk_meta, write_chunk, write_chunk_high
from capture.landing.log_writer import LogWriter
from capture.output.landing import Position, read_position
from capture.output.relay import STATE_EVERY_S, Relay
from capture.output.sinks import open_output
from capture.sources import open_chunk_source
from capture.sources.base import WATERMARK_SCHEMA, WATERMARK_TABLE
from capture.status import outputs_status
from tests.integration.dumping import Workload, populate_ledger, reconciled_state, table_state, wait_until_landed
from tests.integration.outputs import (
    BackgroundDump,
    add_jetstream,
    add_outputs,
    debezium_state,
    expected_stream,
    logtide_state,
    read_all,
    read_state,
    scrape,
    start_relay,
)
from tests.servers import NatsServer, wait_for

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("watermarks", ["table", "readonly"])
def test_jetstream_gets_the_log_and_dump_rows_interleaved_through_kills_of_capture_and_relay(
    mariadb, database, make_capture, nats_server, tmp_path, make_relay, dump_in_thread, watermarks
):
    """Both kinds of watermarks: rows of `logtide.watermarks` in the log, or (read-only) a chunk's LOW in
    its file and its HIGH in its HIGH file, which the relay finds before the log passes it."""
    populate_ledger(mariadb, database, 3000)  # history before capture started: only the dump brings it
    capture = make_capture([f"{database}.*"], watermarks=watermarks)
    stream, prefix = add_jetstream(capture.config_path, nats_server.url, start="beginning", batch_size=200)
    capture.start().wait_running()
    relay = start_relay(make_relay, capture)
    workload = Workload(mariadb, database, "ledger", 100_000, seed=3)
    workload.start()
    dump, outcome = dump_in_thread(capture, f"{database}.ledger", chunk_size=100, delay_s=0.05)
    try:
        time.sleep(1.5)
        capture.kill()  # SIGKILL mid-dump, under load
        capture.start()
        wait_for(lambda: (read_position(capture.zone, "js") or Position(0, 0, 0)).delivered > 500, 30)
        relay.kill()  # SIGKILL mid-run: it resumes from its acknowledged position
        dump_running_at_kill = dump.is_alive()
        relay.start()
        dump.join(timeout=120)
    finally:
        workload.stop()
    assert outcome and not isinstance(outcome[0], BaseException), outcome
    assert dump_running_at_kill, "the relay was killed after the dump ended: make the dump longer"
    wait_until_landed(mariadb, capture)

    expected = expected_stream(capture.zone)
    got = read_all(nats_server.url, stream, prefix, len(expected), relay)
    # every message once (retries of unacknowledged ones are dropped by their Nats-Msg-Id), in log order
    assert [i for i, _ in got] == [f"src:{e.lsn}" if e.order == 0 else f"src:{e.lsn}:{e.order}" for e in expected]
    positions = [(int(m["lsn"]), m["order"]) for _, m in got]
    assert positions == sorted(positions)
    rows = [m for _, m in got]
    assert sum(m["op"] == "r" for m in rows) > 1000 and workload.transactions > 50
    assert all(m["dump"]["chunk"] >= 1 for m in rows if m["op"] == "r")
    source = {k[0]: row for k, row in table_state(mariadb, database, "ledger").items()}
    assert logtide_state(rows) == source
    # the merge's reference rebuilds the same table from the same landing zone
    assert {k[0]: row for k, row in reconciled_state(capture, database, "ledger")[0].items()} == source
    assert "output.resuming" in relay.log()
    watermark_rows = capture.zone.read_table(WATERMARK_SCHEMA, WATERMARK_TABLE)
    assert (watermark_rows is None) == (watermarks == "readonly")  # read-only: nothing written to the source


class _Hook(BaseHTTPRequestHandler):
    """Answers 500 to the first POST, takes too long over the second (it did receive it), then 200."""

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        server = self.server
        with server.lock:  # type: ignore[attr-defined]
            n = server.posts = server.posts + 1  # type: ignore[attr-defined]
            if n > 1:
                server.received.append(json.loads(body))  # type: ignore[attr-defined]
        if n == 1:
            self.send_response(500)
            self.end_headers()
            return
        if n == 2:
            time.sleep(1.5)  # past the client's timeout_s
        try:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")
        except BrokenPipeError:  # the client gave up (the timed-out POST)
            pass


def test_webhook_retries_failures_and_timeouts_and_loses_nothing_in_debeziums_envelope(
    mariadb, database, make_capture, tmp_path, make_relay, dump_in_thread
):
    populate_ledger(mariadb, database, 400)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    server.posts, server.received, server.lock = 0, [], threading.Lock()  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    capture = make_capture([f"{database}.*"])
    hook = {
        "source": "src",
        "kind": "webhook",
        "url": f"http://127.0.0.1:{server.server_port}/events",
        "format": "debezium",
        "start": "beginning",
        "batch_size": 50,
        "timeout_s": 0.5,
        "max_backoff_s": 0.5,
    }
    add_outputs(capture.config_path, {"hook": hook})
    capture.start().wait_running()
    relay = make_relay(capture.config_path).start()
    workload = Workload(mariadb, database, "ledger", 100_000, seed=4)
    workload.start()
    dump, outcome = dump_in_thread(capture, f"{database}.ledger", chunk_size=40, delay_s=0.05)
    try:
        dump.join(timeout=60)
    finally:
        workload.stop()
    assert outcome and not isinstance(outcome[0], BaseException), outcome
    wait_until_landed(mariadb, capture)
    expected = [(e.lsn, e.order) for e in expected_stream(capture.zone)]

    def first_copies() -> list[dict]:
        seen, out = set(), []
        for batch in list(server.received):  # type: ignore[attr-defined]
            for m in batch:
                position = (int(m["source"]["lsn"]), m["source"]["order"])
                if position not in seen:
                    seen.add(position)
                    out.append(m)
        return out

    try:
        wait_for(lambda: len(first_copies()) >= len(expected), 60, interval=0.2, what="every message at the webhook")
    finally:
        relay.stop()
        server.shutdown()
    messages = first_copies()
    assert [(int(m["source"]["lsn"]), m["source"]["order"]) for m in messages] == expected
    every = [(int(m["source"]["lsn"]), m["source"]["order"]) for b in server.received for m in b]  # type: ignore[attr-defined]
    duplicates = len(every) - len(messages)
    assert 0 < duplicates <= 50  # only the batch whose answer timed out came twice
    assert server.posts >= 3 and "output.post_failed" in relay.log() and "output.retrying" in relay.log()
    assert any(m["op"] == "r" and m["source"]["snapshot"] == "incremental" for m in messages)
    shown = outputs_status(load_config(capture.config_path), "src", capture.zone)  # `logtide status`
    assert shown[0]["output"] == "hook" and shown[0]["delivered"] == len(expected)
    assert int(shown[0]["acknowledged_lsn"]) >= expected[-1][0]  # an idle relay records reading further
    source = {k[0]: row for k, row in table_state(mariadb, database, "ledger").items()}
    assert debezium_state(messages) == source


class _PauseAfterLow:
    """The real chunk source, except that the dump waits right after LOW of one chunk until released."""

    def __init__(self, source, chunk: int) -> None:
        self._source, self._chunk = source, chunk
        self.paused, self.release = threading.Event(), threading.Event()

    def __getattr__(self, name: str):
        return getattr(self._source, name)

    def write_watermark(self, mark, table=None) -> None:
        self._source.write_watermark(mark, table)
        if mark.kind == "LOW" and mark.chunk == self._chunk:
            self.paused.set()
            self.release.wait(60)


@pytest.mark.parametrize("watermarks", ["table", "readonly"])
def test_an_output_added_inside_a_dump_window_starts_at_the_checkpoint_and_rebuilds_the_window(
    mariadb, database, make_capture, nats_server, tmp_path, make_relay, watermarks
):
    """Read-only: no LOW row tells the relay where chunk 4's window began; it finds the chunk by its HIGH
    file after the checkpoint and reads its table's log again from the LOW in the chunk file."""
    populate_ledger(mariadb, database, 1000)
    capture = make_capture([f"{database}.*"], watermarks=watermarks)
    capture.start().wait_running()
    source = open_chunk_source("src", capture.config.source("src"))
    pausing = _PauseAfterLow(source, chunk=4)
    outcome: list = []
    request = DumpRequest(tables=[f"{database}.ledger"], settings=DumpSettings(chunk_size=100))
    dump = threading.Thread(target=lambda: outcome.append(DumpEngine(pausing, capture.zone).run(request)))
    dump.start()
    try:
        assert pausing.paused.wait(60)
        # inside chunk 4's window: a change to one of its rows, landed before the output exists
        mariadb.execute("UPDATE ledger SET v = -1 WHERE id = 350", database=database)
        wait_until_landed(mariadb, capture)
        stream, prefix = add_jetstream(capture.config_path, nats_server.url, start="checkpoint")
        relay = make_relay(capture.config_path).start()
        wait_for(lambda: "output.first_start" in relay.log(), 30, what="the relay to start")
    finally:
        pausing.release.set()
        dump.join(timeout=60)
        source.close()
    assert outcome, "the dump failed"
    wait_until_landed(mariadb, capture)
    started = re.search(r"output.first_start .*frontier=(\d+) replay_from=(\d+)", relay.log())
    assert started is not None, relay.log()
    frontier, replay_from = int(started.group(1)), int(started.group(2))
    if watermarks == "table":
        assert replay_from < frontier  # chunk 4's LOW was before the checkpoint: the relay read from there
    else:
        low = next(m.low_lsn for m in _chunk_metas(capture.zone) if m.chunk == 4)
        assert low < frontier == replay_from  # LOW was before the checkpoint; the relay reads it again per chunk

    expected = [e for e in expected_stream(capture.zone) if e.lsn >= frontier]
    got = [m for _, m in read_all(nats_server.url, stream, prefix, len(expected), relay)]
    assert [(int(m["lsn"]), m["order"]) for m in got] == [(e.lsn, e.order) for e in expected]
    chunk4 = [m["key"]["id"] for m in got if m["op"] == "r" and m["dump"]["chunk"] == 4]
    assert chunk4 == [i for i in range(301, 401) if i != 350]  # the row changed inside its window is dropped
    assert {m["dump"]["chunk"] for m in got if m["op"] == "r"} == set(range(4, 11))


def _chunk_metas(zone: LandingZone) -> list:
    return [read_chunk_meta(p) for p in sorted((zone.root / "chunks").rglob("[0-9]*.parquet"))]


def test_jetstream_down_for_a_while_delays_delivery_and_loses_nothing(
    mariadb, database, make_capture, tmp_path, make_relay
):
    populate_ledger(mariadb, database, 10)
    server = NatsServer(tmp_path / "nats")
    server.start()
    try:
        capture = make_capture([f"{database}.*"])
        output = {"source": "src", "kind": "nats", "url": server.url, "stream": "DOWN", "subject_prefix": "down"}
        add_outputs(capture.config_path, {"js": {**output, "start": "beginning", "timeout_s": 1, "max_backoff_s": 1}})
        capture.start().wait_running()
        relay = make_relay(capture.config_path).start()
        workload = Workload(mariadb, database, "ledger", 100_000, seed=6)
        workload.start()
        try:
            wait_for(lambda: (read_position(capture.zone, "js") or Position(0, 0, 0)).delivered > 100, 30)
            server.stop()  # JetStream goes away under load ...
            wait_for(lambda: "output.retrying" in relay.log(), 30, what="the relay to retry")
            time.sleep(1)
            server.start()  # ... and comes back, on the same port and storage
            time.sleep(1)
        finally:
            workload.stop()
        wait_until_landed(mariadb, capture)
        expected = expected_stream(capture.zone)
        got = read_all(server.url, "DOWN", "down", len(expected), relay)
    finally:
        server.destroy()
    assert [(int(m["lsn"]), m["order"]) for _, m in got] == [(e.lsn, e.order) for e in expected]
    source = {k[0]: row for k, row in table_state(mariadb, database, "ledger").items()}
    assert logtide_state([m for _, m in got]) == source


class _SlowHook(BaseHTTPRequestHandler):
    """Takes 0.2 s over every POST; keeps what it got."""

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(0.2)
        self.server.received.extend(json.loads(body))  # type: ignore[attr-defined]
        self.send_response(200)
        self.end_headers()


class _Ticker:
    """Commits to another table every 50 ms, so that MariaDB's landed frontier passes each read-only HIGH (a
    binlog position) at the next commit, not after two heartbeat commits (about 0.5-1 s a chunk here)."""

    def __init__(self, mariadb, database: str) -> None:
        mariadb.execute("CREATE TABLE IF NOT EXISTS tick (id INT AUTO_INCREMENT PRIMARY KEY)", database=database)
        self._stop = threading.Event()

        def run() -> None:
            while not self._stop.wait(0.05):
                mariadb.execute("INSERT INTO tick () VALUES ()", database=database)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.mark.parametrize("watermarks", ["table", "readonly"])
def test_a_slow_output_holds_a_dump_back_to_one_chunk_ahead_of_it(
    mariadb, database, make_capture, tmp_path, make_relay, dump_in_thread, watermarks
):
    populate_ledger(mariadb, database, 400)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowHook)
    server.received = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    capture = make_capture([f"{database}.*"], watermarks=watermarks)
    hook = {
        "source": "src",
        "kind": "webhook",
        "url": f"http://127.0.0.1:{server.server_port}/",
        "batch_size": 20,
        "backpressure_rows": 40,  # one chunk ahead
        "tables": [f"{database}.ledger"],
    }
    add_outputs(capture.config_path, {"slow": hook})
    capture.start().wait_running()
    relay = make_relay(capture.config_path).start()
    ticker = _Ticker(mariadb, database) if watermarks == "readonly" else None
    try:
        wait_for(lambda: read_state(capture.zone, "slow"), 30, what="the relay to start")
        dump, outcome = dump_in_thread(capture, f"{database}.ledger", chunk_size=40, delay_s=0)
        dump.join(timeout=60)
        # 400 rows at 20 a POST of 0.2 s: 4 s for the output; the dump alone takes a fraction of that
        delivered = {m["dump"]["chunk"] for m in list(server.received) if m["op"] == "r"}  # type: ignore[attr-defined]
        assert outcome and not isinstance(outcome[0], BaseException), outcome
        assert max(delivered, default=0) >= 8  # chunk 10 done: the output had delivered chunk 9, or 8 at least
        wait_for(lambda: len(server.received) >= 400, 30, what="every row")  # type: ignore[attr-defined]
        rows = [m for m in list(server.received) if m["op"] == "r"]  # type: ignore[attr-defined]
        assert sorted(m["key"]["id"] for m in rows) == list(range(1, 401))
    finally:
        if ticker is not None:
            ticker.stop()
        relay.stop()
        server.shutdown()


class _DownHook(BaseHTTPRequestHandler):
    """Answers 503 until `server.up` is set, then 200; keeps what it acknowledged."""

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if not self.server.up.is_set():  # type: ignore[attr-defined]
            self.send_response(503)
            self.end_headers()
            return
        self.server.received.extend(json.loads(body))  # type: ignore[attr-defined]
        self.send_response(200)
        self.end_headers()


def test_a_failing_webhook_holds_a_dump_back_shows_it_in_status_and_the_dump_ends_once_it_recovers(
    mariadb, database, make_capture, tmp_path, make_relay, dump_in_thread
):
    populate_ledger(mariadb, database, 200)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _DownHook)
    server.received, server.up = [], threading.Event()  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    capture = make_capture([f"{database}.*"])
    url = f"http://127.0.0.1:{server.server_port}/"
    hook = {"source": "src", "kind": "webhook", "url": url, "start": "beginning", "max_backoff_s": 1}
    port = add_outputs(capture.config_path, {"down": {**hook, "backpressure_rows": 20}})  # one chunk of 20 ahead
    capture.start().wait_running()
    relay = make_relay(capture.config_path).start()
    try:
        wait_for(lambda: read_state(capture.zone, "down"), 30, what="the relay to start")
        dump, outcome = dump_in_thread(capture, f"{database}.ledger", chunk_size=20, delay_s=0)
        config = load_config(capture.config_path)
        # the dump's record says it waits 0.5 s into its wait after chunk 2; the relay says `retrying` only
        # after its first delivery failed, which under load can come later: wait for both, not the first
        shown = wait_for(
            lambda: (
                (s := outputs_status(config, "src", capture.zone)[0])["holding_dumps"]
                and s["state"] == "retrying"
                and s
            ),
            60,  # gate.MAX_WAIT_S: a chunk waits no longer
            what="status to show the dump held back by a retrying output",
        )
        assert "HTTP 503" in shown["error"]
        labels = '{output="down",source="src"}'
        down = scrape(port)  # the relay's Prometheus metrics say the same
        assert down[f"logtide_output_retrying{labels}"] == 1 and down[f"logtide_output_retries_total{labels}"] >= 1
        assert down[f"logtide_output_holding_dumps{labels}"] == 1 and down[f"logtide_output_pending_messages{labels}"]
        assert down[f"logtide_output_delivered_total{labels}"] == 0
        chunks = len(list((capture.zone.root / "chunks").glob("*/*/*.parquet")))
        mariadb.execute("UPDATE ledger SET v = v + 1 WHERE id % 7 = 0", database=database)  # log events too
        time.sleep(2)  # down: the dump stays one chunk ahead of what the output delivered (nothing)
        assert dump.is_alive() and len(list((capture.zone.root / "chunks").glob("*/*/*.parquet"))) == chunks <= 2
        server.up.set()  # it recovers: the dump goes on and ends
        dump.join(timeout=300)  # returns when it ends: each of its 10 chunks waits for the relay
    finally:
        server.up.set()
    assert outcome and not isinstance(outcome[0], BaseException), outcome
    wait_until_landed(mariadb, capture)
    expected = [(e.lsn, e.order) for e in expected_stream(capture.zone)]
    try:
        wait_for(lambda: len(server.received) >= len(expected), 60, interval=0.2, what="every message")  # type: ignore[attr-defined]
        lag = f"logtide_output_lag_seconds{labels}"
        up = wait_for(lambda: (m := scrape(port))[lag] == 0 and m, 60, what="the relay to see it is caught up")
    finally:
        relay.stop()
        server.shutdown()
    got = list(server.received)  # type: ignore[attr-defined]
    assert up[f"logtide_output_delivered_total{labels}"] == len(got) and up[f"logtide_output_retrying{labels}"] == 0
    assert up[f"logtide_output_holding_dumps{labels}"] == 0
    assert up[f"logtide_output_dump_chunks_undelivered{labels}"] == 0
    assert [(int(m["lsn"]), m["order"]) for m in got] == expected  # refused batches came again, nothing lost
    assert logtide_state(got) == {k[0]: row for k, row in table_state(mariadb, database, "ledger").items()}
    assert outputs_status(load_config(capture.config_path), "src", capture.zone)[0]["holding_dumps"] == []


def test_a_relay_backing_off_from_a_failing_output_still_counts_as_alive_for_the_dumps_it_holds(tmp_path):
    """Backoff grows past STATE_EVERY_S (0.2 s doubling): the relay must still rewrite its state (the gate
    takes a relay silent for LIVE_S as dead and lets dumps run ahead of it). A landing zone written by the
    capture's own LogWriter, a webhook that always answers 503."""
    zone = LandingZone(tmp_path, "src")
    start = Checkpoint(Lsn(1), {"pos": 1})
    zone.write_checkpoint(start)
    writer = LogWriter(zone, start, flush_interval_s=60, max_buffer_rows=1000)
    table = TableSchema("db", "t", (Column("id", pa.int64(), "bigint"),), ("id",))
    now = datetime(2026, 1, 1, tzinfo=UTC)
    writer.add(ChangeBatch(table, "0-1-10", now, False, [Change(Lsn(10, 0), Op.CREATE, None, (1,))]))
    writer.end_transaction(TransactionEnd(Lsn(20), {"pos": 20}, now))
    writer.commit()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _DownHook)
    server.received, server.up = [], threading.Event()  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = OutputConfig(
        source="src", kind="webhook", url=f"http://127.0.0.1:{server.server_port}/", start="beginning", max_backoff_s=5
    )
    relay = Relay(zone, "mariadb", "down", config, open_output("down", "src", config))
    stop = threading.Event()
    thread = threading.Thread(target=relay.run, args=(stop,))
    thread.start()
    written, began = [], time.monotonic()
    try:
        while time.monotonic() - began < 7:  # retries at about 0.2, 0.6, 1.4, 3.0 and 6.2 s
            state = read_state(zone, "down")
            if state and (not written or state["at"] != written[-1]):
                written.append(state["at"])
            time.sleep(0.05)
        assert read_state(zone, "down")["state"] == "retrying" and relay.retries >= 4
        server.up.set()
        wait_for(lambda: server.received, 10, what="the delivery once the webhook answers")  # type: ignore[attr-defined]
    finally:
        stop.set()
        thread.join(timeout=30)
        server.shutdown()
    gaps = [b - a for a, b in itertools.pairwise(written)]
    assert max(gaps) <= STATE_EVERY_S + 0.5, gaps  # the 3.2 s backoff did not silence it


def test_a_relay_places_a_readonly_chunk_at_its_high_only_once_its_high_file_and_the_frontier_pass(tmp_path):
    """`watermarks: readonly` without servers: a landing zone written by capture's own LogWriter, a chunk file
    whose HIGH file comes later (as the dump writes them). The relay delivers the log up to the frontier and
    no chunk row while the HIGH file is missing; once it exists and the frontier passes it, the surviving
    rows come at HIGH, after the events before it (the one inside the window drops its key) and before the
    events after it."""
    zone = LandingZone(tmp_path, "src")
    start = Checkpoint(Lsn(1), {"pos": 1})
    zone.write_checkpoint(start)
    writer = LogWriter(zone, start, flush_interval_s=60, max_buffer_rows=1000)
    table = TableSchema("db", "t", (Column("id", pa.int64(), "bigint"), Column("v", pa.int64(), "bigint")), ("id",))
    now = datetime(2026, 1, 1, tzinfo=UTC)

    def commit(lsn: int, *changes: tuple[Op, tuple | None, tuple | None]) -> None:
        batch = [Change(Lsn(lsn, i), op, before, after) for i, (op, before, after) in enumerate(changes)]
        writer.add(ChangeBatch(table, f"0-1-{lsn}", now, False, batch))
        writer.end_transaction(TransactionEnd(Lsn(lsn + 1), {"pos": lsn + 1}, now))
        writer.commit()

    commit(10, (Op.CREATE, None, (1, 0)), (Op.CREATE, None, (2, 0)))  # before LOW: the chunk saw them
    low, high = Lsn(15).encode(), Lsn(25).encode()
    commit(20, (Op.UPDATE, (2, 0), (2, 5)))  # inside the window: chunk row 2 is older
    meta = ChunkMeta("d1", "db.t", 1, "L", "H", ("id",), None, None, None, True, None, 3, None, low_lsn=low)
    rows = pa.array([{"id": 1, "v": 0}, {"id": 2, "v": 0}, {"id": 3, "v": 0}], table.row_type)
    path = write_chunk(zone, table, meta, rows)  # no HIGH file yet: the dump is between file and HIGH
    server = ThreadingHTTPServer(("127.0.0.1", 0), _DownHook)
    server.received, server.up = [], threading.Event()  # type: ignore[attr-defined]
    server.up.set()  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = OutputConfig(
        source="src", kind="webhook", url=f"http://127.0.0.1:{server.server_port}/", start="beginning"
    )
    relay = Relay(zone, "mariadb", "ro", config, open_output("ro", "src", config), readonly=True)
    stop = threading.Event()
    thread = threading.Thread(target=relay.run, args=(stop,))
    thread.start()
    received = server.received  # type: ignore[attr-defined]
    try:
        wait_for(lambda: len(received) >= 3, 10, what="the log below the frontier")
        time.sleep(0.5)  # the relay polls on: still nothing of the chunk
        assert [(m["op"], m["key"]["id"]) for m in received] == [("c", 1), ("c", 2), ("u", 2)]
        write_chunk_high(path, meta, high)  # the frontier (21) is below HIGH, as the dump checks
        commit(30, (Op.UPDATE, (1, 0), (1, 7)))  # after HIGH: the frontier passes it
        wait_for(lambda: len(received) >= 6, 10, what="the chunk's rows and the event after HIGH")
    finally:
        stop.set()
        thread.join(timeout=30)
        server.shutdown()
    assert [(m["op"], m["key"]["id"]) for m in received] == [("c", 1), ("c", 2), ("u", 2), ("r", 1), ("r", 3), ("u", 1)]
    assert [(int(m["lsn"]), m["order"]) for m in received if m["op"] == "r"] == [(high, 1), (high, 3)]
    assert all(m["dump"] == {"id": "d1", "chunk": 1} for m in received if m["op"] == "r")
    assert logtide_state(received) == {1: {"id": 1, "v": 7}, 2: {"id": 2, "v": 5}, 3: {"id": 3, "v": 0}}
    assert read_state(zone, "ro")["highs"] == {"d1/db.t": 1}  # what the dump gate reads


def test_a_background_dump_stops_at_its_next_chunk_when_its_test_ends(mariadb, database, make_capture):
    """tests/integration/outputs.py BackgroundDump, as the `dump_in_thread` fixture ends it after a test (one
    that failed used to leave its dump running into the tests after it, on the same server)."""
    populate_ledger(mariadb, database, 400)
    capture = make_capture([f"{database}.*"])
    dump = BackgroundDump(capture, f"{database}.ledger", chunk_size=10, delay_s=0.2)  # 40 chunks: 8 s or more
    time.sleep(0.5)
    began = time.monotonic()
    dump.stop()
    assert not dump.thread.is_alive() and time.monotonic() - began < 3
    assert len(dump.outcome) == 1 and isinstance(dump.outcome[0], DumpCancelledError), dump.outcome


class _OkHook(BaseHTTPRequestHandler):
    """Takes every POST (a list of messages) and answers 200."""

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:  # type: ignore[attr-defined]
            self.server.received.extend(json.loads(body))  # type: ignore[attr-defined]
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")


def test_a_truncate_reaches_a_webhook_in_log_order_as_debeziums_truncate_event(
    mariadb, database, make_capture, make_relay
):
    mariadb.execute("CREATE TABLE tr (id INT PRIMARY KEY, v INT)", "CREATE TABLE other (id INT PRIMARY KEY)",
                    database=database)  # fmt: skip
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OkHook)
    server.received, server.lock = [], threading.Lock()  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    capture = make_capture([f"{database}.*"])
    url = f"http://127.0.0.1:{server.server_port}/events"
    hook = {"source": "src", "kind": "webhook", "url": url, "format": "debezium", "start": "beginning"}
    hook["tables"] = [f"{database}.tr"]
    add_outputs(capture.config_path, {"hook": hook})
    capture.start().wait_running()
    relay = make_relay(capture.config_path).start()
    mariadb.execute(
        "INSERT INTO tr VALUES (1, 1), (2, 2)",
        "INSERT INTO other VALUES (1)",
        "TRUNCATE TABLE tr",
        "TRUNCATE TABLE other",  # not the output's: not sent
        "INSERT INTO tr VALUES (2, 5)",
        database=database,
    )
    wait_until_landed(mariadb, capture)
    expected = [(e.lsn, e.order) for e in expected_stream(capture.zone, {f"{database}.tr"})]
    try:
        wait_for(lambda: len(server.received) >= len(expected), 60, interval=0.2, what="every message at the webhook")
    finally:
        relay.stop()
        server.shutdown()
    messages = server.received  # type: ignore[attr-defined]
    assert [(int(m["source"]["lsn"]), m["source"]["order"]) for m in messages] == expected
    assert [m["op"] for m in messages] == ["c", "c", "t", "c"]
    truncate = messages[2]
    assert truncate["before"] is None and truncate["after"] is None
    assert truncate["source"]["table"] == "tr" and truncate["source"]["db"] == database
    source = {k[0]: row for k, row in table_state(mariadb, database, "tr").items()}
    assert debezium_state(messages) == source == {2: {"id": 2, "v": 5}}
