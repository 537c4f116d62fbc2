"""The enrichment hook of an output (`transforms`): maps and filters events before delivery; an error in
it stops the output with a clear message, and a restart delivers from the first event not acknowledged."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from capture.config import OutputConfig
from capture.errors import OutputError
from capture.output.formats import Message
from capture.output.interleave import Event
from capture.output.landing import read_position
from capture.output.relay import Relay
from tests.integration.dumping import wait_until_landed
from tests.servers import wait_for

pytestmark = pytest.mark.integration


def enrich(event: Event) -> Event | None:
    """Leaves out odd ids, adds a column to the rest."""
    if event.after is None or event.after["id"] % 2:
        return None
    return replace(event, after={**event.after, "doubled": event.after["v"] * 2})


def explode(event: Event) -> Event | None:
    if event.after is not None and event.after["id"] == 7:
        raise ValueError("no sevens")
    return event


class Collect:
    """An output that keeps what it is given (and acknowledges all of it)."""

    last_error = None

    def __init__(self) -> None:
        self.messages: list[Message] = []

    def deliver(self, messages: list[Message]) -> int:
        self.messages.extend(messages)
        return len(messages)

    def close(self) -> None:
        pass


def _config(database: str, hook: str) -> OutputConfig:
    return OutputConfig(
        source="src",
        kind="webhook",
        url="http://unused",
        start="beginning",
        batch_size=1,
        transforms={f"{database}.items": f"tests.integration.test_output_transforms:{hook}"},
    )


def test_a_hook_maps_and_filters_and_a_failing_one_stops_the_output_losing_nothing(mariadb, database, make_capture):
    mariadb.execute("CREATE TABLE items (id INT PRIMARY KEY, v INT)", database=database)
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    for i in range(1, 21):
        mariadb.execute(f"INSERT INTO items VALUES ({i}, {i * 10})", database=database)
    wait_until_landed(mariadb, capture)

    sink, stop = Collect(), threading.Event()
    relay = Relay(capture.zone, "mariadb", "good", _config(database, "enrich"), sink)
    thread = threading.Thread(target=relay.run, args=(stop,))
    thread.start()
    try:
        wait_for(lambda: len(sink.messages) >= 10, 30, what="10 messages")
    finally:
        stop.set()
        thread.join()
    rows = [m.event.after for m in sink.messages]
    assert rows == [{"id": i, "v": i * 10, "doubled": i * 20} for i in range(2, 21, 2)]

    first = Collect()
    with pytest.raises(OutputError, match=rf"{database}\.items at LSN \d+ .*ValueError: no sevens"):
        Relay(capture.zone, "mariadb", "bad", _config(database, "explode"), first).run(threading.Event())
    assert [m.event.after["id"] for m in first.messages] == list(range(1, 7))
    assert read_position(capture.zone, "bad").delivered == 6
    # fixed: the same output goes on from the event that failed
    fixed = _config(database, "enrich").model_copy(update={"transforms": {}})
    second, stop = Collect(), threading.Event()
    thread = threading.Thread(target=Relay(capture.zone, "mariadb", "bad", fixed, second).run, args=(stop,))
    thread.start()
    try:
        wait_for(lambda: len(second.messages) >= 14, 30, what="the rest")
    finally:
        stop.set()
        thread.join()
    assert [m.event.after["id"] for m in second.messages] == list(range(7, 21))


def test_a_hook_that_cannot_be_loaded_stops_the_relay_before_it_starts(tmp_path):
    from capture.landing import LandingZone

    config = OutputConfig(source="src", kind="webhook", url="http://unused", transforms={"a.b": "tests.nope:missing"})
    with pytest.raises(OutputError, match="cannot be loaded"):
        Relay(LandingZone(tmp_path, "src"), "mariadb", "x", config, Collect())
