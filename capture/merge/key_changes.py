"""The Spark merge's side of capture/dump/key_changes.py: creates of PostgreSQL key changes that
leave TOASTed columns out, completed from the old key's state before the stream is appended to
the changelog (so the changelog replays to the target).

Such key changes are rare, so they are resolved on the driver: found from two small columns of
the landed files (`created_lsns`, no Spark job; a run without any costs nothing more), then the
run's rows of the keys involved, restricted to the missing columns, and the target's rows of the
old keys are collected, resolved in LSN order in plain Python (`resolve`, the rule reconcile.py
uses), and the values joined back onto the stream by LSN. Only when that leaves a value unknown
are the chunk rows of the old keys read for one the key change dropped (`chunk_knows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from capture.dump.key_changes import Unknown, chunk_knows, key_changes, resolve
from capture.dump.reconcile import StreamEvent, read_after
from capture.events import Row
from capture.landing.keys import NAN
from capture.sources.base import ReadView


def misses_columns(schemas: list[tuple[pa.Schema, Path]], start: int, frontier: int) -> bool:
    """Whether an event in [start, frontier) with an after image leaves columns out (PostgreSQL's
    unchanged TOASTed values). Only those need the merge's column-keeping steps; a file has
    `_missing` also when only deletes left columns out (a key-only old row), which changes nothing."""
    for schema, path in schemas:
        if "_missing" not in schema.names:
            continue
        data = pq.read_table(path, columns=["_lsn", "_op", "_missing"])
        lsn = data["_lsn"]
        in_run = pc.and_(
            pc.greater_equal(lsn, pa.scalar(Decimal(start), lsn.type)),
            pc.less(lsn, pa.scalar(Decimal(frontier), lsn.type)),
        )
        missing = pc.greater(pc.fill_null(pc.list_value_length(data["_missing"]), 0), 0)
        if pc.any(pc.and_(pc.and_(in_run, missing), pc.not_equal(data["_op"], "d"))).as_py():
            return True
    return False


def created_lsns(schemas: list[tuple[pa.Schema, Path]], start: int, frontier: int) -> list[int]:
    """LSNs in [start, frontier) of creates that miss columns: the new halves of key changes (an
    insert carries every column). Read on the driver from the files that have `_missing`."""
    found = []
    for schema, path in schemas:
        if "_missing" not in schema.names:
            continue
        data = pq.read_table(path, columns=["_lsn", "_op", "_missing"])
        missing = pc.fill_null(pc.list_value_length(data["_missing"]), 0)
        mask = pc.and_(pc.equal(data["_op"], "c"), pc.greater(missing, 0))
        found += [int(v) for v in data["_lsn"].filter(mask).to_pylist() if start <= int(v) < frontier]
    return found


def _plain(value: Any) -> Any:
    """A key value as a dict key: binary as bytes, arrays (PostgreSQL array keys) as tuples, a float
    NaN as `NAN` (one value, as Spark's join that found the row compares it)."""
    if isinstance(value, list):
        return tuple(_plain(v) for v in value)
    if isinstance(value, float) and value != value:
        return NAN
    return bytes(value) if isinstance(value, bytearray) else value


def _spark(value: Any) -> Any:
    """A `_plain` key value as Spark takes it back: `NAN` as the float NaN, in arrays too."""
    if value is NAN:
        return float("nan")
    return tuple(_spark(v) for v in value) if isinstance(value, tuple) else value


@dataclass
class KeyChanges:
    """One table's run: `types` are the stream's column types, `keys` its key columns."""

    spark: Any
    target: str
    keys: list[str]
    types: dict[str, Any]

    def complete(
        self,
        stream: Any,
        events: Any,
        lsns: list[int],
        chunk_rows: Any | None,
        hidden: Any | None,
        views: dict[int, ReadView] | None = None,
    ) -> tuple[Any, int, list[Unknown]]:
        """`stream` with the key changes at `lsns` completed and their `_missing` cleared; how many
        were completed; the values nothing held (NULL in the stream). `events`: the run's log events
        from its earliest LOW; `chunk_rows`/`hidden`: as TableMerge builds them (None: no chunks);
        `views`: the chunks' read views by `_cid` (PostgreSQL snapshots)."""
        from pyspark.sql import functions as sf

        wanted = self.spark.createDataFrame([(Decimal(x),) for n in lsns for x in (n - 1, n)], "_lsn decimal(38,0)")
        pairs = self._events(events.join(sf.broadcast(wanted), "_lsn"), ())
        moves = key_changes(pairs)
        created = [e for e in pairs if e.lsn in moves and e.op == "c"]
        columns = [c for c in self.types if any(c in e.missing for e in created)]
        old_keys = {k for k in moves.values() if k is not None}
        run = sorted(
            self._events(stream.join(sf.broadcast(self._keys({*old_keys, *(e.key for e in created)})), self.keys),
                         columns),
            key=lambda e: (e.lsn, e.order),
        )  # fmt: skip
        stored = {}
        if old_keys:
            rows = self.spark.table(self.target).join(sf.broadcast(self._keys(old_keys)), self.keys)
            stored = {self._key(r): r.asDict() for r in rows.select(*self.keys, *columns).collect()}
        fills, unknown = resolve(run, moves, stored)
        # a value left NULL (a TOASTed value is never NULL: unknown then) may be in a dropped chunk row
        if chunk_rows is not None and old_keys and any(v is None for f in fills.values() for v in f.values()):
            fallback = self._dropped(moves, old_keys, columns, chunk_rows, events, hidden, views or {})
            if fallback:
                fills, unknown = resolve(run, moves, stored, fallback)
        return self._filled(stream, fills, columns), len(fills), unknown

    def _dropped(
        self,
        moves: dict[int, Row | None],
        old_keys: set[Row],
        columns: list[str],
        chunk_rows: Any,
        events: Any,
        hidden: Any | None,
        views: dict[int, ReadView],
    ) -> dict[int, dict[str, Any]]:
        """Key change LSN -> what a chunk row of its old key, dropped for the key change, holds (the
        chunk's snapshot tells which of the row's newer events it saw: reconcile.py `read_after`)."""
        from pyspark.sql import functions as sf

        keys, wanted = self.keys, sf.broadcast(self._keys(old_keys))
        rows = chunk_rows.join(wanted, keys).select(*keys, *columns, "_cid", "_low", "_high").collect()
        if not rows:
            return {}
        by_key: dict[Row, list[StreamEvent]] = {}
        for e in self._events(events.join(wanted, keys), (), xids=True):
            by_key.setdefault(e.key, []).append(e)
        invisible: dict[tuple[int, Row], list[StreamEvent]] = {}
        if hidden is not None:
            for r in hidden.join(wanted, keys).collect():
                invisible.setdefault((r["_cid"], self._key(r)), []).extend(self._events_of([r], ()))
        fallback: dict[int, dict[str, Any]] = {}
        for r in rows:
            key, low, high = self._key(r), int(r["_low"]), int(r["_high"])
            hidden_of = invisible.get((r["_cid"], key), [])
            window = [e for e in by_key.get(key, ()) if low < e.lsn < high]
            after = read_after(views.get(r["_cid"]), hidden_of, window)
            values = {c: r[c] for c in (*keys, *columns)}
            for lsn in (n for n, old in moves.items() if old == key):
                knows = chunk_knows(values, [*hidden_of, *window], lsn - 1, tuple(keys), after)
                fallback[lsn] = {**knows, **fallback.get(lsn, {})}
        return fallback

    def _filled(self, stream: Any, fills: dict[int, dict[str, Any]], columns: list[str]) -> Any:
        from pyspark.sql import functions as sf
        from pyspark.sql import types as T

        if not fills:
            return stream
        schema = T.StructType(
            [
                T.StructField("_fill_lsn", T.DecimalType(38, 0)),
                T.StructField("_filled", T.ArrayType(T.StringType())),
                *(T.StructField(f"_fill{i}", self.types[c]) for i, c in enumerate(columns)),
            ]
        )
        frame = self.spark.createDataFrame(
            [(Decimal(lsn), list(fill), *(fill.get(c) for c in columns)) for lsn, fill in fills.items()], schema
        )
        on = (
            (stream["_lsn"] == frame["_fill_lsn"])
            & (stream["_source"] == "log")
            & (stream["_order"] == 0)
            & (stream["_op"] == "c")
        )
        joined = stream.join(sf.broadcast(frame), on, "left")
        position = {c: i for i, c in enumerate(columns)}
        out = []
        for name in stream.columns:
            if name in position:
                filled = sf.coalesce(sf.array_contains(sf.col("_filled"), name), sf.lit(False))
                out.append(sf.when(filled, sf.col(f"_fill{position[name]}")).otherwise(stream[name]).alias(name))
            elif name == "_missing":
                out.append(sf.when(sf.col("_fill_lsn").isNull(), stream[name]).alias(name))
            else:
                out.append(stream[name])
        return joined.select(*out)

    # -- between Spark rows and the plain-Python stream ------------------------------------------

    def _keys(self, keys: set[Row]) -> Any:
        from pyspark.sql import types as T

        schema = T.StructType([T.StructField(k, self.types[k]) for k in self.keys])
        return self.spark.createDataFrame([[_spark(v) for v in k] for k in keys], schema)

    def _key(self, row: Any) -> Row:
        return tuple(_plain(row[k]) for k in self.keys)

    def _events(self, frame: Any, columns: list[str] | tuple[()], xids: bool = False) -> list[StreamEvent]:
        picked = [*self.keys, *columns, "_lsn", "_order", "_op", "_missing", *(["_xid"] if xids else [])]
        return self._events_of(frame.select(*picked).collect(), columns)

    def _events_of(self, rows: list[Any], columns: list[str] | tuple[()]) -> list[StreamEvent]:
        return [
            StreamEvent(
                int(r["_lsn"]),
                int(r["_order"]),
                r["_op"],
                self._key(r),
                None if r["_op"] == "d" else {c: r[c] for c in (*self.keys, *columns)},
                tuple(r["_missing"] or ()),
                None if "_xid" not in r.__fields__ or r["_xid"] is None else int(r["_xid"]),
            )
            for r in rows
        ]
