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
import urllib.error
import urllib.request
from typing import Any, Protocol

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
    """Publishes to a JetStream stream, one subject per table (`<prefix>.<source>.<db>.<table>`), the
    message id (`Nats-Msg-Id`: source and LSN) letting JetStream drop the duplicates of a retry; a
    message counts only once JetStream acknowledged it (stored)."""

    def __init__(self, name: str, source: str, config: OutputConfig) -> None:
        import nats  # the optional client: only a NATS output needs it

        self._nats = nats
        self.name, self.source, self.config = name, source, config
        self.last_error: str | None = None
        self._loop = asyncio.new_event_loop()
        self._nc: Any = None
        self._js: Any = None
        self._subjects: dict[tuple[str, str], str] = {}  # (db, table) -> its subject

    def _run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(coro)

    async def _connect(self) -> None:
        if self._nc is not None and self._nc.is_connected:
            return
        if self._nc is not None:
            await self._close()

        async def on_error(exc: Exception) -> None:  # one line instead of the client's traceback
            log.warning("output.nats_error", output=self.name, error=f"{type(exc).__name__}: {exc}")

        self._nc = await self._nats.connect(
            servers=self.config.url.split(","),
            connect_timeout=self.config.timeout_s,
            error_cb=on_error,
            # no buffering across a reconnect: what JetStream stored is then always a prefix of what was
            # sent, so a retry (deduplicated by message id) never lands behind a later message
            allow_reconnect=False,
        )
        self._js = self._nc.jetstream(timeout=self.config.timeout_s)
        if self.config.create_stream:
            from nats.js.api import StreamConfig
            from nats.js.errors import NotFoundError

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
        """Publish up to `max_inflight` messages before awaiting their acknowledgements (each with its own
        reply subject, so an ack names its message); count the acknowledged ones from the first on."""
        await self._connect()
        done = 0
        window = max(1, self.config.max_inflight)
        for start in range(0, len(messages), window):
            group = messages[start : start + window]
            acked = await self._window(group)
            done += acked
            if acked < len(group):
                return done
        return done

    async def _window(self, group: list[Message]) -> int:
        nc = self._nc
        prefix = nc.new_inbox()
        replies: dict[int, bytes] = {}
        complete = asyncio.Event()

        async def on_ack(msg: Any) -> None:
            replies[int(msg.subject.rsplit(".", 1)[1])] = msg.data
            if len(replies) == len(group):
                complete.set()

        sub = await nc.subscribe(prefix + ".*", cb=on_ack)
        try:
            for i, m in enumerate(group):
                await nc.publish(self.subject(m), m.payload, reply=f"{prefix}.{i}", headers={"Nats-Msg-Id": m.msg_id})
            await nc.flush(timeout=self.config.timeout_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(complete.wait(), self.config.timeout_s)
        finally:
            await sub.unsubscribe()
        for i in range(len(group)):
            reply = replies.get(i)
            if reply is None:
                self.last_error = f"no acknowledgement within {self.config.timeout_s:g} s"
            else:
                if b'"error"' not in reply and b'"seq"' in reply:  # a plain ack, without parsing it
                    continue
                answer = json.loads(reply)
                if "error" not in answer and "seq" in answer:
                    continue
                self.last_error = f"JetStream refused {group[i].msg_id}: {answer.get('error', answer)}"
            log.warning("output.publish_failed", output=self.name, error=self.last_error)
            return i
        return len(group)

    def deliver(self, messages: list[Message]) -> int:
        try:
            return self._run(self._publish(messages))
        except Exception as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("output.publish_failed", output=self.name, error=self.last_error)
            return 0

    async def _close(self) -> None:
        with contextlib.suppress(Exception):  # closing a broken connection: nothing to keep
            await self._nc.close()
        self._nc = self._js = None

    def close(self) -> None:
        if self._nc is not None:
            self._run(self._close())
        self._loop.close()


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
