"""What a source database family provides to the capture service.

The service loop, the landing zone and the checkpoint order are written once; a source
only turns its log into `LogItem`s and knows how to resume from its own positions.
No DB-API types cross this boundary.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from threading import Event
from typing import Any, Protocol

import pyarrow as pa

from capture.errors import DumpInputError
from capture.events import LogItem, Lsn, Row, TableSchema

WATERMARK_SCHEMA = "logtide"
WATERMARK_TABLE = "watermarks"
WATERMARK_COLUMNS = ("slot", "dump_id", "table_name", "chunk", "kind", "watermark_id", "written_at")


def check_watermark_columns(source: str, found: set[str]) -> None:
    """Refuse a watermark table that lacks a column the dumps write (made by hand, or by an
    older layout): it holds nothing but watermarks, so dropping it is the fix."""
    if missing := [c for c in WATERMARK_COLUMNS if c not in found]:
        raise DumpInputError(
            f"source {source!r}: {WATERMARK_SCHEMA}.{WATERMARK_TABLE} exists but lacks column(s) "
            f"{', '.join(missing)}; it holds nothing but watermarks: drop it and run `logtide setup`"
        )


class LogSource(Protocol):
    def preflight(self) -> None:
        """Check settings and grants; raise PreflightError saying exactly what to change."""

    def current_position(self, reset: bool = False) -> tuple[Lsn, dict[str, Any]]:
        """Frontier and resume token for a start from 'now' (first start, or --reset when
        `reset`: PostgreSQL drops and recreates its replication slot)."""

    def check_resumable(self, frontier: Lsn, resume: dict[str, Any]) -> None:
        """Raise CheckpointPurgedError / PositionWentBackwardsError if the log cannot continue there."""

    def read(self, resume: dict[str, Any], stop: Event, hold_s: float = 0.0) -> Iterator[LogItem]:
        """Yield the log from `resume` in commit order, a Heartbeat at least every heartbeat
        interval while idle; raise SourceConnectionError when the connection is lost. A source
        may hold transactions up to `hold_s` to hand them over together (TransactionEnd.read_at)."""

    def acknowledge(self, resume: dict[str, Any]) -> None:
        """Called right after each checkpoint write with its resume token: the source may now
        forget the log before it (PostgreSQL: forced slot feedback; MySQL/MariaDB: nothing)."""

    def lag_bytes(self, position: Lsn) -> int | None:
        """How far the server's log end is past `position`, in bytes when it can tell."""

    def retained_bytes(self) -> int | None:
        """Log the server keeps only for this capture (PostgreSQL: WAL held by the slot, from its
        restart LSN); None where the source keeps nothing for a reader (MySQL/MariaDB)."""

    def log_lag(self, resume: dict[str, Any]) -> dict[str, Any]:
        """For `logtide status`, without a running capture: how far the server's log end is past a
        checkpoint's resume token. Keys: `server_position`, `bytes` (None when the source cannot
        tell) and what else the source knows (`transactions`, `slot`, `retained_bytes`, a `note`)."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class Watermark:
    """One watermark write: the log alone tells which dump, table and chunk it belongs to."""

    dump_id: str
    table: str  # db.table
    chunk: int
    kind: str  # "LOW" or "HIGH"
    id: str  # unique per write (uuid4)


class ReadView(Protocol):
    """What a chunk's read could see, where the log's order alone does not say it (PostgreSQL: its
    snapshot; capture/sources/postgres/read_view.py). Stored with the chunk (`to_json`, read back by
    `capture.sources.read_view_from_json`); reconciliation asks it about log events before LOW (`hides`)
    and, for the columns of dropped rows (TOAST), about those in the window (`sees`)."""

    @property
    def lookback(self) -> int:
        """The encoded LSN from which on the log must be at hand for `hides` to be asked about it."""

    def hides(self, lsn: int, xid: int | None) -> bool:
        """Whether the read missed the log event at `lsn` (before LOW) of transaction `xid` (the
        log's transaction id as an integer; None: the log gives none)."""

    def sees(self, xid: int | None) -> bool | None:
        """Whether the read saw the committed transaction `xid` (of a log event in the chunk's window:
        committed before the read, its changes are in the chunk's rows); None: it cannot tell."""

    def to_json(self) -> dict[str, Any]: ...


class ChunkSource(Protocol):
    """What the dump engine needs from a source database. Values are Python values typed as
    the log's (see the source's types module); keys are compared by the database only."""

    def setup(self) -> None:
        """Create the watermark table if missing (PostgreSQL: and bring the publication in step
        with the captured tables); DumpInputError naming the missing grant. Checks `check_keys`."""

    def check_keys(self) -> None:
        """ConfigError naming each key in the config's `keys` that cannot be used (table missing
        or not captured, a column missing or nullable, a table with a key of its own; PostgreSQL:
        no replica identity), before anything is written (capture.sources.table_keys)."""

    def tables(self) -> list[tuple[str, str]]:
        """Captured base tables (the config's include/exclude)."""

    def describe(self, schema: str, table: str) -> TableSchema:
        """Columns and dump key; DumpInputError for an unknown table, UnusableTableError for one
        without a usable key."""

    def check_dumpable(self, table: TableSchema, start: Row | None, stop: Row | None) -> None:
        """UnusableTableError for a described table a dump still cannot cover: a key named in the
        config that two rows in [start, stop] share (one GROUP BY in the database); PostgreSQL: a
        table left out of the publication (no replica identity), whose changes are not in the log."""

    def estimate_rows(self, table: TableSchema) -> int: ...

    def write_watermark(self, mark: Watermark, table: TableSchema | None = None) -> None:
        """Write and commit the watermark row (a log event like any other). With `table` (a
        HIGH), a source may read that table's catalog in the same round trip, after the commit,
        for the `describe` the engine calls next. `watermarks: readonly` writes nothing: LOW
        begins the chunk's snapshot, HIGH ends it (see `log_position`)."""

    def finish_reads(self) -> None:
        """The chunk's reads are done (its SELECT, a key list's re-checks), before its file is
        written: a source may end the transaction they ran in (read-only watermarks: the
        snapshot, whose metadata lock would hold back an ALTER TABLE)."""

    def server_identity(self) -> str | None:
        """Read-only watermarks: which server the dump reads, as capture records it in its
        checkpoint's resume ("server"): the engine refuses a dump of another server, whose log
        positions do not compare with capture's. None with table watermarks."""

    def log_position(self) -> int | None:
        """Read-only watermarks: the encoded LSN in the log of the watermark last "written"
        (LOW: where the chunk's snapshot stands; HIGH: the log's end once the chunk file is
        durable), which the engine lands with the chunk; None with table watermarks."""

    def place_high(self, high: int, frontier: int | None) -> int:
        """Read-only watermarks: the HIGH to land for a HIGH read as `high`, given the landed
        frontier read right after it. MariaDB: one past the frontier's minor where a heartbeat moved
        the frontier to that very end (capture/sources/mysql/chunks.py). PostgreSQL: also above that frontier, since
        an idle stream's frontier stands at the WAL end HIGH was read at and only then steps past
        it (capture/sources/postgres/reader.py); any HIGH at or after the one read is sound (the
        window only grows)."""

    def select_chunk(
        self,
        table: TableSchema,
        after: Row | None,
        start: Row | None,
        stop: Row | None,
        limit: int,
        after_source: list[str] | None = None,
    ) -> pa.StructArray:
        """Up to `limit` rows in key order, in a snapshot newer than the last watermark, as an
        Arrow array of `table.row_type` (built column by column, not row by row). `after_source`:
        the key `after` is the landed form of, as `chunk_end` gave it; the rows go on after that
        (None: after `after`)."""

    def chunk_end(self) -> list[str] | None:
        """The last row of the last `select_chunk` as the source spells its key (PostgreSQL: each
        key column's text), for the next chunk to go on after exactly that row where its landed key
        is not the source's value (NULL, a date clamped to 0001-01-01 .. 9999-12-31); the dump keeps
        it in its progress, so a dump resumed by another process uses it too. None: the source's
        landed keys are its values (MySQL/MariaDB, whose ENUM keys keep their own numbers)."""

    def select_keys(self, table: TableSchema, keys: list[Row]) -> pa.StructArray: ...

    def clamped_keys(self) -> bool:
        """Whether the last `select_chunk` or `select_keys` returned a key value that lands as
        another value (PostgreSQL under `clamped_keys: accept`: a date past 9999 as 9999-12-31), so
        two of its rows may land as one key; the engine records it with the chunk
        (`ChunkMeta.clamped_keys`). False for MySQL/MariaDB, whose keys land as themselves."""

    def landed_keys(self, table: TableSchema, keys: list[Row]) -> list[Row]:
        """A key list as it would land, before anything is written: values a user may give in the
        database's own spelling only (PostgreSQL arrays as text, '{1,2}') read by the database,
        refused when they would not land as themselves, and parsed as the log's. MySQL/MariaDB:
        `keys` as they are (capture/dump/keys.py typed them)."""

    def key_folds(self, table: TableSchema) -> tuple[str, ...]:
        """Per key column, how the database compares it beyond byte equality, proven by the database
        on the column's type and collation (capture/sources/key_folds.py): recorded with key-list
        chunks for the merge's repair."""

    def key_after(self, table: TableSchema, key: Row, other: Row) -> bool:
        """Whether the database orders `key` after `other` in `table`'s key order (the key
        columns' types and collations), without reading a row."""

    # Optional (the engine asks with getattr; MySQL/MariaDB have neither):
    # value_changes(before, after) -> list[str]: what gave the table's rows new values without row events
    #   between two descriptions (a column added with a DEFAULT, renamed, retyped); without it every column
    #   added or retyped counts, and the dump reads the table again from its start.
    # generation(table) -> str | None: a JSON object of column name -> a token that a rewrite of the column
    #   changes even where it reads alike (PostgreSQL: its pg_attribute row's xmin; ALTER COLUMN ... TYPE ...
    #   USING): a column both generations hold whose token changed makes the dump read the table again.

    def read_view(self) -> ReadView | None:
        """What the last chunk read could see, when the log's order alone does not say it
        (PostgreSQL: the snapshot, since visibility can trail the WAL); stored with the chunk
        and used by reconciliation. None for MySQL/MariaDB."""

    def close(self) -> None: ...
