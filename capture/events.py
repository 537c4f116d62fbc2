"""The change event, its log sequence number (LSN), and the table schema it was written under.

These types know no database: every source turns its log into them, the landing zone
stores them, and the merge reads them back.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from functools import cached_property
from typing import Any, NamedTuple

import pyarrow as pa

MINOR_BITS = 32


class Lsn(NamedTuple):
    """A position in one source's log; ordered, never going backwards for that source.

    MySQL/MariaDB: major = binlog file number << 32 | event start offset, minor = index of the
    change inside the rows event. PostgreSQL: major = the transaction's commit LSN, minor =
    index of the change inside the transaction.
    """

    major: int
    minor: int = 0

    def encode(self) -> int:
        """The sortable integer stored in the landing zone (fits DECIMAL(38,0))."""
        if not 0 <= self.minor < 1 << MINOR_BITS:
            raise ValueError(f"LSN minor {self.minor} out of range")
        return self.major << MINOR_BITS | self.minor

    @classmethod
    def decode(cls, value: int) -> Lsn:
        value = int(value)
        return cls(value >> MINOR_BITS, value & ((1 << MINOR_BITS) - 1))


LSN_ARROW_TYPE = pa.decimal128(38, 0)
UTC_MICROS = pa.timestamp("us", tz="UTC")  # commit times as the landing zone stores them


def lsn_text(value: int | None) -> str | None:
    """An encoded LSN as it leaves the process (XCom, Asset event extras, JSON output): decimal text.

    Encoded LSNs pass 2**64 (MariaDB's binlog.000001 already gives 18446744073709551616 and up),
    which Airflow's XCom serializer refuses and JSON readers that hold numbers as int64 or float64
    (JavaScript, jq, the UI) refuse or round. Readers take it back with `int(text)`."""
    return None if value is None else str(int(value))


class Op(StrEnum):
    CREATE = "c"
    UPDATE = "u"
    DELETE = "d"


@dataclass(frozen=True)
class Column:
    name: str
    arrow_type: pa.DataType
    source_type: str  # the database's own spelling, e.g. "bigint unsigned", "decimal(65,30)"
    # the column's whole definition as the source reads it back (MariaDB/MySQL: length, charset,
    # ENUM values, signedness, nullability, from the table map: `column_types.definition`), landed
    # in the schema history's `table` records; None where the source gives none. Not part of the
    # fingerprint nor of equality.
    definition: str | None = field(default=None, compare=False)


def definitions_digest(definitions: list[str | None]) -> str | None:
    """What tells a table's column definitions apart (None when there are none): a new one lands a
    new `table` record of the schema history (`zone.schema_version`)."""
    if not any(definitions):
        return None
    return hashlib.sha1("\x1f".join(d or "" for d in definitions).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class TableSchema:
    """Columns and key of a table at one moment of the log."""

    schema: str
    table: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    # The database orders and compares the key exactly as Spark orders and compares its landed
    # values (integers, decimals, dates and times, bytes, strings under a byte-order NO PAD
    # collation), so the merge may judge a dump chunk's key range itself. Set from the catalog
    # by a dump's `describe` (the source decides); False wherever nobody asked.
    exact_key_order: bool = False
    # PostgreSQL: the relation OID the description came from, landed in the schema history so that a
    # restart knows which relation the name held (a new OID: the table was dropped and created again,
    # or another renamed in). Not part of the fingerprint nor of equality.
    relation: int | None = field(default=None, compare=False)
    # A dump's `describe`: the catalog's whole column definitions (MariaDB/MySQL: COLUMN_TYPE, charset,
    # collation, nullability), so that a dump sees changes the fingerprint does not show (`VARCHAR(10)` to
    # `VARCHAR(3)`, another charset, an ENUM member added): capture/dump/engine.py `_changed`. None where
    # the source gives none. Not part of the fingerprint nor of equality.
    catalog: str | None = field(default=None, compare=False)

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.table}"

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @cached_property
    def key_indexes(self) -> tuple[int, ...]:
        return tuple(self.names.index(k) for k in self.key)

    @cached_property
    def fingerprint(self) -> str:
        text = "|".join(f"{c.name}:{c.source_type}" for c in self.columns) + "|key:" + ",".join(self.key)
        return hashlib.sha1(text.encode()).hexdigest()[:16]

    @cached_property
    def definitions(self) -> str | None:
        """`definitions_digest` of its columns' definitions."""
        return definitions_digest([c.definition for c in self.columns])

    @cached_property
    def row_type(self) -> pa.StructType:
        return pa.struct(
            [pa.field(c.name, c.arrow_type, metadata={"source_type": c.source_type}) for c in self.columns]
        )


Row = tuple[Any, ...]


class Change(NamedTuple):
    """One changed row: full before and after images (None where the operation has none).
    A primary-key update arrives as a DELETE of the old key and a CREATE of the new.

    `missing` names columns whose value the log does not carry (PostgreSQL leaves unchanged
    TOASTed values out of updates): NULL there in the image (after for c/u, before for d)
    means unknown, and the merge keeps the stored value. Empty for MySQL/MariaDB."""

    lsn: Lsn
    op: Op
    before: Row | None
    after: Row | None
    missing: tuple[str, ...] = ()


@dataclass(slots=True)
class ChangeBatch:
    """The changes one log record carries for one table (a binlog rows event), in LSN order.

    Table, transaction and commit time are shared by every change of the batch, so they are
    carried once; a change event is a `Change` together with them."""

    table: TableSchema
    txid: str
    commit_ts: datetime
    watermark: bool
    changes: list[Change]


@dataclass(slots=True)
class SchemaChange:
    """A DDL statement as the log carried it."""

    lsn: Lsn
    txid: str
    commit_ts: datetime
    schema: str
    statement: str


@dataclass(slots=True)
class Truncate:
    """A TRUNCATE of one captured table, at its place in the log: every row of the table that
    exists before `lsn` is gone; events after it apply as usual. PostgreSQL's one Truncate
    message naming several relations (CASCADE, or a list) becomes one of these per captured
    relation, with consecutive LSNs. Landed as a `truncate` record of the schema history."""

    lsn: Lsn
    txid: str
    commit_ts: datetime
    schema: str
    table: str
    # PostgreSQL: the relation OID of a table DROPPED (no row events tell it): landed with the record, so
    # a restart knows the drop has landed (sources/postgres/schema_change.py). None for every other truncate.
    relation: int | None = None

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.table}"


@dataclass(slots=True)
class TransactionEnd:
    """A commit: every event before it belongs to a finished transaction.

    `frontier` is the position just past the commit; `resume` is what the source needs to
    continue from here (stored verbatim in the checkpoint). `read_at` (time.monotonic()): when
    the source began reading the oldest transaction this end closes, if it held transactions
    before handing them over; the landing writer's flush interval counts from there. `flush`:
    the source has read all there is after a group large enough to be committed on its own
    (the end of a backlog): the writer commits now rather than at the end of its interval.
    `keep`: keys of `resume` that change seldom and ride only in the end after they changed (and in
    a reader's first end): the writer keeps their last value in every later checkpoint.
    """

    frontier: Lsn
    resume: dict[str, Any]
    commit_ts: datetime
    read_at: float | None = None
    flush: bool = False
    keep: tuple[str, ...] = ()


@dataclass(slots=True)
class Heartbeat:
    """The source is idle and we have read everything it has (lag is zero).

    `frontier` (MariaDB with `watermarks: readonly`, else None): the source says its log ends at
    this position and every event before it has been read, all transactions ended: no event will
    ever be read before it. The landing writer may then move the frontier there (its minor counts
    the moves at one position: `LogWriter.advance`), so that a read-only HIGH at the log's end is
    passed on an idle server. `resume` goes with it into the checkpoint."""

    frontier: Lsn | None = None
    resume: dict[str, Any] | None = None


LogItem = ChangeBatch | SchemaChange | Truncate | TransactionEnd | Heartbeat


class ColumnBatch(ChangeBatch):
    """A ChangeBatch whose changes are already Arrow columns laid out as the event files store
    them (`events`: _lsn, _op, _txid, _commit_ts, before, after, and _missing when some change
    has missing columns). Its changes may belong to several transactions, each row carrying
    its own; `txid` and `commit_ts` are the first row's. The writer appends the columns as
    they are; `changes` rebuilds `Change` rows for anyone else."""

    __slots__ = ("events",)

    def __init__(self, table: TableSchema, txid: str, commit_ts: datetime, watermark: bool, events: pa.Table) -> None:
        self.table, self.txid, self.commit_ts, self.watermark = table, txid, commit_ts, watermark
        self.events = events

    @property  # type: ignore[override]
    def changes(self) -> list[Change]:
        events = self.events
        missing = events["_missing"].to_pylist() if "_missing" in events.column_names else [None] * len(events)
        return [
            Change(
                Lsn.decode(int(lsn)),
                Op(op),
                None if before is None else tuple(before.values()),
                None if after is None else tuple(after.values()),
                tuple(gone or ()),
            )
            for lsn, op, before, after, gone in zip(
                events["_lsn"].to_pylist(),
                events["_op"].to_pylist(),
                events["before"].to_pylist(),
                events["after"].to_pylist(),
                missing,
                strict=True,
            )
        ]


def column_batch(
    table: TableSchema,
    txid: str,
    commit_ts: datetime,
    watermark: bool,
    lsn: pa.Array,
    txids: pa.Array,
    commit_times: pa.Array,
    ops: pa.Array,
    before: pa.Array,
    after: pa.Array,
    missing: pa.Array | None = None,
) -> ColumnBatch:
    """A ColumnBatch of len(ops) changes: `lsn` as `_lsn` stores it (LSN_ARROW_TYPE), each
    change's transaction id (string) and commit time (UTC_MICROS), `txid` and `commit_ts` the
    first change's; `before`/`after` StructArrays of `table.row_type` (null rows where an
    operation has no image), `missing` a list<string> array or None when no change misses a column."""
    arrays = [lsn, ops, txids, commit_times, before, after]
    names = ["_lsn", "_op", "_txid", "_commit_ts", "before", "after"]
    if missing is not None:
        arrays.append(missing)
        names.append("_missing")
    return ColumnBatch(table, txid, commit_ts, watermark, pa.Table.from_arrays(arrays, names=names))
