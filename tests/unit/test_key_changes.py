"""The rule completing PostgreSQL key changes that leave TOASTed columns out (capture/dump/key_changes.py),
shared by the Spark merge and reconcile.py: the old key's state in LSN order, chains, deletes, and a
chunk row the key change made stale."""

from __future__ import annotations

from capture.dump.key_changes import Unknown, chunk_knows, key_changes, resolve
from capture.dump.reconcile import StreamEvent
from capture.events import Lsn

KEY_ONLY, NO_BODY = ("title", "body"), ("body",)


def at(major: int, minor: int = 0) -> int:
    return Lsn(major, minor).encode()


def move(major: int, old: int, new: int, title: str) -> list[StreamEvent]:
    """A key change as pgoutput lands it: delete of the old key, create of the new one without the body."""
    return [
        StreamEvent(at(major, 0), 0, "d", (old,), None),
        StreamEvent(at(major, 1), 0, "c", (new,), {"id": new, "title": title, "body": None}, NO_BODY),
    ]


def insert(major: int, key: int, body: str) -> StreamEvent:
    return StreamEvent(at(major), 0, "c", (key,), {"id": key, "title": "t", "body": body})


def test_a_chain_takes_the_value_from_the_stored_row_of_its_first_key():
    stream = [*move(10, 1, 2, "a"), *move(11, 2, 3, "b")]
    moves = key_changes(stream)
    assert moves == {at(10, 1): (1,), at(11, 1): (2,)}
    fills, unknown = resolve(stream, moves, {(1,): {"id": 1, "title": "t", "body": "B"}})
    assert fills == {at(10, 1): {"body": "B"}, at(11, 1): {"body": "B"}} and unknown == []


def test_the_old_keys_latest_carried_value_wins_and_a_deleted_incarnation_of_the_new_key_does_not_count():
    stream = [
        insert(5, 2, "old incarnation of 2"),
        StreamEvent(at(6), 0, "d", (2,), None),
        insert(7, 1, "first"),
        StreamEvent(at(8), 0, "u", (1,), {"id": 1, "title": "u", "body": "second"}),
        StreamEvent(at(9), 0, "u", (1,), {"id": 1, "title": "v", "body": None}, NO_BODY),
        *move(10, 1, 2, "v"),
    ]
    fills, unknown = resolve(stream, key_changes(stream), {})
    assert fills == {at(10, 1): {"body": "second"}} and unknown == []


def test_a_value_nothing_holds_is_null_and_reported_until_an_event_carries_it():
    stream = [*move(10, 1, 2, "a"), *move(11, 2, 3, "b")]
    fills, unknown = resolve(stream, key_changes(stream), {})
    assert fills == {at(10, 1): {"body": None}, at(11, 1): {"body": None}}
    assert unknown == [Unknown((3,), "body", at(11, 1), (2,))]  # 2 no longer exists: only 3 is reported
    healed = [*stream, StreamEvent(at(12), 0, "u", (3,), {"id": 3, "title": "b", "body": "new"})]
    assert resolve(healed, key_changes(healed), {})[1] == []


def test_a_dropped_chunk_row_gives_what_no_other_newer_event_of_its_key_carried():
    row = {"id": 1, "title": "t", "body": "B"}
    update = StreamEvent(at(9), 0, "u", (1,), {"id": 1, "title": "u", "body": None}, NO_BODY)
    delete = move(10, 1, 2, "u")[0]
    assert chunk_knows(row, [update, delete], delete.lsn, ("id",)) == {"body": "B"}
    carried = StreamEvent(at(9), 0, "u", (1,), {"id": 1, "title": "u", "body": "C"})
    assert chunk_knows(row, [carried, delete], delete.lsn, ("id",)) == {}  # an update changed it
    assert chunk_knows(row, [update], delete.lsn, ("id",)) == {}  # read after the key change: not its row
    fills, _ = resolve(move(10, 1, 2, "u"), {at(10, 1): (1,)}, {}, {at(10, 1): {"body": "B"}})
    assert fills == {at(10, 1): {"body": "B"}}


def test_a_create_missing_columns_without_the_delete_before_it_has_no_old_key():
    create = move(10, 1, 2, "a")[1]
    assert key_changes([create]) == {at(10, 1): None}
    assert resolve([create], {at(10, 1): None}, {(1,): {"body": "B"}})[1] == [Unknown((2,), "body", at(10, 1), None)]
