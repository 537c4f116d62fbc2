"""The NATS output writes a fast-ingest batch as HPUB frames it builds itself: they must be the bytes nats-py's
own publish writes for the same message (subject, reply subject, `Nats-Msg-Id` header, payload)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from nats.aio.client import Client
from nats.errors import MaxPayloadError

from capture.config import OutputConfig
from capture.output.formats import Encoder
from capture.output.interleave import Event
from capture.output.sinks import _PIECES, NatsOutput


def nats_py_frame(subject: str, reply: str, payload: bytes, msg_id: str) -> bytes:
    """What nats-py 2.16's `publish(subject, payload, reply=, headers={"Nats-Msg-Id": msg_id})` queues."""
    client, sent = Client(), []

    async def capture(cmd: bytes, priority: bool = False) -> None:
        sent.append(bytes(cmd))

    client._send_command = capture  # type: ignore[method-assign]
    asyncio.run(client._send_publish(subject, reply, payload, len(payload), {"Nats-Msg-Id": msg_id}))
    return sent[0]


def output(source: str, max_payload: int = 1 << 20) -> NatsOutput:
    out = NatsOutput.__new__(NatsOutput)  # no event loop or connection: only the framing is tested
    out.source, out.config = source, OutputConfig(source=source, kind="nats", url="nats://127.0.0.1:1")
    out._subjects, out._nc = {}, SimpleNamespace(max_payload=max_payload)
    return out


def events() -> list[Event]:
    return [
        Event("shop", "orders", 100, "c", None, {"id": 1, "note": "a\r\nb ü"}, ("id",), "7"),
        Event("shop", "order lines", 200, "u", {"id": 2}, {"id": 2, "q": 3}, ("id",), "8"),
        Event("shop", "orders", 300, "r", None, {"id": 3}, ("id",), None, order=4, dump_id="d1", chunk=2),
    ]


def frames(pieces: list[bytes]) -> list[bytes]:
    """`_frames`' pieces joined a message (`_PIECES` each)."""
    return [b"".join(pieces[i : i + _PIECES]) for i in range(0, len(pieces), _PIECES)]


# "shop": the f-string path; the others (white space, a line break, not ASCII) `_checked_frames`
@pytest.mark.parametrize("source", ["shop", "a b", " odd\r\nname ", "tab\tend", "shöp"])
def test_frames_are_what_nats_py_publishes(source: str) -> None:
    out = output(source)
    encode = Encoder("logtide", source, "mysql")
    messages = [encode(e) for e in events()]
    prefix = "_INBOX.abc.0123456789abcdef.500.fail."
    ops = ["0", "1", "2"]  # start, append, commit
    for seq, (frame, message, op) in enumerate(
        zip(frames(out._frames(messages, prefix)), messages, ops, strict=True), 1
    ):
        reply = f"{prefix}{seq}.{op}.$FI"
        assert frame == nats_py_frame(out.subject(message), reply, message.payload, message.msg_id)


@pytest.mark.parametrize("size", [1, 2, 3, 500])
def test_the_fast_frames_are_the_checked_ones_for_batches_of_any_size(size: int) -> None:
    out = output("shop")
    encode = Encoder("logtide", "shop", "mysql")
    messages = [encode(events()[n % 3]) for n in range(size)]
    prefix = "_INBOX.abc.0123456789abcdef.500.fail."
    assert out._frames(messages, prefix) == out._checked_frames(messages, prefix)
    assert len(out._frames(messages, prefix)) == _PIECES * size


def test_a_message_over_the_servers_limit_is_refused_as_nats_py_does() -> None:
    out = output("shop", max_payload=40)
    messages = [Encoder("logtide", "shop", "mysql")(e) for e in events()]
    with pytest.raises(MaxPayloadError):
        out._frames(messages, "_INBOX.x.y.500.fail.")
