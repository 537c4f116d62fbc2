"""Helpers for the output tests: `logtide relay` as a child process, a JetStream reader, the stream an
offline interleaver makes of a whole landing zone, and the table state a stream of messages rebuilds."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import yaml

from capture.dump.control import DumpSettings
from capture.dump.engine import DumpRequest
from capture.landing import LandingZone
from capture.output.formats import message_id
from capture.output.interleave import Event, Interleaver
from capture.output.landing import LandingReader, ReadonlyChunks
from tests.integration.dumping import open_engine
from tests.servers import free_port, wait_for

ROOT = Path(__file__).resolve().parent.parent.parent


def add_outputs(config_path: Path, outputs: dict[str, dict[str, Any]]) -> int:
    """Put `outputs` into the config, and the relay's metrics on a free port: returned."""
    data = yaml.safe_load(config_path.read_text())
    data["outputs"] = outputs
    port = free_port()
    data["relay"] = {"metrics": {"port": port}}
    config_path.write_text(yaml.safe_dump(data))
    return port


def add_jetstream(config_path: Path, url: str, **settings: Any) -> tuple[str, str]:
    """Put output `js` of source `src` into the config: a JetStream stream and subject prefix of its
    own (the session's server is shared), and `settings`; the stream and the prefix."""
    stream, prefix = f"S{uuid.uuid4().hex[:8]}", f"p{uuid.uuid4().hex[:8]}"
    output = {"source": "src", "kind": "nats", "url": url, "stream": stream, "subject_prefix": prefix}
    add_outputs(config_path, {"js": {**output, **settings}})
    return stream, prefix


def scrape(port: int) -> dict[str, float]:
    """The relay's /metrics as {'name{labels}': value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


class RelayProcess:
    """`logtide relay --source src` as a child process."""

    def __init__(self, config_path: Path, workdir: Path, source: str = "src") -> None:
        self.config_path, self.source = config_path, source
        self.log_path = workdir / f"relay-{source}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> RelayProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.process = subprocess.Popen(
            [sys.executable, "-m", "capture.cli", "--config", str(self.config_path), "relay", "--source", self.source],
            cwd=ROOT,
            stdout=log,
            stderr=log,
            env=dict(os.environ),
        )
        return self

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""


class BackgroundDump:
    """A dump of `table` through the capture's source, in a thread; its summary or error lands in `outcome`.
    It is also its own dump control: `stop()` cancels it at its next chunk and waits for it, so a test that
    fails does not leave it writing watermarks and chunks into servers that later tests share."""

    def __init__(self, capture, table: str, chunk_size: int, delay_s: float) -> None:
        self.outcome: list = []
        self._cancel = threading.Event()
        settings = DumpSettings(chunk_size=chunk_size, delay_s=delay_s)
        self.thread = threading.Thread(target=self._run, args=(capture, table, settings), daemon=True)
        self.thread.start()

    def overrides(self) -> dict[str, Any]:  # capture/dump/control.py ControlStore, read before every chunk
        return {"state": "cancelled"} if self._cancel.is_set() else {}

    def _run(self, capture, table: str, settings: DumpSettings) -> None:
        engine, source = open_engine(capture, control=self)
        try:
            self.outcome.append(engine.run(DumpRequest(tables=[table], settings=settings)))
        except BaseException as exc:
            self.outcome.append(exc)
        finally:
            source.close()

    def stop(self, timeout: float = 90) -> None:
        """Cancel at the next chunk (a chunk waiting for a lagging output may take up to capture/dump/gate.py
        MAX_WAIT_S) and wait for the thread."""
        self._cancel.set()
        self.thread.join(timeout)


def expected_stream(zone: LandingZone, tables: set[str] | None = None) -> list[Event]:
    """The whole landing zone through one interleaver, at once: what a relay started at the beginning
    must have delivered (in this order) once it caught up."""
    reader = LandingReader(zone)
    frontier = reader.frontier()
    events, _ = reader.read(0, frontier, max_rows=1 << 62)
    interleaver = Interleaver(reader.load_chunk)
    readonly = ReadonlyChunks(zone, None, 10_000)  # `watermarks: readonly` chunks, by their HIGH files
    readonly.scan(0, frontier)
    out: list[Event] = []

    def place(before: int) -> None:
        for chunk in readonly.due(before):
            loaded = readonly.load(chunk, frontier)
            if loaded is not None:
                meta, rows, window, first = loaded
                out.extend(interleaver.readonly_chunk(meta, rows, chunk.low, chunk.high, chunk.high_ts, window, first))

    for event in events:
        place(event.lsn)
        out.extend(interleaver.push(event))
    place(frontier)
    return [o for o in out if tables is None or o.qualified_name in tables]


def expected_ids(zone: LandingZone, tables: set[str] | None = None) -> list[str]:
    return [message_id(zone.source, e) for e in expected_stream(zone, tables)]


def read_jetstream(url: str, stream: str, subject: str) -> list[tuple[str, dict[str, Any]]]:
    """Every message of the stream, in stream order: (Nats-Msg-Id, decoded payload)."""
    import nats

    async def read() -> list[tuple[str, dict[str, Any]]]:
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            total = (await js.stream_info(stream)).state.messages
            got: list[tuple[str, dict[str, Any]]] = []
            if not total:
                return got
            sub = await js.pull_subscribe(subject, stream=stream)
            while len(got) < total:
                for msg in await sub.fetch(1000, timeout=5):
                    got.append((msg.headers["Nats-Msg-Id"], json.loads(msg.data)))
                    await msg.ack()
            await sub.unsubscribe()
            return got
        finally:
            await nc.close()

    return asyncio.run(read())


def stream_count(url: str, stream: str) -> int:
    import nats
    from nats.js.errors import NotFoundError

    async def count() -> int:
        nc = await nats.connect(url)
        try:
            return (await nc.jetstream().stream_info(stream)).state.messages
        except NotFoundError:
            return 0
        finally:
            await nc.close()

    return asyncio.run(count())


def wait_count(url: str, stream: str, count: int, relay: RelayProcess, timeout: float = 60) -> None:
    def enough() -> bool:
        assert relay.process is not None
        if relay.process.poll() is not None:
            raise AssertionError(f"relay exited with {relay.process.returncode}:\n{relay.log()}")
        return stream_count(url, stream) >= count

    wait_for(enough, timeout, interval=0.2, what=f"{count} messages in JetStream stream {stream}")


def start_relay(make_relay, capture) -> RelayProcess:
    """`logtide relay` for the capture's config, once output `js` wrote its state (dumps wait for it)."""
    relay = make_relay(capture.config_path).start()
    wait_for(lambda: read_state(capture.zone, "js"), 30, what="the relay to start")
    return relay


def read_all(url: str, stream: str, prefix: str, count: int, relay: RelayProcess) -> list[tuple[str, dict[str, Any]]]:
    """Once the stream holds `count` messages and nothing more comes, its messages (id, body); the relay stopped."""
    wait_count(url, stream, count, relay)
    time.sleep(0.5)  # nothing more may come
    got = read_jetstream(url, stream, f"{prefix}.>")
    relay.stop()
    return got


UNKNOWN = "<not carried, not held>"  # a `missing` column of a key the consumer holds nothing for


def logtide_state(messages: list[dict[str, Any]], key: str = "id") -> dict[Any, dict[str, Any]]:
    """The table Logtide-format messages rebuild, applied in order (the last per key wins) as a consumer
    must: a column listed in `missing` (PostgreSQL TOAST) keeps the value held for the key, or is UNKNOWN."""
    state: dict[Any, dict[str, Any]] = {}
    for m in messages:
        if m["op"] == "t":  # a TRUNCATE: the table is empty
            state.clear()
            continue
        k = m["key"][key]
        if m["op"] == "d":
            state.pop(k, None)
            continue
        held = state.get(k, {})
        state[k] = {**m["after"], **{c: held.get(c, UNKNOWN) for c in m["missing"]}}
    return state


def debezium_state(messages: list[dict[str, Any]], key: str = "id") -> dict[Any, dict[str, Any]]:
    """The same from Debezium envelopes, as a Debezium consumer reads them (after, or before on a delete)."""
    state: dict[Any, dict[str, Any]] = {}
    for m in messages:
        if m["op"] == "t":  # Debezium's truncate event: the table is empty
            state.clear()
        elif m["op"] == "d":
            state.pop(m["before"][key], None)
        else:
            state[m["after"][key]] = m["after"]
    return state


def read_state(zone: LandingZone, name: str) -> dict[str, Any]:
    """An output's state.json (what `logtide status` and waiting dumps read); {} before its relay wrote one."""
    path = zone.root / "outputs" / name / "state.json"
    return json.loads(path.read_text()) if path.exists() else {}
