"""The Spark merge's side of capture/dump/old_keys.py: events logged under a key the table no longer
has (a PostgreSQL primary key swapped with `column_rewrites: accept`), named by the run's key before
anything compares keys (chunk windows, snapshots, repairs, key changes, the MERGE).

Found from the landed files' own key (`logtide.key`, no Spark job; a run whose files all have the
run's key costs nothing more). Such runs are rare: the events up to the last one logged under an older
key are read on the driver from those files, with the target's rows and the chunk rows of the old
keys involved, resolved in LSN order in plain Python (`old_key_rows`, the rule reconcile.py uses), and
the run key values joined back onto the events by LSN: a delete gets its row's run key, an update
that changed the run key gets a delete of the former one just before it (order -1, as a key change
the log did not split), and the split `_log_events` made of an old-key image without the run key
goes.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from capture.dump.key_changes import Unknown
from capture.dump.old_keys import Logged, file_key, needs, old_key_rows
from capture.events import Row
from capture.merge.key_changes import _plain, _spark


def _lsns(path: Path, start: int, stop: int) -> list[int]:
    """The file's LSNs in [start, stop)."""
    return [n for n in (int(v) for v in pq.read_table(path, columns=["_lsn"])["_lsn"].to_pylist()) if start <= n < stop]


def _read(path: Path, key: tuple[str, ...], start: int, stop: int) -> list[Logged]:
    """The file's events with start <= LSN <= stop (none read when it has none there)."""
    if not _lsns(path, start, stop + 1):
        return []
    names = pq.read_schema(path).names
    columns = ["_lsn", "_op", "before", "after", *(["_missing"] if "_missing" in names else [])]
    data = pq.read_table(path, columns=columns)
    lsn = data["_lsn"]
    data = data.filter(
        pc.and_(
            pc.greater_equal(lsn, pa.scalar(Decimal(start), lsn.type)),
            pc.less_equal(lsn, pa.scalar(Decimal(stop), lsn.type)),
        )
    )
    return [
        Logged(
            int(r["_lsn"]),
            r["_op"],
            r["before"],
            r["after"],
            tuple(r.get("_missing") or ()) if r["after"] is not None else (),
            key,
        )
        for r in data.to_pylist()
    ]


def old_key_events(
    spark: Any,
    target: str,
    run_key: list[str],
    types: dict[str, Any],
    schemas: list[tuple[pa.Schema, Path]],
    start: int,
    frontier: int,
    events: Any,
    chunk_rows: Any | None,
) -> tuple[Any, int, list[Unknown]]:
    """`events` (TableMerge `_log_events`) with the events logged under an older key named by
    `run_key`; how many were; the deletes whose row nothing held (left as landed)."""
    from pyspark.sql import functions as sf
    from pyspark.sql import types as T

    keys = tuple(run_key)
    files = [(path, file_key(schema)) for schema, path in schemas]
    older = [(p, k) for p, k in files if k and k != keys]
    if not older:
        return events, 0, []
    last = max((n for path, _ in older for n in _lsns(path, start, frontier)), default=-1)
    if last < 0:
        return events, 0, []
    logged = sorted((e for p, k in files for e in _read(p, k, start, last)), key=lambda e: e.lsn)
    if not any(needs(e, keys) for e in logged):
        return events, 0, []
    # the old keys' values the events name, and the target's and chunks' rows of them
    wanted: dict[tuple[str, ...], set[Row]] = {}
    for e in logged:
        if e.key != keys:
            for image in (e.before, e.after):
                if image is not None and all(image.get(c) is not None for c in e.key):
                    wanted.setdefault(e.key, set()).add(tuple(_plain(image[c]) for c in e.key))
    columns = list(dict.fromkeys([*keys, *(c for k in wanted for c in k)]))
    stored: dict[tuple[tuple[str, ...], Row], dict[str, Any]] = {}
    chunks: list[tuple[int, dict[str, Any]]] = []
    for key, values in wanted.items():
        schema = T.StructType([T.StructField(c, types[c]) for c in key])
        frame = sf.broadcast(spark.createDataFrame([[_spark(v) for v in row] for row in values], schema))
        for r in spark.table(target).join(frame, list(key)).select(*columns).collect():
            row = {c: _plain(r[c]) for c in columns}
            stored[(key, tuple(row[c] for c in key))] = row
        if chunk_rows is not None:
            for r in chunk_rows.join(frame, list(key)).select(*columns, "_low").collect():
                chunks.append((int(r["_low"]), {c: _plain(r[c]) for c in columns}))
    resolved = old_key_rows(logged, keys, lambda key, values: stored.get((key, values)), chunks)
    fixes = [(Decimal(n), "d", *k) for n, k in resolved.deletes.items()]
    fixes += [(Decimal(n), "n" if k is None else "l", *(k or (None,) * len(keys))) for n, k in resolved.leaves.items()]
    if not fixes:
        return events, 0, resolved.unknown
    schema = T.StructType(
        [
            T.StructField("_fx_lsn", T.DecimalType(38, 0)),
            T.StructField("_fx_kind", T.StringType()),
            *(T.StructField(f"_fx{i}", types[k]) for i, k in enumerate(keys)),
        ]
    )
    rows = [(lsn, kind, *(_spark(v) for v in values)) for lsn, kind, *values in fixes]
    fx = sf.broadcast(spark.createDataFrame(rows, schema))
    joined = events.join(fx, events["_lsn"] == fx["_fx_lsn"], "left")
    position = {k: i for i, k in enumerate(keys)}
    kind, order = sf.col("_fx_kind"), sf.col("_order")
    # the split of an old image without the run key goes: the fix says whether the row left one
    kept = joined.where(kind.isNull() | (order != -1))
    named = (kind == "d") & (order == 0)
    out = [
        sf.when(named, sf.col(f"_fx{position[c]}")).otherwise(sf.col(c)).alias(c) if c in position else sf.col(c)
        for c in events.columns
    ]
    left = joined.where((kind == "l") & (order == 0)).select(
        *(
            sf.col(f"_fx{position[c]}").alias(c)
            if c in position
            else sf.lit(-1).cast("bigint").alias(c)
            if c == "_order"
            else sf.lit("d").alias(c)
            if c == "_op"
            else sf.lit(None).cast("array<string>").alias(c)
            if c == "_missing"
            else sf.col(c)
            for c in events.columns
        )
    )
    return kept.select(*out).unionByName(left), len(fixes), resolved.unknown
