"""The outputs: one small interface, `deliver(messages) -> how many from the start were acknowledged`.

An output never drops a message: what it does not acknowledge the relay offers again (after a backoff),
from the first unacknowledged one, so messages arrive in order, and a retry of one that did arrive but
whose acknowledgement was lost is a duplicate recognisable by its LSN (JetStream drops it by message id).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import urllib.error
import urllib.request
from typing import Any, Protocol
from urllib.parse import urlsplit

import nats
from nats.js.api import StreamConfig
from nats.js.errors import NotFoundError

from capture.config import OutputConfig
from capture.log import get_logger
from capture.output.formats import Message

log = get_logger(__name__)


class Output(Protocol):
    last_error: str | None  # why the last delivery was not (wholly) acknowledged

    def deliver(self, messages: list[Message]) -> int:
        """Send `messages` in order; return how many, from the first, are acknowledged (the rest: retry)."""

    def close(self) -> None: ...


_TOKEN = re.compile(r"[^A-Za-z0-9_-]")


def subject_token(name: str) -> str:
    """A NATS subject token for a database or table name (no '.', '*', '>' or whitespace)."""
    return _TOKEN.sub("_", name) or "_"


class NatsOutput:
    """Publishes to a JetStream stream through nats-py, one subject per table
    (`<prefix>.<source>.<db>.<table>`), the message id (`Nats-Msg-Id`: source and LSN) letting JetStream drop
    the duplicates of a retry; a message counts only once JetStream acknowledged it (stored). A window of
    `max_inflight` messages is published before any acknowledgement is awaited.

    nats-py's event loop runs in a thread of its own, so a window's acknowledgements are read (and its
    bytes written) while the relay reads and encodes the next one: `send` publishes a window and returns,
    `collect` waits for its acknowledgements (the relay's pipeline); `deliver` is both, window by window."""

    def __init__(self, name: str, source: str, config: OutputConfig) -> None:
        self.name, self.source, self.config = name, source, config
        self.last_error: str | None = None
        self.window = max(1, config.max_inflight)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"nats-{name}", daemon=True)
        self._thread.start()
        self._sent: list[Message] = []  # the window published by `send`, its acknowledgements not collected
        self._nc: Any = None
        self._js: Any = None
        self._subjects: dict[tuple[str, str], str] = {}  # (db, table) -> its subject
        self._inbox = ""  # `<inbox>.`: a message's reply subject is this and its place in the window
        self._replies: list[str] = []
        self._acks: dict[int, Any] = {}  # the current window's acknowledgements (nats-py Msg) by place
        self._expected = 0
        self._complete = asyncio.Event()
        self._secrets = [p for p in (urlsplit(u.strip()).password for u in config.url.split(",")) if p]

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _why(self, exc: BaseException) -> str:
        """The error as one line, without any password from the URLs."""
        text = f"{type(exc).__name__}: {exc}"
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    async def _connect(self) -> None:
        if self._nc is not None:
            return

        async def on_error(exc: Exception) -> None:  # one line instead of the client's traceback
            log.warning("output.nats_error", output=self.name, error=self._why(exc))

        nc = await nats.connect(
            servers=[u.strip() for u in self.config.url.split(",")],
            connect_timeout=self.config.timeout_s,
            error_cb=on_error,
            name=f"logtide-relay-{self.name}",
            # no buffering across a reconnect: what JetStream stored is then always a prefix of what was
            # sent, so a retry (deduplicated by message id) never lands behind a later message
            allow_reconnect=False,
            # subjects are built of subject_token()s, replies of the client's own inbox: nothing to check
            skip_subject_validation=True,
        )
        self._nc, self._js = nc, nc.jetstream(timeout=self.config.timeout_s)
        self._inbox = nc.new_inbox() + "."
        self._replies = [f"{self._inbox}{i}" for i in range(self.window)]  # built once a connection
        await nc.subscribe(self._inbox + "*", cb=self._on_ack)  # every acknowledgement of this connection
        if self.config.create_stream:
            try:
                await self._js.stream_info(self.config.stream)
            except NotFoundError:
                await self._js.add_stream(
                    StreamConfig(
                        name=self.config.stream,
                        subjects=[f"{self.config.subject_prefix}.>"],
                        duplicate_window=self.config.duplicate_window_s,
                    )
                )

    def subject(self, message: Message) -> str:
        e = message.event
        subject = self._subjects.get((e.schema, e.table))
        if subject is None:
            tokens = [self.config.subject_prefix, subject_token(self.source), subject_token(e.schema)]
            subject = self._subjects[(e.schema, e.table)] = ".".join([*tokens, subject_token(e.table)])
        return subject

    async def _publish(self, messages: list[Message]) -> int:
        """Publish in windows of `max_inflight`; count the acknowledged ones from the first on."""
        done = 0
        for start in range(0, len(messages), self.window):
            group = messages[start : start + self.window]
            await self._send(group)
            acked = await self._acknowledged(group)
            done += acked
            if acked < len(group):
                return done
        return done

    async def _on_ack(self, msg: Any) -> None:
        self._acks[int(msg.subject[len(self._inbox) :])] = msg
        if len(self._acks) >= self._expected:
            self._complete.set()

    async def _send(self, group: list[Message]) -> None:
        """All of `group` published, each with its own reply subject, before any acknowledgement is awaited.
        nats-py's core publish and one subscription for the acknowledgements: its `js.publish` (a request
        each) costs three times the CPU a message, and 2.16's `publish_async` never completes the future of
        a message JetStream refuses."""
        await self._connect()
        publish, subject = self._nc.publish, self.subject
        self._acks, self._expected = {}, len(group)
        self._complete.clear()
        for m, reply in zip(group, self._replies, strict=False):  # group: at most a window
            await publish(subject(m), m.payload, reply=reply, headers={"Nats-Msg-Id": m.msg_id})

    async def _acknowledged(self, group: list[Message]) -> int:
        """How many of the published `group` are acknowledged, from the first on: the count stops at the
        first message not acknowledged (refused, or none within `timeout_s`), `last_error` saying why."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._complete.wait(), self.config.timeout_s)
        for i, m in enumerate(group):
            reply = self._acks.get(i)
            if reply is None:
                self.last_error = f"no acknowledgement for {m.msg_id} within {self.config.timeout_s:g} s"
                return i
            if b'"error"' not in reply.data and b'"seq"' in reply.data:  # a plain ack, without parsing it
                continue
            self.last_error = f"JetStream refused {m.msg_id}: {refusal(reply)}"
            return i
        return len(group)

    def deliver(self, messages: list[Message]) -> int:
        """A connection is closed after any error (a new one next time), never reused: no later message
        lands behind a retry, and no late acknowledgement is mistaken for a new one."""
        if self._sent:
            raise RuntimeError("deliver() while a window sent by send() is not collected")
        try:
            done = self._run(self._publish(messages))
            if done == len(messages):
                return done
        except Exception as exc:
            self.last_error, done = self._why(exc), 0
        return self._failed(done)

    def send(self, messages: list[Message]) -> bool:
        """Publish one window (at most `max_inflight` messages) without waiting for its acknowledgements
        (`collect` counts them); False when it could not be published (`last_error`; nothing counts)."""
        if self._sent:
            raise RuntimeError("send() while a window sent before is not collected")
        if not messages or len(messages) > self.window:
            raise ValueError(f"send() takes 1 to {self.window} messages, not {len(messages)}")
        try:
            self._run(self._send(messages))
        except Exception as exc:
            self.last_error = self._why(exc)
            self._failed(0)
            return False
        self._sent = messages
        return True

    def collect(self) -> int:
        """How many of the window `send` published are acknowledged, from the first on."""
        group, self._sent = self._sent, []
        if not group:
            return 0
        try:
            done = self._run(self._acknowledged(group))
            if done == len(group):
                return done
        except Exception as exc:
            self.last_error, done = self._why(exc), 0
        return self._failed(done)

    def _failed(self, done: int) -> int:
        log.warning("output.publish_failed", output=self.name, error=self.last_error)
        self._run(self._close())
        return done

    async def _close(self) -> None:
        if self._nc is not None:
            with contextlib.suppress(Exception):  # closing a broken connection: nothing to keep
                await self._nc.close()
        self._nc = self._js = None

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._sent = []
        self._run(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


def refusal(reply: Any) -> str:
    """Why JetStream's reply to a publish is no acknowledgement: its error, or a status without a body
    (503: no stream takes the subject)."""
    if not reply.data:
        headers = reply.headers or {}
        return f"status {headers.get('Status', '?')} {headers.get('Description', '')}".strip()
    try:
        answer = json.loads(reply.data)
    except ValueError:
        return repr(reply.data[:200])
    error = answer.get("error", answer) if isinstance(answer, dict) else answer
    return str(error.get("description", error) if isinstance(error, dict) else error)


class WebhookOutput:
    """POSTs each batch as one JSON array (the messages in order); any 2xx acknowledges the whole batch,
    anything else (status, timeout, refused connection) acknowledges none. Headers: the batch's first and
    last message ids, also as `Idempotency-Key`."""

    def __init__(self, name: str, source: str, config: OutputConfig) -> None:
        self.name, self.source, self.config = name, source, config
        self.last_error: str | None = None

    def deliver(self, messages: list[Message]) -> int:
        if not messages:
            return 0
        body = b"[" + b",".join(m.payload for m in messages) + b"]"
        first, last = messages[0].msg_id, messages[-1].msg_id
        headers = {
            "Content-Type": "application/json",
            "X-Logtide-First": first,
            "X-Logtide-Last": last,
            "Idempotency-Key": f"{first}..{last}",
            **self.config.headers,
        }
        request = urllib.request.Request(self.config.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.config.timeout_s) as response:
                response.read()
                if 200 <= response.status < 300:
                    return len(messages)
                error = f"HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            error = f"HTTP {exc.code}"
        except (OSError, TimeoutError) as exc:  # URLError, refused, reset, timed out
            error = f"{type(exc).__name__}: {exc}"
        self.last_error = error
        log.warning("output.post_failed", output=self.name, messages=len(messages), error=error)
        return 0

    def close(self) -> None:
        pass


def open_output(name: str, source: str, config: OutputConfig) -> Output:
    if config.kind == "nats":
        return NatsOutput(name, source, config)
    return WebhookOutput(name, source, config)
