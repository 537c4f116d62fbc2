"""The outputs: one small interface, `deliver(messages) -> how many from the start were acknowledged`.

An output never drops a message: what it does not acknowledge the relay offers again (after a backoff),
from the first unacknowledged one, so messages arrive in order, and a retry of one that did arrive but
whose acknowledgement was lost is a duplicate recognisable by its LSN (JetStream drops it by message id).
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from typing import Protocol

from capture.config import OutputConfig
from capture.log import get_logger
from capture.output.formats import Message
from capture.output.jetstream import JetStreamConnection, NatsProtocolError

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
    message counts only once JetStream acknowledged it (stored). Up to `max_inflight` publishes are
    written before their acknowledgements are read (capture/output/jetstream.py: the wire protocol)."""

    def __init__(self, name: str, source: str, config: OutputConfig) -> None:
        self.name, self.source, self.config = name, source, config
        self.last_error: str | None = None
        self._conn: JetStreamConnection | None = None
        self._subjects: dict[tuple[str, str], bytes] = {}  # (db, table) -> its subject

    def _connect(self) -> JetStreamConnection:
        if self._conn is None:
            conn = JetStreamConnection(self.config.url.split(","), self.config.timeout_s, f"logtide-relay-{self.name}")
            try:
                if self.config.create_stream:
                    conn.ensure_stream(
                        self.config.stream, [f"{self.config.subject_prefix}.>"], self.config.duplicate_window_s
                    )
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def subject(self, message: Message) -> bytes:
        e = message.event
        subject = self._subjects.get((e.schema, e.table))
        if subject is None:
            tokens = [self.config.subject_prefix, subject_token(self.source), subject_token(e.schema)]
            subject = self._subjects[(e.schema, e.table)] = ".".join([*tokens, subject_token(e.table)]).encode()
        return subject

    def deliver(self, messages: list[Message]) -> int:
        """Publish in windows of `max_inflight`; count the acknowledged ones from the first on. A connection
        is closed after any error (a new one next time), never reused: no later message lands behind a retry."""
        done = 0
        window = max(1, self.config.max_inflight)
        try:
            conn = self._connect()
            for start in range(0, len(messages), window):
                group = messages[start : start + window]
                acked, why = conn.publish([(self.subject(m), m.msg_id.encode(), m.payload) for m in group])
                done += acked
                if why is not None:
                    self.last_error = why
                    log.warning("output.publish_failed", output=self.name, error=why)
                    self.close()
                    return done
            return done
        except (OSError, NatsProtocolError, ValueError) as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("output.publish_failed", output=self.name, error=self.last_error)
            self.close()
            return done

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


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
