"""Events logged under a key the table no longer has, named by the run's key (PostgreSQL, a primary key
swapped with `column_rewrites: accept`: `DROP CONSTRAINT t_pkey; ADD PRIMARY KEY (v2)`). The one rule,
shared by the Spark merge (capture/merge/old_keys.py) and reconcile.py.

Each landed file records the key its events were logged under (`logtide.key`; a new key starts a new
file), and the merge names rows by the newest. An event logged under an older key K may not carry the
run's key R: a DELETE's old tuple holds K only (REPLICA IDENTITY DEFAULT), and an UPDATE that changed an
R column carries no old tuple at all (R was no key then). Named by R as landed, the delete deletes
nothing and the update leaves the row under its former R beside the updated one.

So the row is found by its K values in what the stream knows of it before the event, in LSN order: the
run's earlier events, else the target's row (`stored`), else the latest chunk row read after a LOW
before the event (`chunks`: a delete inside the chunk's window, or after it, of a row the target got
from that chunk). A delete is written under that row's R; an update whose R differs from the row's
is preceded by a delete of the former R (a key change under R). A deleted row nothing holds is
reported (`Unknown`), never guessed: its delete stays as landed (it deletes nothing, and nothing holds
the row). An update nothing holds has no former R to leave.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import count
from typing import Any

import pyarrow as pa

from capture.dump.key_changes import Unknown
from capture.events import Row
from capture.landing.keys import hashable


def file_key(schema: pa.Schema) -> tuple[str, ...]:
    """The key a landed file's events were logged under (its `logtide.key`; empty: none recorded)."""
    text = (schema.metadata or {}).get(b"logtide.key", b"").decode()
    return tuple(k for k in text.split(",") if k)


@dataclass(frozen=True)
class Logged:
    """A landed log event with the key it was logged under (its file's `logtide.key`)."""

    lsn: int
    op: str  # c, u, d
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    missing: tuple[str, ...]  # columns the after image does not carry (PostgreSQL TOAST)
    key: tuple[str, ...]


@dataclass
class OldKeys:
    """What the events logged under an older key become under the run's key: `deletes` (LSN of such a
    delete -> the run key of its row), `leaves` (LSN of such an update -> the run key the row leaves,
    to delete just before it; None: the row keeps its run key, so no delete before it), and the
    deletes whose row nothing held (`unknown`)."""

    deletes: dict[int, Row]
    leaves: dict[int, Row | None]
    unknown: list[Unknown]


def _values(image: dict[str, Any] | None, columns: tuple[str, ...]) -> Row | None:
    """The image's values of `columns`, None when it does not carry one (a key column is never NULL)."""
    if image is None or any(image.get(c) is None for c in columns):
        return None
    return hashable(tuple(image[c] for c in columns))


def needs(event: Logged, run_key: tuple[str, ...]) -> bool:
    """Whether the rule must name this event's row by `run_key`: logged under another key, and its
    image that names the row lacks the run key (a key-only delete), or an update without an old image
    carrying it (which may have changed it)."""
    if event.key == tuple(run_key) or not event.key or event.op == "c":
        return False
    return _values(event.before, tuple(run_key)) is None


def old_key_rows(
    events: list[Logged],
    run_key: tuple[str, ...],
    stored: Callable[[tuple[str, ...], Row], dict[str, Any] | None],
    chunks: list[tuple[int, dict[str, Any]]],
) -> OldKeys:
    """The rule over `events` (in LSN order: at least every event up to the last one `needs` names, of
    any key). `stored(columns, values)`: the target's row with those values of `columns`, or None;
    `chunks`: (LOW, row) of the chunk rows that may hold such rows."""
    run_key = tuple(run_key)
    out = OldKeys({}, {}, [])
    if not any(needs(e, run_key) for e in events):
        return out
    keys = {e.key for e in events if e.key} | {run_key}
    rows: dict[int, dict[str, Any]] = {}  # the rows the events made, by a number of their own
    numbers = count()
    index: dict[tuple[str, ...], dict[Row, int]] = {k: {} for k in keys}
    read: dict[tuple[tuple[str, ...], Row], list[tuple[int, dict[str, Any]]]] = {}
    for low, row in chunks:
        for k in keys:
            values = _values(row, k)
            if values is not None:
                read.setdefault((k, values), []).append((low, row))

    def forget(number: int) -> None:
        row = rows.pop(number)
        for k in keys:
            values = _values(row, k)
            if values is not None and index[k].get(values) == number:
                del index[k][values]

    def remember(row: dict[str, Any]) -> None:
        number = next(numbers)
        rows[number] = row
        for k in keys:
            values = _values(row, k)
            if values is not None:
                index[k][values] = number

    def find(key: tuple[str, ...], values: Row, lsn: int) -> tuple[int | None, dict[str, Any] | None]:
        number = index[key].get(values)
        if number is not None:
            return number, rows[number]
        if values in gone[key]:  # deleted in the run: what the target or a chunk holds is older
            return None, None
        row = stored(key, values)
        if row is None:
            earlier = [(low, r) for low, r in read.get((key, values), ()) if low < lsn]
            row = max(earlier, key=lambda x: x[0])[1] if earlier else None
        return None, row

    gone: dict[tuple[str, ...], set[Row]] = {k: set() for k in keys}
    for event in events:
        if not event.key:
            continue
        named = event.before if event.before is not None else event.after
        values = _values(named, event.key)
        number, previous = (None, None) if event.op == "c" or values is None else find(event.key, values, event.lsn)
        if number is not None:
            forget(number)
        if previous is not None:
            for k in keys:
                was = _values(previous, k)
                if was is not None:
                    gone[k].add(was)
        if needs(event, run_key):
            former = _values(previous, run_key)
            if event.op == "d":
                if former is not None:
                    out.deletes[event.lsn] = former
                else:
                    out.unknown.append(Unknown(values or (), ",".join(run_key), event.lsn, None))
            else:
                out.leaves[event.lsn] = (
                    former if former is not None and former != _values(event.after, run_key) else None
                )
        if event.op == "d" or event.after is None:
            continue
        row = dict(event.after)
        for c in event.missing:
            row[c] = (previous or {}).get(c)
        for k in keys:
            now = _values(row, k)
            if now is not None:
                gone[k].discard(now)
        remember(row)
    return out
