"""Publishing to JetStream on the NATS wire protocol itself: one blocking socket, a window of messages
written in one go, their acknowledgements read back and matched by reply subject.

Why not nats-py here: it builds, queues and dispatches a Python message object and callback for every
publish and every acknowledgement (about 40% of the relay's time, profiled), and its asyncio loop runs
inside a synchronous relay anyway. The protocol needed is small (INFO, CONNECT, PING/PONG, SUB, HPUB, MSG,
HMSG, -ERR: https://docs.nats.io/reference/reference-protocols/nats-protocol), and a connection is never
reused after an error, so what the server stored is always a prefix of what was written on it.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from capture.log import get_logger

log = get_logger(__name__)

STREAM_NOT_FOUND = 10059  # JetStream API error code


class NatsProtocolError(Exception):
    """The server said -ERR, answered what the protocol does not allow, or lacks what publishing needs."""


@dataclass(frozen=True, slots=True)
class Reply:
    data: bytes
    status: bytes = b""  # the header status line of an HMSG reply (e.g. b"503" when no stream has the subject)

    @property
    def acknowledged(self) -> bool:
        """JetStream's PubAck (`{"stream":…,"seq":…}`, maybe `"duplicate":true`): stored, or already was."""
        return not self.status and b'"seq"' in self.data and b'"error"' not in self.data

    def why_not(self) -> str:
        if self.status:
            return f"status {self.status.decode(errors='replace')}"
        try:
            answer = json.loads(self.data)
        except ValueError:
            return repr(self.data[:200])
        return str(answer.get("error", answer)) if isinstance(answer, dict) else repr(answer)


class JetStreamConnection:
    """A connection to the first reachable server of `urls` (nats:// or tls://, with user:password@ or
    token@ when the server wants them). Not thread-safe; closed, not reused, after any error."""

    def __init__(self, urls: list[str], timeout_s: float, name: str) -> None:
        self.timeout_s = timeout_s
        self._inbox = f"_INBOX.{os.urandom(12).hex()}"
        self._buffer = b""  # read from the server; parsed up to _at
        self._at = 0
        self._next = 0  # request number within this connection (reply subject suffix)
        errors = []
        for url in urls:
            try:
                self._sock = self._open(url.strip(), name)
                break
            except (OSError, NatsProtocolError) as exc:
                errors.append(f"{url.strip()}: {type(exc).__name__}: {exc}")
        else:
            raise ConnectionError("; ".join(errors) or "no NATS server url")

    def _open(self, url: str, name: str) -> socket.socket:
        parts = urlsplit(url if "://" in url else f"nats://{url}")
        host, port = parts.hostname or "127.0.0.1", parts.port or 4222
        sock: socket.socket = socket.create_connection((host, port), timeout=self.timeout_s)
        try:
            self._sock = sock
            info = json.loads(self._line(expect=b"INFO ")[5:])
            if parts.scheme == "tls" or info.get("tls_required"):
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
                self._sock = sock
            if not info.get("headers"):
                raise NatsProtocolError("the server does not support headers (Nats-Msg-Id): NATS 2.2 or later needed")
            connect: dict[str, object] = {
                "verbose": False,
                "pedantic": False,
                "headers": True,
                "no_responders": True,
                "protocol": 1,
                "lang": "python-logtide",
                "version": "1",
                "name": name,
            }
            if parts.username and parts.password is not None:
                connect["user"], connect["pass"] = unquote(parts.username), unquote(parts.password)
            elif parts.username:
                connect["auth_token"] = unquote(parts.username)
            sock.sendall(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")
            self._line(expect=b"PONG")
            sock.sendall(f"SUB {self._inbox}.* 1\r\n".encode())
            return sock
        except BaseException:
            sock.close()
            raise

    def close(self) -> None:
        self._sock.close()

    def _fill(self) -> None:
        data = self._sock.recv(1 << 20)
        if not data:
            raise ConnectionError("the NATS server closed the connection")
        self._buffer = self._buffer[self._at :] + data  # what is parsed is dropped once a read, not once a line
        self._at = 0

    def _line(self, expect: bytes = b"") -> bytes:
        """The next protocol line, answering PINGs on the way; `expect`: what it must start with."""
        while True:
            end = self._buffer.find(b"\r\n", self._at)
            if end < 0:
                self._fill()
                continue
            line = self._buffer[self._at : end]
            self._at = end + 2
            if line == b"PING":
                self._sock.sendall(b"PONG\r\n")
                continue
            if line.startswith(b"-ERR"):
                raise NatsProtocolError(line[5:].decode(errors="replace").strip("' "))
            if expect and not line.startswith(expect):
                if line == b"+OK" or line.startswith(b"INFO "):
                    continue
                raise NatsProtocolError(f"expected {expect.decode()}, got {line[:200]!r}")
            return line

    def _body(self, size: int) -> bytes:
        while len(self._buffer) - self._at < size + 2:
            self._fill()
        body = self._buffer[self._at : self._at + size]
        self._at += size + 2
        return body

    def publish(self, messages: list[tuple[str, str | None, bytes]]) -> tuple[dict[int, Reply], str | None]:
        """Write (subject, message id or None, payload) in order, each asking for its own reply, then read the
        replies until every one came or `timeout_s` passed without any: index -> reply, and why some are
        missing (None when none is). The socket's errors propagate (the connection is then unusable)."""
        first = self._next
        self._next += len(messages)
        parts = []
        for i, (subject, msg_id, payload) in enumerate(messages, first):
            if msg_id is None:
                parts.append(f"PUB {subject} {self._inbox}.{i} {len(payload)}\r\n".encode())
            else:
                header = f"NATS/1.0\r\nNats-Msg-Id: {msg_id}\r\n\r\n".encode()
                size = len(header)
                parts.append(f"HPUB {subject} {self._inbox}.{i} {size} {size + len(payload)}\r\n".encode())
                parts.append(header)
            parts.append(payload)
            parts.append(b"\r\n")
        self._sock.sendall(b"".join(parts))
        replies: dict[int, Reply] = {}
        prefix_len = len(self._inbox) + 1
        try:
            while len(replies) < len(messages):
                line = self._line()
                if line.startswith(b"MSG "):  # MSG <subject> <sid> <size>
                    fields = line.split(b" ")
                    body = self._body(int(fields[-1]))
                    replies[int(fields[1][prefix_len:]) - first] = Reply(body)
                elif line.startswith(b"HMSG "):  # HMSG <subject> <sid> <header size> <total size>
                    fields = line.split(b" ")
                    body = self._body(int(fields[-1]))
                    status_line = body[: int(fields[-2])].split(b"\r\n", 1)[0]  # NATS/1.0 503
                    status = status_line[9:].strip() or b"?"
                    replies[int(fields[1][prefix_len:]) - first] = Reply(body[int(fields[-2]) :], status)
                elif line not in (b"PONG", b"+OK") and not line.startswith(b"INFO "):
                    raise NatsProtocolError(f"unexpected {line[:200]!r}")
        except TimeoutError:
            return replies, f"no acknowledgement within {self.timeout_s:g} s"
        return replies, None

    def request(self, subject: str, payload: bytes) -> Reply:
        """One request/reply (the JetStream API); raises TimeoutError when nothing answers in time."""
        replies, why = self.publish([(subject, None, payload)])
        if 0 not in replies:
            raise TimeoutError(f"{subject}: {why}")
        return replies[0]

    def ensure_stream(self, stream: str, subjects: list[str], duplicate_window_s: float) -> None:
        """Create `stream` (file storage, limits retention: JetStream's defaults) unless it exists."""
        info = json.loads(self.request(f"$JS.API.STREAM.INFO.{stream}", b"").data or b"{}")
        error = info.get("error")
        if not error:
            return
        if error.get("err_code") != STREAM_NOT_FOUND:
            raise NatsProtocolError(f"stream {stream}: {error}")
        config = {
            "name": stream,
            "subjects": subjects,
            "duplicate_window": int(duplicate_window_s * 1e9),  # nanoseconds
            "storage": "file",
            "retention": "limits",
            "num_replicas": 1,
        }
        created = json.loads(self.request(f"$JS.API.STREAM.CREATE.{stream}", json.dumps(config).encode()).data)
        if created.get("error"):
            raise NatsProtocolError(f"cannot create stream {stream}: {created['error']}")
        log.info("output.stream_created", stream=stream, subjects=subjects)
