"""The outputs: one small interface, `deliver(messages) -> how many from the start were acknowledged`.

An output never drops a message: what it does not acknowledge the relay offers again (after a backoff),
from the first unacknowledged one, so messages arrive in order, and a retry of one that did arrive but
whose acknowledgement was lost is a duplicate recognisable by its LSN (JetStream drops it by message id).
"""

from __future__ import annotations

import asyncio
import contextlib
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

    def _run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(coro)

    async def _connect(self) -> None:
        if self._nc is not None and self._nc.is_connected:
            return
        if self._nc is not None:
            await self._close()
        self._nc = await self._nats.connect(
            servers=self.config.url.split(","),
            connect_timeout=self.config.timeout_s,
            allow_reconnect=True,
            max_reconnect_attempts=-1,
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
        return ".".join(
            [self.config.subject_prefix, subject_token(self.source), subject_token(e.schema), subject_token(e.table)]
        )

    async def _publish(self, messages: list[Message]) -> int:
        await self._connect()
        done = 0
        window = max(1, self.config.max_inflight)
        for start in range(0, len(messages), window):
            group = messages[start : start + window]
            results = await asyncio.gather(
                *(
                    self._js.publish(
                        self.subject(m), m.payload, timeout=self.config.timeout_s, headers={"Nats-Msg-Id": m.msg_id}
                    )
                    for m in group
                ),
                return_exceptions=True,
            )
            for result in results:
                if isinstance(result, BaseException):
                    self.last_error = f"{type(result).__name__}: {result}"
                    log.warning("output.publish_failed", output=self.name, error=self.last_error)
                    return done
                done += 1
        return done

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
