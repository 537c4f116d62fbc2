"""Arrow (landing zone) types as Spark's, and the merge's own values as Spark columns and SQL:
key values from chunk metadata, inline tables, LSNs, the database's key folds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa

from capture.errors import MergeError
from capture.sources.key_folds import LOWER, UPPER


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def spark_type(arrow_type: pa.DataType) -> Any:
    """The Spark type Spark's Parquet reader gives a column of this Arrow type."""
    from pyspark.sql import types as T

    t = arrow_type
    simple = [
        (pa.types.is_boolean, T.BooleanType),
        (pa.types.is_int8, T.ByteType),
        (pa.types.is_int16, T.ShortType),
        (pa.types.is_int32, T.IntegerType),
        (pa.types.is_int64, T.LongType),
        (pa.types.is_float32, T.FloatType),
        (pa.types.is_float64, T.DoubleType),
        (pa.types.is_string, T.StringType),
        (pa.types.is_large_string, T.StringType),
        (pa.types.is_binary, T.BinaryType),
        (pa.types.is_large_binary, T.BinaryType),
        (pa.types.is_fixed_size_binary, T.BinaryType),
        (pa.types.is_date32, T.DateType),
        (pa.types.is_duration, T.LongType),  # TIME: microseconds (Iceberg has no interval type)
        (pa.types.is_time64, T.LongType),  # PostgreSQL time: microseconds since midnight (Spark 3.5 has no TIME)
    ]
    for test, spark in simple:
        if test(t):
            return spark()
    if pa.types.is_decimal(t):
        return T.DecimalType(t.precision, t.scale)
    if pa.types.is_timestamp(t):
        return T.TimestampNTZType() if t.tz is None else T.TimestampType()
    if pa.types.is_struct(t):
        return T.StructType([T.StructField(f.name, spark_type(f.type), True) for f in t])
    if pa.types.is_list(t):  # PostgreSQL arrays
        return T.ArrayType(spark_type(t.value_type), True)
    raise MergeError(f"Arrow type {t} is not supported by the merge")


def target_type(arrow_type: pa.DataType) -> Any:
    """The Iceberg column type: Spark's, with TINYINT/SMALLINT widened to int (Iceberg has neither)."""
    from pyspark.sql import types as T

    if pa.types.is_list(arrow_type):
        return T.ArrayType(target_type(arrow_type.value_type), True)
    spark = spark_type(arrow_type)
    return T.IntegerType() if isinstance(spark, (T.ByteType, T.ShortType)) else spark


def spark_value(value: Any, spark: Any) -> Any:
    """A key value from chunk metadata as the Python value Spark expects for its column type."""
    from pyspark.sql import types as T

    if value is None:
        return None
    if isinstance(spark, T.ArrayType) and isinstance(value, (list, tuple)):  # PostgreSQL array keys
        return [spark_value(v, spark.elementType) for v in value]
    if isinstance(value, timedelta):
        return value // timedelta(microseconds=1)
    if isinstance(spark, T.DecimalType) and not isinstance(value, Decimal):
        return Decimal(value)
    if isinstance(spark, T.TimestampType) and isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def spark_fold(column: Any, folds: str) -> Any:
    """A key column as the database's comparison folds it (capture/sources/key_folds.py `fold`, in
    Spark): trailing spaces dropped ('pad'), ASCII letters in lower case ('case')."""
    from pyspark.sql import functions as sf

    if "pad" in folds:
        column = sf.rtrim(column)
    if "case" in folds:
        column = sf.translate(column, UPPER, LOWER)
    return column


def widen_xid(xid: Any, near: Any) -> Any:
    """A 32-bit xid as the 64-bit xid (epoch | xid) closest to `near` (read_view.py `widen`)."""
    from pyspark.sql import functions as sf

    full = sf.shiftleft(sf.shiftright(near, 32), 32).bitwiseOR(xid)
    return (
        sf.when(full > near + (1 << 31), full - (1 << 32))
        .when(full < near - (1 << 31), full + (1 << 32))
        .otherwise(full)
    )


def values_frame(spark: Any, columns: list[tuple[str, str]], rows: list[tuple[Any, ...]]) -> Any:
    """A small frame of the merge's own values (at least one row) as an inline table: a plan
    without a job (`createDataFrame` passes rows through Python worker processes when they are
    read: a worker daemon started to broadcast 50 rows, seconds in a cold merge). Only digits
    and hex digits reach the SQL: integers, LSNs, aware datetimes (as microseconds), text (as
    UTF-8 hex), lists of integers, None."""

    body = ", ".join(
        "(" + ", ".join(sql_literal(v, t) for v, (_, t) in zip(r, columns, strict=True)) + ")" for r in rows
    )
    return spark.sql(f"SELECT * FROM VALUES {body} AS t({', '.join(quote(n) for n, _ in columns)})")


def sql_literal(value: Any, sql_type: str) -> str:
    """One value of the merge's own as SQL of type `sql_type` (see `values_frame`)."""
    if value is None:
        return f"CAST(NULL AS {sql_type})"
    if isinstance(value, str):
        return f"CAST(X'{value.encode().hex()}' AS STRING)"
    if isinstance(value, datetime):  # the log's commit times: UTC
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return f"timestamp_micros({(aware - _EPOCH) // timedelta(microseconds=1)})"
    if isinstance(value, list):
        return f"CAST(array({', '.join(str(int(v)) for v in value)}) AS {sql_type})"
    if isinstance(value, (int, Decimal)) and not isinstance(value, bool):
        return f"CAST({int(value)} AS {sql_type})"
    raise MergeError(f"the merge cannot write {type(value).__name__} into an inline table")


def row_constant(value: Any, sql_type: str, row: str = "_row") -> str:
    """A value of the merge's own as SQL for every row of a frame with a `_row` column (a chunk's
    bounds, see `_chunk_rows`), spelled so that the generated code does not hold it. Spark writes
    a timestamp constant into its generated Java source as a number, so two tables
    whose chunks differ only in their HIGH's commit time would compile their own classes (Janino,
    then the JIT: about 0.1 CPU-s per table of a run); decimals and strings are references,
    the same code for any value. A timestamp is therefore the decimal microseconds plus
    `_row * 0` (a column: not folded back into a constant)."""
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        micros = (aware - _EPOCH) // timedelta(microseconds=1)
        return f"timestamp_micros(CAST(CAST({micros} AS DECIMAL(20,0)) + {row} * 0 AS BIGINT))"
    return sql_literal(value, sql_type)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def lsn_column(value: int) -> Any:
    from pyspark.sql import functions as sf

    return sf.lit(Decimal(value)).cast("decimal(38,0)")


def all_of(conditions: list[Any]) -> Any:
    result = conditions[0]
    for condition in conditions[1:]:
        result = result & condition
    return result
