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
import re
import socket
import ssl
from urllib.parse import unquote, urlsplit

from capture.log import get_logger

log = get_logger(__name__)

STREAM_NOT_FOUND = 10059  # JetStream API error code


class NatsProtocolError(Exception):
    """The server said -ERR, answered what the protocol does not allow, or lacks what publishing needs."""


# a reply on our inbox subscription (sid 1); nats-server writes the empty reply-to field as a second space
_ACK = re.compile(rb"MSG [^ \r\n]+\.(\d+) 1 +(\d+)\r\n")


def acknowledged(reply: bytes) -> bool:
    """JetStream's PubAck (`{"stream":…,"seq":…}`, maybe `"duplicate":true`): stored, or already was."""
    return b'"seq"' in reply and b'"error"' not in reply


def _refusal(reply: bytes | None, status: bytes | None) -> str | None:
    """Why JetStream did not store a message, from its reply; None when there was no reply."""
    if status is not None:
        return f"status {status.decode(errors='replace')}"  # 503: no stream takes the subject
    if reply is None:
        return None
    try:
        answer = json.loads(reply)
    except ValueError:
        return repr(reply[:200])
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
            except (OSError, NatsProtocolError, ValueError) as exc:  # named by host and port, never credentials
                where = urlsplit(url.strip() if "://" in url else f"nats://{url.strip()}")
                errors.append(f"{where.hostname}:{where.port or 4222}: {type(exc).__name__}: {exc}")
        else:
            raise ConnectionError("; ".join(errors) or "no NATS server url")

    def _open(self, url: str, name: str) -> socket.socket:
        parts = urlsplit(url if "://" in url else f"nats://{url}")
        host, port = parts.hostname or "127.0.0.1", parts.port or 4222
        sock: socket.socket = socket.create_connection((host, port), timeout=self.timeout_s)
        self._buffer, self._at = b"", 0  # nothing left from a server tried before
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

    def publish(self, messages: list[tuple[bytes, bytes, bytes]]) -> tuple[int, str | None]:
        """Write (subject, message id, payload) in order, each asking for its own reply, then read the
        replies until every one came or `timeout_s` passed without any: how many, from the first, JetStream
        acknowledged (stored, or already had: a duplicate), and why the next one was not (None: all were).
        The socket's errors propagate (the connection is then unusable)."""
        replies, statuses, why = self._exchange(messages)
        for i in range(len(messages)):
            reply = replies.get(i)
            if reply is None or not acknowledged(reply):
                refusal = _refusal(reply, statuses.get(i))
                return i, why if refusal is None else f"JetStream refused {messages[i][1].decode()}: {refusal}"
        return len(messages), None

    def request(self, subject: str, payload: bytes) -> bytes:
        """One request/reply (the JetStream API); raises when nothing answers in time or the answer is a status."""
        replies, statuses, why = self._exchange([(subject.encode(), None, payload)])
        if 0 in statuses:
            raise NatsProtocolError(f"{subject}: status {statuses[0].decode(errors='replace')}")
        if 0 not in replies:
            raise TimeoutError(f"{subject}: {why}")
        return replies[0]

    def _exchange(
        self, messages: list[tuple[bytes, bytes | None, bytes]]
    ) -> tuple[dict[int, bytes], dict[int, bytes], str | None]:
        """Replies (index -> body), header statuses of the HMSG replies (index -> b"503"), why some are missing."""
        first = self._next
        self._next += len(messages)
        inbox = self._inbox.encode()
        parts = []
        for i, (subject, msg_id, payload) in enumerate(messages, first):
            if msg_id is None:
                parts.append(b"PUB %s %s.%d %d\r\n%s\r\n" % (subject, inbox, i, len(payload), payload))
            else:  # the header block is NATS/1.0\r\nNats-Msg-Id: <id>\r\n\r\n: 27 bytes and the id
                size = 27 + len(msg_id)
                parts.append(
                    b"HPUB %s %s.%d %d %d\r\nNATS/1.0\r\nNats-Msg-Id: %s\r\n\r\n%s\r\n"
                    % (subject, inbox, i, size, size + len(payload), msg_id, payload)
                )
        self._sock.sendall(b"".join(parts))
        replies: dict[int, bytes] = {}
        statuses: dict[int, bytes] = {}
        prefix_len = len(inbox) + 1
        match = _ACK.match
        try:
            while len(replies) + len(statuses) < len(messages):
                found = match(self._buffer, self._at)  # the usual reply, parsed in one step
                if found is not None:
                    start = found.end()
                    end = start + int(found[2])
                    if end + 2 <= len(self._buffer):
                        replies[int(found[1]) - first] = self._buffer[start:end]
                        self._at = end + 2
                        continue
                line = self._line()
                if line.startswith(b"MSG "):  # MSG <subject> <sid> <size>
                    fields = line.split(b" ")
                    replies[int(fields[1][prefix_len:]) - first] = self._body(int(fields[-1]))
                elif line.startswith(b"HMSG "):  # HMSG <subject> <sid> <header size> <total size>
                    fields = line.split(b" ")
                    body = self._body(int(fields[-1]))
                    status = body[: int(fields[-2])].split(b"\r\n", 1)[0][9:].strip()  # NATS/1.0 503
                    index = int(fields[1][prefix_len:]) - first
                    if status:
                        statuses[index] = status
                    else:
                        replies[index] = body[int(fields[-2]) :]
                elif line not in (b"PONG", b"+OK") and not line.startswith(b"INFO "):
                    raise NatsProtocolError(f"unexpected {line[:200]!r}")
        except TimeoutError:
            return replies, statuses, f"no acknowledgement within {self.timeout_s:g} s"
        return replies, statuses, None

    def ensure_stream(self, stream: str, subjects: list[str], duplicate_window_s: float) -> None:
        """Create `stream` (file storage, limits retention: JetStream's defaults) unless it exists."""
        info = json.loads(self.request(f"$JS.API.STREAM.INFO.{stream}", b"") or b"{}")
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
        created = json.loads(self.request(f"$JS.API.STREAM.CREATE.{stream}", json.dumps(config).encode()))
        if created.get("error"):
            raise NatsProtocolError(f"cannot create stream {stream}: {created['error']}")
        log.info("output.stream_created", stream=stream, subjects=subjects)
