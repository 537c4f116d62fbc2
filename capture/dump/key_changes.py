"""Key changes that leave TOASTed columns out (PostgreSQL, REPLICA IDENTITY DEFAULT), completed
from the old key's state. The one rule, shared by the Spark merge and reconcile.py.

`UPDATE t SET id = 2 WHERE id = 1` of a row whose out-of-line value is unchanged arrives as a
delete of the old key (key columns only) at LSN L - 1 and a create of the new key at L that does
not carry that value (`missing`): the log holds it nowhere. An insert carries every column, so a
create with `missing` is always such a key change, and its delete is the change just before it in
the same transaction.

The old key's value just before L is what the stream says (in LSN order): the stored target row
(`stored`, the state before the stream), then every event of the key that carries the column, a
delete forgetting it. A chain (1 -> 2 -> 3) resolves in order, since the completed create is the
new key's state. Where that leaves a column unknown, a chunk row of the old key dropped because
the key change is among its newer events can still hold it (`chunk_knows`). Where nothing does
(the row was written before capture started and never dumped), the column is NULL and reported
(`Unknown`), never silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from capture.events import Lsn, Row

if TYPE_CHECKING:
    from capture.dump.reconcile import StreamEvent


@dataclass(frozen=True)
class Unknown:
    """A column a key change left out whose value no state of the old key holds: NULL in the target."""

    key: Row  # the key that holds NULL now
    column: str
    lsn: int  # the key change that wrote it
    old_key: Row | None


def key_changes(log_events: list[StreamEvent]) -> dict[int, Row | None]:
    """LSN of each key change's create that misses columns -> the old key (None: its delete is not
    among `log_events`, which must hold the change before each such create)."""
    deletes = {e.lsn: e.key for e in log_events if e.op == "d" and e.order == 0}
    return {
        e.lsn: deletes.get(e.lsn - 1) if Lsn.decode(e.lsn).minor > 0 else None
        for e in log_events
        if e.op == "c" and e.order == 0 and e.missing
    }


def is_completed(event: StreamEvent, moves: dict[int, Row | None]) -> bool:
    """Whether `event` is the create of a key change in `moves` (the event `resolve` completes)."""
    return event.order == 0 and event.op == "c" and bool(event.missing) and event.lsn in moves


def resolve(
    stream: list[StreamEvent],
    moves: dict[int, Row | None],
    stored: dict[Row, dict[str, Any]],
    fallback: dict[int, dict[str, Any]] | None = None,
) -> tuple[dict[int, dict[str, Any]], list[Unknown]]:
    """The values of the columns each key change of `moves` left out (LSN -> column -> value, None
    where unknown), and the unknown ones that the key still lacks at the end of the stream.

    `stream`: in (LSN, order), at least every event of the old keys and of the new keys; rows may
    hold only some columns (those not present are unknown). `stored`: the old keys' rows before the
    stream. `fallback`: LSN -> values known from a dropped chunk row (`chunk_knows`)."""
    state: dict[Row, dict[str, Any] | None] = {}  # None: deleted; else the columns known
    before: dict[int, dict[str, Any]] = {}  # key change LSN -> the old key's columns before its delete
    fills: dict[int, dict[str, Any]] = {}
    lost: dict[tuple[Row, str], Unknown] = {}

    def known(key: Row) -> dict[str, Any]:
        return (state[key] or {}) if key in state else dict(stored.get(key, {}))

    for event in stream:
        key = event.key
        if event.op == "t":  # a TRUNCATE: no key holds anything before it
            state = dict.fromkeys(state)
            stored = {}
            lost = {}
            continue
        if event.row is None:
            if event.order == 0 and event.lsn + 1 in moves and moves[event.lsn + 1] == key:
                before[event.lsn + 1] = known(key)
            state[key] = None
            lost = {k: u for k, u in lost.items() if k[0] != key}
            continue
        values = {c: v for c, v in event.row.items() if c not in event.missing}
        if is_completed(event, moves):
            old, extra = before.get(event.lsn, {}), (fallback or {}).get(event.lsn, {})
            fill = {}
            for c in event.missing:
                if c in old or c in extra:
                    fill[c] = values[c] = old[c] if c in old else extra[c]
                else:
                    fill[c] = None
                    lost[(key, c)] = Unknown(key, c, event.lsn, moves[event.lsn])
            fills[event.lsn] = fill
        else:
            previous = known(key)
            values.update((c, previous[c]) for c in event.missing if c in previous)
        for c in values:
            lost.pop((key, c), None)
        state[key] = values
    return fills, list(lost.values())


def chunk_knows(
    row: dict[str, Any],
    newer: list[StreamEvent],
    delete_lsn: int,
    key_columns: tuple[str, ...],
    after: list[StreamEvent] | None = None,
) -> dict[str, Any]:
    """What a chunk row of an old key gives a key change whose delete (at `delete_lsn`) is among
    the row's newer events (`newer`: in its window, or hidden from its snapshot), so it was dropped:
    the row was read before the delete (the key did not exist after it), and where every other
    newer event is an update leaving a column out, that column is the one the key change moved.

    `after` (reconcile.py `read_after`; None: unknown): those of `newer` that happened after the
    read (PostgreSQL: its snapshot did not see them). Then the row was read before the delete only
    if the delete is among them, and only those between the read and the delete count: a key
    created again after the delete (a key swap, 3 -> 8, 7 -> 3, 8 -> 7) does not make the row
    another's, and an update the snapshot saw is in the row already."""
    if after is not None:
        if not any(e.lsn == delete_lsn and e.row is None for e in after):
            return {}
        others = [e for e in after if e.lsn < delete_lsn]
    else:
        if not any(e.lsn == delete_lsn for e in newer):
            return {}
        others = [e for e in newer if e.lsn != delete_lsn]
    if any(e.op != "u" or e.row is None for e in others):
        return {}
    return {c: v for c, v in row.items() if c not in key_columns and all(c in e.missing for e in others)}
