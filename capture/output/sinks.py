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
import uuid
from collections import deque
from operator import itemgetter
from typing import Any, Protocol
from urllib.parse import urlsplit

import nats
from nats import errors as nats_errors
from nats.js.api import StreamConfig
from nats.js.errors import NotFoundError

from capture.config import OutputConfig
from capture.log import get_logger
from capture.output.formats import Message

log = get_logger(__name__)


class Output(Protocol):
    """Where a relay delivers. An output reads each message's payload and id, and may read its `event`;
    one whose class sets `event_images = False` reads no image of it (`before`, `after`: only table, LSN,
    order, commit time), so the relay may hand it events whose images it never built (README, Outputs)."""

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
    `collect` waits for its acknowledgements (the relay's pipeline); `deliver` is both, window by window.
    With fast ingest a second window may be sent before the first is collected (`depth` 2): nats-py's
    thread builds its frames at once and starts it the moment the first is wholly stored, without waiting
    for the relay's thread (which may be holding the GIL); if the first is not wholly stored, nothing of the
    second goes out and its `collect` counts 0, so what JetStream stored stays a prefix of what was sent.

    Fast ingest (nats-server 2.14+, ADR-50; `fast_ingest`, on by default): a window goes out as one fast
    batch with gap mode `fail`, so JetStream stores it in order without gaps and acknowledges it every up to
    500 messages (a flow acknowledgement: all up to that batch sequence stored) and once at its commit (the
    last message), instead of once a message. Message ids deduplicate inside such a batch as outside (a
    duplicate is skipped, the batch goes on), so a retry after a kill stores no duplicates and what is stored
    stays a prefix of what was sent. An older server, or a stream without `allow_batched`: per-message
    acknowledgements, as before."""

    event_images = False  # reads the payload, the id and the event's table only

    def __init__(self, name: str, source: str, config: OutputConfig) -> None:
        self.name, self.source, self.config = name, source, config
        self.last_error: str | None = None
        self.window = max(1, config.max_inflight)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"nats-{name}", daemon=True)
        self._thread.start()
        # the windows published by `send`, oldest first, their acknowledgements not collected, each with its
        # fast batch (a concurrent future of nats-py's thread) or None (an acknowledgement a message)
        self._sent: deque[tuple[list[Message], Any]] = deque()
        self._nc: Any = None
        self._js: Any = None
        self._subjects: dict[tuple[str, str], str] = {}  # (db, table) -> its subject
        self._inbox = ""  # `<inbox>.`: a message's reply subject is this and its place in the window
        self._replies: list[str] = []
        self._acks: dict[int, Any] = {}  # the current window's acknowledgements (nats-py Msg) by place
        self._expected = 0
        self._complete = asyncio.Event()
        self.fast_ingest = False  # this connection publishes fast-ingest batches (decided in _connect)
        self._batch: _FastBatch | None = None  # the fast batch in flight
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
        await nc.subscribe(self._inbox + ">", cb=self._on_ack)  # every acknowledgement of this connection
        version = nc.connected_server_version
        fast = self.config.fast_ingest and (version.major, version.minor) >= (2, 14)
        info = None
        if fast or self.config.create_stream:
            try:
                info = await self._js.stream_info(self.config.stream)
            except NotFoundError:
                if self.config.create_stream:
                    info = await self._js.add_stream(
                        StreamConfig(
                            name=self.config.stream,
                            subjects=[f"{self.config.subject_prefix}.>"],
                            duplicate_window=self.config.duplicate_window_s,
                            allow_batched=True if fast else None,  # an older server has no such field
                        )
                    )
        self.fast_ingest = bool(fast and info is not None and info.config.allow_batched)
        if fast and not self.fast_ingest:
            log.info("output.nats_no_fast_ingest", output=self.name, stream=self.config.stream)

    def subject(self, message: Message) -> str:
        e = message.event
        return self.table_subject(e.schema, e.table)

    def table_subject(self, schema: str, table: str) -> str:
        """`<prefix>.<source>.<db>.<table>`, each a `subject_token`."""
        subject = self._subjects.get((schema, table))
        if subject is None:
            tokens = [self.config.subject_prefix, subject_token(self.source), subject_token(schema)]
            subject = self._subjects[(schema, table)] = ".".join([*tokens, subject_token(table)])
        return subject

    async def _publish(self, messages: list[Message]) -> int:
        """Publish in windows of `max_inflight`; count the acknowledged ones from the first on."""
        done = 0
        for start in range(0, len(messages), self.window):
            group = messages[start : start + self.window]
            await self._connect()
            if self.fast_ingest:
                acked = await self._fast_publish(group)
            else:
                await self._send(group)
                acked = await self._acknowledged(group)
            done += acked
            if acked < len(group):
                return done
        return done

    async def _on_ack(self, msg: Any) -> None:
        reply = msg.subject[len(self._inbox) :]
        if reply.endswith(_FAST_SUFFIX):
            if self._batch is not None and reply.startswith(self._batch.prefix):  # not a late one of another
                self._batch.on_reply(msg)
            return
        self._acks[int(reply)] = msg
        if len(self._acks) >= self._expected:
            self._complete.set()

    @property
    def depth(self) -> int:
        """How many windows `send` may have published before the oldest is collected."""
        return 2 if self.fast_ingest else 1

    async def _fast_publish(self, group: list[Message], after: Any = None) -> int:
        """`group` as one fast-ingest batch (ADR-50, gap mode `fail`): how many, from the first, JetStream
        stored (or recognised as duplicates). The publisher waits for the server's first reply (the batch's
        flow settings, or why it refuses it) and, after that, whenever two flow acknowledgements are
        outstanding (ADR-50's advice), so the server paces it. What may go out at once is written as one
        block of HPUB frames (`_frames`), not message by message through nats-py's publish.

        `after`: the window sent before this one (a concurrent future of its count, `send`): this batch's
        frames are built while that one is stored, and it starts only once all of that one is stored;
        otherwise nothing of it goes out and it counts 0."""
        await self._connect()
        nc, timeout = self._nc, self.config.timeout_s
        prefix = f"{uuid.uuid4().hex}.{_FAST_FLOW}.fail."
        reply_prefix, last = self._inbox + prefix, len(group)
        try:
            frames = self._frames(group, reply_prefix)  # first: a message too large leaves no batch behind
        except Exception as exc:
            frames, refused = [], exc
        else:
            refused = None
        if after is not None:
            previous, size = after
            try:
                if await asyncio.wrap_future(previous) != size:
                    return 0
            except Exception:
                return 0
            if nc is not self._nc or nc.is_closed:
                return 0
        if refused is not None:
            raise refused
        batch = self._batch = _FastBatch(prefix)

        def ended() -> bool:
            return batch.final is not None or batch.error is not None

        def may_go_on(sent: int) -> bool:  # past message `sent`, or stop: refused
            return ended() or (batch.started and batch.acked + batch.flow * _FAST_OUTSTANDING > sent)

        try:
            await self._write(nc, frames[:_PIECES])
            sent = 1
            while sent < last:
                if not may_go_on(sent) and not await batch.wait(lambda s=sent: may_go_on(s), timeout):
                    return self._fast_count(batch, group)  # no answer within the timeout: those acknowledged
                if ended():
                    break
                upto = min(last, batch.acked + batch.flow * _FAST_OUTSTANDING)
                await self._write(nc, frames[_PIECES * sent : _PIECES * upto])
                sent = upto
            if batch.error is not None and batch.final is None:
                # gap mode `fail`: a ping past the refused message ends the batch there (its PubAck)
                m = group[sent - 1]
                await nc.publish(self.subject(m), b"", reply=f"{reply_prefix}{sent}.{_FAST_PING}{_FAST_SUFFIX}")
            await batch.wait(lambda: batch.final is not None, timeout)
            return self._fast_count(batch, group)
        finally:
            self._batch = None

    def _frames(self, group: list[Message], reply_prefix: str) -> list[bytes]:
        """The batch's HPUB frames as nats-py's publish writes them (the `Nats-Msg-Id` header, the reply
        subject naming batch sequence and operation), `_PIECES` bytes a message (control line and header,
        payload, line end: message k's frame is `pieces[3k:3k + 3]` joined), built in one pass: nats-py's
        per-message publish (a header dict checked and encoded, a flush request a message) was half of its
        event loop's CPU. A message's control line and header are one f-string (the subject and reply prefix
        once a table): about two thirds of the CPU of a bytes format a frame. A batch with a message over
        `max_payload`, or an id that is not ASCII or holds white space (nats-py strips a header value and
        turns line breaks into spaces: `_header_value`), goes message by message (`_checked_frames`)."""
        ids = "\0".join(m.msg_id for m in group)
        if (
            not ids.isascii()  # len(id) is its length in bytes
            or len(ids.split()) > 1  # no white space in any id: nats-py writes it as it is
            or max(map(len, map(_PAYLOAD, group)), default=0) > self._nc.max_payload
        ):
            return self._checked_frames(group, reply_prefix)
        heads = _Heads(self, f" {reply_prefix}")
        pieces: list[bytes] = []
        extend, append_op, header = pieces.extend, _APPEND, _HEADER  # locals: read a message
        for seq, (e, i, payload) in enumerate(group, 1):
            n = len(i) + _HEADER_BYTES
            head = heads[e.schema, e.table]
            extend((f"{head}{seq}.{append_op} {n} {n + len(payload)}\r\n{header}{i}\r\n\r\n".encode(), payload, _CRLF))
        for seq in {1, len(group)} if group else ():  # the first starts the batch, the last commits it
            e, i, payload = group[seq - 1]
            n, op = len(i) + _HEADER_BYTES, _FAST_OPS[2 if seq == len(group) else 0].decode()
            head = heads[e.schema, e.table]
            pieces[_PIECES * (seq - 1)] = f"{head}{seq}.{op} {n} {n + len(payload)}\r\n{_HEADER}{i}\r\n\r\n".encode()
        return pieces

    def _checked_frames(self, group: list[Message], reply_prefix: str) -> list[bytes]:
        """`_frames` message by message: the size checked, the id written as nats-py writes a header value."""
        limit = self._nc.max_payload
        subjects: dict[tuple[str, str], bytes] = {}
        prefix = reply_prefix.encode()
        pieces = []
        last = len(group)
        for seq, m in enumerate(group, 1):
            e = m.event
            subject = subjects.get((e.schema, e.table))
            if subject is None:
                subject = subjects[(e.schema, e.table)] = self.subject(m).encode()
            payload = m.payload
            if len(payload) > limit:
                raise nats_errors.MaxPayloadError(f"{m.msg_id}: {len(payload)} bytes, the server takes {limit}")
            op = _FAST_OPS[2 if seq == last else 1 if seq > 1 else 0]
            header = b"NATS/1.0\r\nNats-Msg-Id: %s\r\n\r\n" % _header_value(m.msg_id)
            control = b"HPUB %s %s%d.%s %d %d\r\n" % (subject, prefix, seq, op, len(header), len(header) + len(payload))
            pieces.extend((control + header, payload, _CRLF))
        return pieces

    @staticmethod
    async def _write(nc: Any, frames: list[bytes]) -> None:
        """Frames onto the connection's pending writes and a flush requested (nats-py's own publish path
        after it built a frame: `_send_command`, `_flush_pending`)."""
        if nc.is_closed:
            raise nats_errors.ConnectionClosedError
        await nc._send_command(b"".join(frames))
        await nc._flush_pending()

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

    def _fast_count(self, batch: _FastBatch, group: list[Message]) -> int:
        """How many of `group`, from the first, its fast batch stored: all that the commit's acknowledgement
        counts, else (refused, or no answer within `timeout_s`) those up to the last flow acknowledgement."""
        final, last = batch.final, len(group)
        if final is not None and "error" not in final:
            done = min(int(final.get("count", 1 if last == 1 else 0)), last)
        else:
            done = min(batch.acked, last)
        if done == last:
            return done
        if final is None and batch.error is None:
            self.last_error = f"no acknowledgement for {group[done].msg_id} within {self.config.timeout_s:g} s"
            return done
        why = batch.error[1] if batch.error is not None else refusal_text(final)
        self.last_error = f"JetStream refused {group[done].msg_id}: {why}"
        if final is not None and _error_code(final) == _FAST_NOT_ENABLED:  # the stream changed: fall back
            self.fast_ingest = False
        return done

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
        (`collect` counts them, oldest window first), behind at most `depth` - 1 windows not collected;
        False when it could not be published (`last_error`; nothing of it counts)."""
        if len(self._sent) >= self.depth:
            raise RuntimeError(f"send() while {len(self._sent)} windows sent before are not collected")
        if not messages or len(messages) > self.window:
            raise ValueError(f"send() takes 1 to {self.window} messages, not {len(messages)}")
        try:
            if self._nc is None:
                self._run(self._connect())
            if self.fast_ingest:  # published by nats-py's thread while this one goes on: collect() waits for it
                after = (self._sent[-1][1], len(self._sent[-1][0])) if self._sent else None
                coro = self._fast_publish(messages, after)
                self._sent.append((messages, asyncio.run_coroutine_threadsafe(coro, self._loop)))
                return True
            if self._sent:  # fast ingest ended (the stream changed) with a window not collected
                raise RuntimeError("an acknowledgement a message while a fast batch is not collected")
            self._run(self._send(messages))
        except Exception as exc:
            self.last_error = self._why(exc)
            self._failed(0)
            return False
        self._sent.append((messages, None))
        return True

    def collect(self) -> int:
        """How many of the oldest window `send` published are acknowledged, from the first on."""
        if not self._sent:
            return 0
        group, task = self._sent.popleft()
        try:
            done = task.result() if task is not None else self._run(self._acknowledged(group))
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
        while self._sent:
            _group, task = self._sent.popleft()
            if task is not None:
                with contextlib.suppress(Exception):  # its outcome no longer counts
                    task.result()
        self._run(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


_FAST_SUFFIX = ".$FI"  # a fast-ingest reply subject: <inbox>.<batch id>.<flow>.<gap mode>.<sequence>.<op>.$FI
_FAST_FLOW = 500  # a flow acknowledgement at least every this many messages (the server's own ceiling: 500)
_FAST_OUTSTANDING = 2  # flow acknowledgements awaited at most before the publisher waits (ADR-50's advice)
_FAST_NOT_ENABLED = 10205  # "batch publish not enabled on stream"
_FAST_START, _FAST_APPEND, _FAST_COMMIT, _FAST_COMMIT_EOB, _FAST_PING = "01234"  # the reply subject's <op>
_FAST_OPS = [f"{op}{_FAST_SUFFIX}".encode() for op in (_FAST_START, _FAST_APPEND, _FAST_COMMIT)]
_HEADER_NEWLINES = str.maketrans({"\r": " ", "\n": " "})
_PIECES = 3  # bytes objects a message in `_frames`
_APPEND = _FAST_OPS[1].decode()  # a fast batch's middle message
_CRLF = b"\r\n"
_HEADER = "NATS/1.0\r\nNats-Msg-Id: "  # a message's header: this, its id, and a blank line
_HEADER_BYTES = len(_HEADER) + 4  # the header's length but the id's
_PAYLOAD = itemgetter(2)  # a Message's payload


class _Heads(dict[tuple[str, str], str]):
    """(db, table) -> `HPUB <subject> <reply prefix>` of a batch, built the first time a table is asked for."""

    def __init__(self, output: NatsOutput, reply: str) -> None:
        super().__init__()
        self.output, self.reply = output, reply

    def __missing__(self, name: tuple[str, str]) -> str:
        head = self[name] = f"HPUB {self.output.table_subject(*name)}{self.reply}"
        return head


def _header_value(text: str) -> bytes:
    """A header value as nats-py writes it: stripped, line breaks as spaces (a source name could hold them)."""
    if "\r" in text or "\n" in text or text != text.strip():
        text = text.strip().translate(_HEADER_NEWLINES)
    return text.encode()


class _FastBatch:
    """What the server said so far about one fast-ingest batch (ADR-50): flow acknowledgements
    (`{"type":"ack","seq":n,"msgs":flow}`: in gap mode `fail`, all up to batch sequence n stored), an error or
    gap (`"type":"err"`/`"gap"`: the batch ends before it) and, at its end, a PubAck (`count`: how many)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix  # the reply subjects' part after the inbox, up to the sequence
        self.started = False  # the first reply came (flow settings)
        self.acked = 0
        self.flow = 1
        self.final: dict[str, Any] | None = None
        self.error: tuple[int, str] | None = None  # (batch sequence, why)
        self.changed = asyncio.Event()

    def on_reply(self, msg: Any) -> None:
        _, seq_text, op, _ = msg.subject.rsplit(".", 3)  # the reply subject: which message it answers
        seq = int(seq_text)
        try:
            answer = json.loads(msg.data) if msg.data else {"error": {"description": refusal(msg)}}  # 503: a status
        except ValueError:
            answer = {"error": {"description": repr(msg.data[:200])}}
        if not isinstance(answer, dict):
            answer = {"error": {"description": repr(answer)}}
        kind = answer.get("type")
        if kind == "ack":
            self.started = True
            self.acked = max(self.acked, int(answer.get("seq", 0)))
            self.flow = max(1, int(answer.get("msgs", 1)))
        elif kind == "err":  # the message at `seq` refused (a check of its headers)
            self._refused(int(answer.get("seq", 0)), refusal_text(answer))
        elif kind == "gap":  # from `last_seq` to before `seq` missing
            self._refused(int(answer.get("last_seq", 0)), f"lost in the batch (a gap: {msg.data.decode()})")
        elif "error" not in answer:
            self.final = answer  # the PubAck of the commit: `count` stored
        elif op != _FAST_PING:  # an error answering a ping: the batch already ended
            self._refused(seq, refusal_text(answer))  # refused before the batch (too large, say)
            if seq == 1 or op in (_FAST_COMMIT, _FAST_COMMIT_EOB):  # nothing more comes
                self.final = answer
        self.changed.set()

    def _refused(self, seq: int, why: str) -> None:
        if self.error is None or seq < self.error[0]:
            self.error = (seq, why)

    async def wait(self, ready: Any, timeout: float) -> bool:
        """Until `ready()`, or False after `timeout` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not ready():
            self.changed.clear()
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self.changed.wait(), remaining)
            except TimeoutError:
                return ready()
        return True


def _error_code(answer: dict[str, Any]) -> int | None:
    error = answer.get("error")
    return error.get("err_code") if isinstance(error, dict) else None


def refusal_text(answer: Any) -> str:
    """The description of a JetStream error answer (parsed)."""
    error = answer.get("error", answer) if isinstance(answer, dict) else answer
    return str(error.get("description", error) if isinstance(error, dict) else error)


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
    return refusal_text(answer)


class WebhookOutput:
    """POSTs each batch as one JSON array (the messages in order); any 2xx acknowledges the whole batch,
    anything else (status, timeout, refused connection) acknowledges none. Headers: the batch's first and
    last message ids, also as `Idempotency-Key`."""

    event_images = False  # reads the payload, the id and the event's table only

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
