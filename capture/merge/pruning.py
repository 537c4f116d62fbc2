"""The MERGE's key filter: ranges around a run's keys as a predicate on the target's first key
column, so that Iceberg reads only the data files that can hold them."""

from __future__ import annotations

from typing import Any

from capture.errors import MergeError
from capture.merge.spark_types import quote

# `key_filter`: up to this many distinct keys, bounded by at most this many ranges
PRUNE_MAX_KEYS = 100_000


PRUNE_RANGES = 32


def _literal_source(column: str, spark_type: Any) -> Any | None:
    """How a key value is collected for `_literal`: integers as they are, binary as hex, any other
    scalar as the hex of Spark's own text for it (cast back exactly in the same session); None:
    a type the filter does not handle (the MERGE then reads the whole table)."""
    from pyspark.sql import functions as sf
    from pyspark.sql import types as T

    col = sf.col(quote(column))
    if isinstance(spark_type, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        return col
    if isinstance(spark_type, T.BinaryType):
        return sf.hex(col)
    scalar = (T.StringType, T.DecimalType, T.DateType, T.TimestampType, T.TimestampNTZType, T.BooleanType)
    if isinstance(spark_type, scalar):  # not FLOAT/DOUBLE keys: NaN and -0.0 compare unlike other values
        return sf.hex(col.cast("string"))
    return None


def _literal(value: Any, spark_type: Any) -> str:
    """SQL for one collected key value. Only digits and hex digits reach the statement's text
    (no quoting to get wrong); constant folding turns it back into a literal Iceberg can use."""
    from pyspark.sql import types as T

    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    text = str(value)
    if any(ch not in "0123456789ABCDEF" for ch in text):  # '' is the empty string's (or binary's) hex
        raise MergeError(f"unexpected key text {text[:40]!r} for the MERGE's key filter")
    if isinstance(spark_type, T.BinaryType):
        return f"X'{text}'"
    if isinstance(spark_type, T.StringType):
        return f"CAST(X'{text}' AS STRING)"
    return f"CAST(CAST(X'{text}' AS STRING) AS {spark_type.simpleString().upper()})"


def _cuts(values: list[Any], numeric: bool, ranges: int) -> list[tuple[int, int]]:
    """Split sorted values into at most `ranges` runs [i, j]: at the largest gaps for numbers (the
    changes of a run cluster: new keys at the end, updates of recent rows), else by count."""
    n = len(values)
    if n <= ranges:
        return [(i, i) for i in range(n)]
    if numeric:
        gaps = sorted(range(1, n), key=lambda i: values[i] - values[i - 1], reverse=True)[: ranges - 1]
        starts = [0, *sorted(gaps)]
    else:
        starts = [i * n // ranges for i in range(ranges)]
    return [(s, e - 1) for s, e in zip(starts, [*starts[1:], n], strict=True)]


def key_filter(source: Any, keys: list[str], types: dict[str, Any], alias: str = "t") -> str | None:
    """A predicate on the target's first key column that every row the MERGE can match satisfies
    (so adding it to the ON clause changes nothing the MERGE does, only what it reads): up to
    PRUNE_RANGES ranges around the run's keys. Iceberg gets it as a scan filter and skips the
    data files (and Parquet row groups) whose min/max lie outside every range. None when the run
    has more than PRUNE_MAX_KEYS distinct first-key values or a key type without a literal."""
    from pyspark.sql import functions as sf
    from pyspark.sql import types as T

    first, spark_type = keys[0], types[keys[0]]
    text = _literal_source(first, spark_type)
    if text is None:
        return None
    numeric = isinstance(spark_type, (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.DecimalType))
    rows = (
        source.select(text.alias("_text"), sf.col(quote(first)).alias("_value"))
        .distinct()
        .orderBy("_value")
        .limit(PRUNE_MAX_KEYS + 1)
        # values only where `_cuts` measures gaps: Python turns a timestamp into local time, where
        # 9999-12-31 23:59 UTC may be past year 9999 (and 0001-01-01 before year 1)
        .select("_text", *(["_value"] if numeric else []))
        .collect()
    )
    if len(rows) > PRUNE_MAX_KEYS:
        return None
    column = f"{alias}.{quote(first)}"
    # a key part that landed as NULL (a value the landing zone cannot hold: PostgreSQL's numeric
    # NaN) matches the target's NULL (`<=>` in the MERGE): sorted first by the ORDER BY
    spans = [f"{column} IS NULL"] if rows and rows[0]["_text"] is None else []
    rows = rows[len(spans) :]
    if not rows:
        return spans[0] if spans else "false"
    for i, j in _cuts([r["_value"] if numeric else None for r in rows], numeric, PRUNE_RANGES):
        lo, hi = _literal(rows[i]["_text"], spark_type), _literal(rows[j]["_text"], spark_type)
        spans.append(f"{column} = {lo}" if i == j else f"({column} >= {lo} AND {column} <= {hi})")
    return "(" + " OR ".join(spans) + ")"
