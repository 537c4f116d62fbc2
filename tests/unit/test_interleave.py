"""DBLog's scenarios for the online interleaver (capture/output/interleave.py), without servers: what is
emitted, in which order, which chunk rows a window drops, and where it refuses to go on."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from capture.dump.reconcile import apply
from capture.errors import WatermarkError
from capture.landing.chunks import ChunkMeta
from capture.output.interleave import Event, Interleaver
from capture.sources.postgres.read_view import PgSnapshot

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Log:
    """Builds a log in LSN order and the chunk files its HIGH watermarks name."""

    def __init__(self) -> None:
        self.lsn = 100
        self.chunks: dict[tuple[str, str, int], tuple[ChunkMeta, list[dict[str, Any]]]] = {}
        self.ts = T0

    def _next(self) -> int:
        self.lsn += 10
        return self.lsn

    def change(self, op: str, row: dict[str, Any], table: str = "db.t", key=("id",), txid: str | None = None, **kw):
        schema, _, name = table.partition(".")
        before = row if op in ("u", "d") else None
        after = row if op != "d" else None
        return Event(schema, name, self._next(), op, before, after, key, txid, self.ts, **kw)

    def mark(self, kind: str, mark_id: str, dump: str = "d1", table: str = "db.t", chunk: int = 1) -> Event:
        after = {"dump_id": dump, "table_name": table, "chunk": chunk, "kind": kind, "watermark_id": mark_id}
        return Event("logtide", "watermarks", self._next(), "u", after, after, ("slot",), "1", self.ts)

    def chunk(self, low: str, high: str, rows, dump="d1", table="db.t", chunk=1, key=("id",), read_view=None) -> None:
        meta = ChunkMeta(dump, table, chunk, low, high, key, None, None, None, False, None, len(rows), read_view)
        self.chunks[(dump, table, chunk)] = (meta, rows)

    def load(self, dump: str, table: str, chunk: int):
        return self.chunks.get((dump, table, chunk))


def run(log: Log, events: list[Event], **kw) -> list[Event]:
    interleaver = Interleaver(log.load, **kw)
    return [out for e in events for out in interleaver.push(e)]


def rows(n: range, v: int = 0) -> list[dict[str, Any]]:
    return [{"id": i, "v": v} for i in n]


def brief(out: list[Event]) -> list[tuple[str, Any]]:
    return [(e.op, e.key_values()["id"]) for e in out]


def test_a_change_inside_the_window_drops_its_chunk_row_and_the_rest_follow_high_in_key_order():
    log = Log()
    log.chunk("L", "H", rows(range(1, 5)))
    events = [log.mark("LOW", "L"), log.change("u", {"id": 2, "v": 9}), log.mark("HIGH", "H")]
    out = run(log, events)
    assert brief(out) == [("u", 2), ("r", 1), ("r", 3), ("r", 4)]
    high = events[-1]
    assert [(e.lsn, e.order) for e in out[1:]] == [(high.lsn, 1), (high.lsn, 3), (high.lsn, 4)]
    assert all(e.dump_id == "d1" and e.chunk == 1 for e in out[1:])
    assert apply_state(out) == {1: 0, 2: 9, 3: 0, 4: 0}


def apply_state(out: list[Event]) -> dict[Any, Any]:
    from capture.dump.reconcile import StreamEvent

    stream = [StreamEvent(e.lsn, e.order, e.op, (e.key_values()["id"],), e.after, e.missing) for e in out]
    return {k[0]: row["v"] for k, row in apply(stream).items()}


def test_output_order_before_low_inside_at_high_and_after():
    log = Log()
    log.chunk("L", "H", rows(range(1, 4)))
    events = [
        log.change("u", {"id": 1, "v": 1}),  # before LOW: the chunk's snapshot saw it, no reason to drop row 1
        log.mark("LOW", "L"),
        log.change("c", {"id": 7, "v": 7}),  # inside (not a chunk key)
        log.change("d", {"id": 3, "v": 0}),  # inside: row 3 dropped
        log.mark("HIGH", "H"),
        log.change("u", {"id": 2, "v": 5}),  # after HIGH
    ]
    out = run(log, events)
    assert brief(out) == [("u", 1), ("c", 7), ("d", 3), ("r", 1), ("r", 2), ("u", 2)]
    assert [e.lsn for e in out] == sorted(e.lsn for e in out)
    assert apply_state(out) == {1: 0, 2: 5, 7: 7}


def test_another_tables_event_does_not_suppress():
    log = Log()
    log.chunk("L", "H", rows(range(1, 3)))
    out = run(log, [log.mark("LOW", "L"), log.change("u", {"id": 1, "v": 3}, table="db.other"), log.mark("HIGH", "H")])
    assert [(e.table, e.op, e.key_values()["id"]) for e in out] == [("other", "u", 1), ("t", "r", 1), ("t", "r", 2)]


def test_an_empty_chunk_emits_nothing_and_closes_its_window():
    log = Log()
    log.chunk("L", "H", [])
    interleaver = Interleaver(log.load)
    assert interleaver.push(log.mark("LOW", "L")) == [] and interleaver.open_windows == 1
    assert interleaver.push(log.mark("HIGH", "H")) == [] and interleaver.open_windows == 0
    after = log.change("c", {"id": 1, "v": 1})
    assert interleaver.push(after) == [after]


def test_every_row_colliding_drops_the_whole_chunk():
    log = Log()
    log.chunk("L", "H", rows(range(1, 4)))
    low = log.mark("LOW", "L")
    changes = [log.change("u", {"id": i, "v": 5}) for i in range(1, 4)]
    out = run(log, [low, *changes, log.mark("HIGH", "H")])
    assert brief(out) == [("u", 1), ("u", 2), ("u", 3)]


def test_composite_keys_compare_every_column():
    log = Log()
    key = ("a", "b")
    chunk_rows = [{"a": 1, "b": "x", "v": 0}, {"a": 1, "b": "y", "v": 0}, {"a": 2, "b": "x", "v": 0}]
    log.chunk("L", "H", chunk_rows, key=key)
    out = run(log, [log.mark("LOW", "L"), log.change("u", {"a": 1, "b": "x", "v": 1}, key=key), log.mark("HIGH", "H")])
    assert [(e.op, e.after["a"], e.after["b"]) for e in out] == [("u", 1, "x"), ("r", 1, "y"), ("r", 2, "x")]


def test_forty_events_in_one_window_keep_log_order():
    log = Log()
    log.chunk("L", "H", rows(range(0, 100, 2)))  # even keys
    low = log.mark("LOW", "L")
    changes = [log.change("u", {"id": (i * 7) % 50, "v": i}) for i in range(40)]
    out = run(log, [low, *changes, log.mark("HIGH", "H")])
    assert out[:40] == changes
    touched = {(i * 7) % 50 for i in range(40)}
    assert [e.key_values()["id"] for e in out[40:]] == [k for k in range(0, 100, 2) if k not in touched]


def test_several_windows_of_several_tables_open_at_once():
    log = Log()
    log.chunk("La", "Ha", rows(range(1, 3)), dump="d1", table="db.a")
    log.chunk("Lb", "Hb", rows(range(1, 3)), dump="d2", table="db.b")
    events = [
        log.mark("LOW", "La", "d1", "db.a"),
        log.mark("LOW", "Lb", "d2", "db.b"),
        log.change("u", {"id": 1, "v": 1}, table="db.a"),
        log.change("u", {"id": 2, "v": 1}, table="db.b"),
        log.mark("HIGH", "Ha", "d1", "db.a"),
        log.change("u", {"id": 1, "v": 2}, table="db.b"),  # after a's HIGH, inside b's window
        log.mark("HIGH", "Hb", "d2", "db.b"),
    ]
    out = run(log, events)
    assert [(e.table, e.op, e.key_values()["id"]) for e in out] == [
        ("a", "u", 1),
        ("b", "u", 2),
        ("a", "r", 2),
        ("b", "u", 1),
    ]


def test_a_low_without_high_is_dropped_when_its_dump_redoes_the_chunk(caplog):
    log = Log()
    log.chunk("L2", "H2", rows(range(1, 3)))  # the redone chunk's file replaced the first one's
    interleaver = Interleaver(log.load)
    events = [log.mark("LOW", "L1"), log.change("u", {"id": 1, "v": 1}), log.mark("LOW", "L2"), log.mark("HIGH", "H2")]
    with caplog.at_level(logging.WARNING):
        out = [o for e in events for o in interleaver.push(e)]
    assert brief(out) == [("u", 1), ("r", 1), ("r", 2)]  # the change before the redone LOW does not count
    assert interleaver.windows_dropped == 1 and interleaver.open_windows == 0
    assert "output.window_dropped" in caplog.text and "chunk redone" in caplog.text


def test_a_window_open_past_its_timeout_is_dropped_and_its_late_high_refused():
    log = Log()
    log.chunk("L", "H", rows(range(1, 3)))
    interleaver = Interleaver(log.load, window_timeout_s=60)
    interleaver.push(log.mark("LOW", "L"))
    log.ts = T0 + timedelta(seconds=61)
    interleaver.push(log.change("c", {"id": 9, "v": 0}))
    assert interleaver.open_windows == 0 and interleaver.windows_dropped == 1
    with pytest.raises(WatermarkError, match="window_timeout_s"):
        interleaver.push(log.mark("HIGH", "H"))


def test_a_high_whose_file_carries_another_high_closes_the_window_without_rows():
    log = Log()
    log.chunk("L2", "H2", rows(range(1, 3)))  # read again after a schema change: the file names H2
    interleaver = Interleaver(log.load)
    out = [o for e in [log.mark("LOW", "L1"), log.mark("HIGH", "H1")] for o in interleaver.push(e)]
    assert out == [] and interleaver.open_windows == 0
    out = [o for e in [log.mark("LOW", "L2"), log.mark("HIGH", "H2")] for o in interleaver.push(e)]
    assert brief(out) == [("r", 1), ("r", 2)]


def test_a_chunk_emitted_and_then_read_again_after_a_schema_change_is_emitted_again_at_its_new_high():
    log = Log()
    log.chunk("L1", "H1", rows(range(1, 3)))
    interleaver = Interleaver(log.load)
    first = [o for e in [log.mark("LOW", "L1"), log.mark("HIGH", "H1")] for o in interleaver.push(e)]
    log.chunk("L2", "H2", [{"id": i, "v": 0, "extra": 5} for i in range(1, 3)])  # the file is replaced
    again = [o for e in [log.mark("LOW", "L2"), log.mark("HIGH", "H2")] for o in interleaver.push(e)]
    assert brief(first) == brief(again) == [("r", 1), ("r", 2)]
    assert all(e.after["extra"] == 5 for e in again) and again[0].lsn > first[0].lsn


@pytest.mark.parametrize(
    "case, match",
    [
        ("duplicate_low", "twice"),
        ("duplicate_high", "twice"),
        ("high_without_low", "no LOW before it"),
        ("high_before_low", "no LOW before it"),
        ("low_of_an_earlier_chunk", "out of order"),
        ("lsn_backwards", "must be in order"),
    ],
)
def test_contradictions_fail_closed(case, match):
    log = Log()
    log.chunk("L", "H", rows(range(1, 3)))
    log.chunk("L0", "H0", rows(range(1, 3)), chunk=0)
    low, high = log.mark("LOW", "L"), log.mark("HIGH", "H")
    events = {
        "duplicate_low": [low, _at(low, log._next())],
        "duplicate_high": [low, high, _at(high, log._next())],
        "high_without_low": [high],
        "high_before_low": [high, _at(low, log._next())],
        "low_of_an_earlier_chunk": [low, high, log.mark("LOW", "L0", chunk=0), log.mark("HIGH", "H0", chunk=0)],
        "lsn_backwards": [_at(low, 50), _at(low, 40)],
    }[case]
    interleaver = Interleaver(log.load)
    with pytest.raises(WatermarkError, match=match):
        for event in events:
            interleaver.push(event)


def _at(event: Event, lsn: int) -> Event:
    from dataclasses import replace

    return replace(event, lsn=lsn)


def test_postgresql_a_commit_the_chunks_snapshot_missed_before_low_drops_the_row():
    log = Log()
    before_low = log.lsn + 1
    hidden = log.change("u", {"id": 1, "v": 8}, txid="105")  # committed before LOW, invisible to the snapshot
    seen = log.change("u", {"id": 2, "v": 8}, txid="90")  # committed and visible
    view = PgSnapshot.parse("95:100:", before_low)
    log.chunk("L", "H", rows(range(1, 4)), read_view=view)
    out = run(log, [hidden, seen, log.mark("LOW", "L"), log.mark("HIGH", "H")])
    assert brief(out) == [("u", 1), ("u", 2), ("r", 2), ("r", 3)]


def test_postgresql_toast_a_dropped_rows_value_no_window_event_carried_is_kept():
    log = Log()
    key = ("id",)
    log.chunk("L", "H", [{"id": 1, "title": "t", "body": "B"}], key=key)
    low = log.mark("LOW", "L")
    update = log.change("u", {"id": 1, "title": "new", "body": None}, missing=("body",))
    out = run(log, [low, update, log.mark("HIGH", "H")])
    assert [(e.op, e.missing) for e in out] == [("u", ("body",)), ("r", ("title",))]
    assert out[1].after["body"] == "B"


@pytest.mark.parametrize("read", ["after", "before"])
def test_postgresql_toast_a_key_swap_the_chunks_snapshot_saw_places_the_swapped_rows(read):
    """3 and 7 trade keys through 100 in one transaction (xid 120) inside the window, each create
    without the body. Read after the swap (snapshot xmax 121) the chunk's rows are the swapped
    ones, the bodies' only copy at their new keys: emitted whole at HIGH. Read before it (xmax 120)
    they are the old keys' rows: stale, not emitted (the online stream does not complete key
    changes from the old key; the merge does)."""
    log = Log()
    body = {3: "big3", 7: "big7", 9: "x"}
    rows_read = {"after": [(3, 7), (7, 3), (9, 9)], "before": [(3, 3), (7, 7), (9, 9)]}[read]
    log.chunk(
        "L",
        "H",
        [{"id": k, "title": f"t{v}", "body": body[v]} for k, v in rows_read],
        read_view=PgSnapshot.parse({"after": "121:121:", "before": "111:120:"}[read], log.lsn),
    )
    events = [log.mark("LOW", "L")]
    for old, new, was in ((3, 100, 3), (7, 3, 7), (100, 7, 3)):
        events.append(log.change("d", {"id": old, "title": None, "body": None}, txid="120"))
        events.append(log.change("c", {"id": new, "title": f"t{was}", "body": None}, txid="120", missing=("body",)))
    out = run(log, [*events, log.mark("HIGH", "H")])
    placed = [(e.key_values()["id"], e.after["body"], e.missing) for e in out if e.op == "r"]
    if read == "after":
        assert placed == [(3, "big7", ()), (7, "big3", ()), (9, "x", ())]
    else:
        assert placed == [(9, "x", ())]


def test_replay_from_covers_the_open_windows_look_back():
    log = Log()
    log.chunk("L", "H", rows(range(1, 3)))
    interleaver = Interleaver(log.load, lookback=2)
    first = log.change("c", {"id": 5, "v": 0})
    second = log.change("c", {"id": 6, "v": 0})
    third = log.change("c", {"id": 7, "v": 0})
    for e in (first, second, third):
        interleaver.push(e)
    assert interleaver.replay_from(999) == 999
    interleaver.push(log.mark("LOW", "L"))
    assert interleaver.replay_from(999) == second.lsn  # the look-back keeps the last 2 events
    interleaver.push(log.mark("HIGH", "H"))
    assert interleaver.replay_from(999) == 999


def truncate(log: Log, table: str = "db.t", txid: str | None = None) -> Event:
    schema, _, name = table.partition(".")
    return Event(schema, name, log._next(), "t", None, None, (), txid, log.ts)


def replay(out: list[Event]) -> dict[Any, Any]:
    """The table the emitted stream leaves: a truncate empties it."""
    state: dict[Any, Any] = {}
    for e in out:
        if e.op == "t":
            state.clear()
        elif e.after is None:
            state.pop(e.before["id"], None)
        else:
            state[e.after["id"]] = e.after["v"]
    return state


def test_a_truncate_inside_an_open_window_drops_all_its_chunk_rows_and_is_emitted_in_order():
    log = Log()
    log.chunk("L", "H", rows(range(1, 5)))
    log.chunk("L2", "H2", [{"id": 2, "v": 1}, {"id": 3, "v": 3}], chunk=2)
    events = [
        log.change("c", {"id": 9, "v": 0}),
        log.mark("LOW", "L"),
        log.change("u", {"id": 2, "v": 9}),
        truncate(log),  # inside the window: every chunk row is older than it
        log.change("c", {"id": 3, "v": 3}),  # refilled: an overlapping key, its own event
        log.mark("HIGH", "H"),
        log.mark("LOW", "L2", chunk=2),  # after the truncate: placed as usual
        log.mark("HIGH", "H2", chunk=2),
        truncate(log, "db.other"),  # another table's: no effect on db.t
    ]
    interleaver = Interleaver(log.load)
    out = [o for e in events for o in interleaver.push(e)]
    assert [(e.op, e.qualified_name) for e in out if e.op in "tc"] == [
        ("c", "db.t"),
        ("t", "db.t"),
        ("c", "db.t"),
        ("t", "db.other"),
    ]
    assert [e.lsn for e in out] == sorted(e.lsn for e in out)
    assert [e.after["id"] for e in out if e.op == "r"] == [2, 3]  # chunk 1's rows all dropped as collisions
    assert interleaver.rows_dropped == 4
    assert replay([e for e in out if e.qualified_name == "db.t"]) == {2: 1, 3: 3}


def test_a_truncate_before_low_leaves_the_chunk_alone_unless_the_snapshot_missed_it():
    log = Log()
    log.chunk("L", "H", rows(range(1, 3)))
    out = run(log, [truncate(log, txid="7"), log.mark("LOW", "L"), log.mark("HIGH", "H")])
    assert [e.op for e in out] == ["t", "r", "r"]
    log = Log()  # PostgreSQL: committed in the WAL before LOW, not visible to the chunk's snapshot
    first = truncate(log, txid="100")
    log.chunk("L", "H", rows(range(1, 3)), read_view=PgSnapshot.parse("95:100:", first.lsn))
    out = run(log, [first, log.mark("LOW", "L"), log.mark("HIGH", "H")], lookback=100)
    assert [e.op for e in out] == ["t"]


# -- read-only chunks (`watermarks: readonly`): LOW in the chunk file, HIGH in its HIGH file -----------------


def readonly_meta(rows_: list[dict[str, Any]], low: int, read_view=None, chunk: int = 1) -> ChunkMeta:
    return ChunkMeta(
        "d1", "db.t", chunk, "L", "H", ("id",), None, None, None, False, None, len(rows_), read_view, low_lsn=low
    )


def placed(log: Log, events: list[Event], meta: ChunkMeta, rows_, low: int, high: int) -> list[Event]:
    """The relay's order: every log event up to HIGH, the chunk's survivors at HIGH, the events after it."""
    interleaver = Interleaver(log.load)
    out = [o for e in events if e.lsn <= high for o in interleaver.push(e)]
    out += interleaver.readonly_chunk(meta, rows_, low, high, T0, events)
    return out + [o for e in events if e.lsn > high for o in interleaver.push(e)]


def test_a_readonly_chunk_drops_the_keys_its_window_touched_and_places_the_rest_at_high():
    log = Log()
    before = log.change("u", {"id": 1, "v": 5})  # the snapshot saw it: not a collision
    low = log._next()  # LOW: the snapshot's position, no event of its own
    inside = log.change("u", {"id": 2, "v": 9})
    other = log.change("u", {"id": 3, "v": 7}, table="db.other")  # another table's: no effect
    deleted = log.change("d", {"id": 4, "v": 0})
    high = log._next()
    after = log.change("u", {"id": 1, "v": 6})  # after HIGH: applied after the chunk's rows
    chunk_rows = rows(range(1, 6))
    meta = readonly_meta(chunk_rows, low)
    out = placed(log, [before, inside, other, deleted, after], meta, chunk_rows, low, high)
    assert [(e.op, e.qualified_name, e.key_values()["id"]) for e in out] == [
        ("u", "db.t", 1),
        ("u", "db.t", 2),
        ("u", "db.other", 3),
        ("d", "db.t", 4),
        ("r", "db.t", 1),
        ("r", "db.t", 3),
        ("r", "db.t", 5),
        ("u", "db.t", 1),
    ]
    assert [e.position for e in out if e.op == "r"] == [(high, 1), (high, 3), (high, 5)]
    assert all(e.dump_id == "d1" and e.chunk == 1 and e.commit_ts == T0 for e in out if e.op == "r")
    assert replay([e for e in out if e.qualified_name == "db.t"]) == {1: 6, 2: 9, 3: 0, 5: 0}


def test_a_readonly_chunk_ignores_events_after_its_high_even_when_given():
    log = Log()
    low = log._next()
    high = log._next()
    later = log.change("d", {"id": 1, "v": 0})
    chunk_rows = rows(range(1, 3))
    interleaver = Interleaver(log.load)
    out = interleaver.readonly_chunk(readonly_meta(chunk_rows, low), chunk_rows, low, high, T0, [later])
    assert brief(out) == [("r", 1), ("r", 2)]


def test_a_readonly_chunk_with_every_row_colliding_or_empty_emits_nothing():
    log = Log()
    low = log._next()
    events = [log.change("u", {"id": i, "v": 1}) for i in (1, 2)]
    high = log._next()
    chunk_rows = rows(range(1, 3))
    interleaver = Interleaver(log.load)
    assert interleaver.readonly_chunk(readonly_meta(chunk_rows, low), chunk_rows, low, high, T0, events) == []
    assert interleaver.rows_dropped == 2
    assert interleaver.readonly_chunk(readonly_meta([], low), [], low, high, T0, events) == []


def test_a_truncate_inside_a_readonly_window_drops_every_row_and_one_before_low_none():
    log = Log()
    low = log._next()
    inside = truncate(log)
    refill = log.change("c", {"id": 2, "v": 3})
    high = log._next()
    chunk_rows = rows(range(1, 4))
    out = placed(log, [inside, refill], readonly_meta(chunk_rows, low), chunk_rows, low, high)
    assert [e.op for e in out] == ["t", "c"]
    assert replay(out) == {2: 3}
    log = Log()
    first = truncate(log, txid="7")
    low = log._next()
    high = log._next()
    out = placed(log, [first], readonly_meta(chunk_rows, low), chunk_rows, low, high)
    assert [e.op for e in out] == ["t", "r", "r", "r"]


def test_postgresql_a_readonly_chunks_snapshot_hides_xids_at_or_past_xmax_and_in_xip_whatever_their_lsn():
    log = Log()
    far_back = log.change("u", {"id": 1, "v": 8}, txid="105")  # xid >= xmax, long before LOW
    in_progress = log.change("u", {"id": 2, "v": 8}, txid="97")  # in xip: not seen by the snapshot
    seen = log.change("u", {"id": 3, "v": 8}, txid="90")  # completed before the snapshot: seen
    low = log._next()
    high = log._next()
    view = PgSnapshot.parse("95:100:97", low, readonly=True)
    chunk_rows = [{"id": 1, "v": 0}, {"id": 2, "v": 0}, {"id": 3, "v": 8}, {"id": 4, "v": 0}]  # what it saw
    out = placed(log, [far_back, in_progress, seen], readonly_meta(chunk_rows, low, view), chunk_rows, low, high)
    assert brief(out) == [("u", 1), ("u", 2), ("u", 3), ("r", 3), ("r", 4)]
    assert replay(out) == {1: 8, 2: 8, 3: 8, 4: 0}
    # a truncate the snapshot did not see, before LOW: no row survives
    log = Log()
    hidden_truncate = truncate(log, txid="101")
    low = log._next()
    high = log._next()
    out = placed(log, [hidden_truncate], readonly_meta(chunk_rows, low, view), chunk_rows, low, high)
    assert [e.op for e in out] == ["t"]


def test_readonly_chunks_of_a_dump_under_writes_replay_to_the_source():
    """A key-range dump in 3 read-only chunks under random writes: per key, the stream equals the table."""
    import random

    rng = random.Random(5)
    log = Log()
    table = {i: 0 for i in range(1, 31)}
    stream: list[Event] = []

    def write() -> None:
        key = rng.randint(1, 35)
        if key in table and rng.random() < 0.3:
            stream.append(log.change("d", {"id": key, "v": table.pop(key)}))
        else:
            op = "u" if key in table else "c"
            table[key] = rng.randint(1, 99)
            stream.append(log.change(op, {"id": key, "v": table[key]}))

    base = dict(table)  # the history before the log: only the dump brings it
    chunks = []
    for n, keys in enumerate((range(1, 13), range(13, 25), range(25, 36)), start=1):
        for _ in range(rng.randint(0, 4)):
            write()
        low = log._next()
        snapshot = [{"id": k, "v": table[k]} for k in keys if k in table]
        for _ in range(rng.randint(0, 6)):
            write()
        high = log._next()
        chunks.append((readonly_meta(snapshot, low, chunk=n), snapshot, low, high))
    for _ in range(5):
        write()
    interleaver = Interleaver(log.load)
    out: list[Event] = []
    pending = list(chunks)
    for event in stream:
        while pending and pending[0][3] < event.lsn:
            meta, rows_, low, high = pending.pop(0)
            out += interleaver.readonly_chunk(meta, rows_, low, high, T0, stream)
        out += interleaver.push(event)
    for meta, rows_, low, high in pending:
        out += interleaver.readonly_chunk(meta, rows_, low, high, T0, stream)
    assert base and replay(out) == table
    assert [e.position for e in out] == sorted(e.position for e in out)


def test_postgresql_array_and_nan_keys_compare_as_values():
    """An array key (a list, as PostgreSQL array keys land) and a float key holding NaN: a change inside
    the window drops its chunk row. Failed before: `unhashable type: 'list'` for any chunk of an
    array-keyed table, and the NaN row was emitted at HIGH over its newer update."""
    log = Log()
    key = ("k", "j")
    chunk_rows = [
        {"k": [1, None], "j": 1.0, "v": 0},
        {"k": [], "j": float("nan"), "v": 0},
        {"k": [2], "j": 0.5, "v": 0},
    ]
    log.chunk("L", "H", chunk_rows, key=key)
    events = [
        log.mark("LOW", "L"),
        log.change("u", {"k": [1, None], "j": 1.0, "v": 1}, key=key),
        log.change("u", {"k": [], "j": float("nan"), "v": 1}, key=key),
        log.mark("HIGH", "H"),
    ]
    out = run(log, events)
    assert [(e.op, e.after["k"], e.after["v"]) for e in out] == [("u", [1, None], 1), ("u", [], 1), ("r", [2], 0)]


def test_hashable_keys_equal_exactly_when_their_values_do():
    """`hashable`'s fast path (a key with no list or float is returned as it is) and its slow one agree:
    arrays as tuples (nested too), NaN one value, other floats and values themselves."""
    from capture.landing.keys import NAN, hashable

    plain = (1, "a", None)
    assert hashable(plain) is plain and hashable([1, "a"]) == (1, "a")
    assert hashable((1, [2, [3]])) == (1, (2, (3,)))
    assert hashable((float("nan"), 1.5)) == (NAN, 1.5) == hashable((float("nan"), 1.5))
    assert len({hashable((1, [2, 3])), hashable((1, [2, 3])), hashable((1, (2, 3)))}) == 1
