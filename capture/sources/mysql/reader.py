"""Turns the binlog's raw events (`binlog_events`) into Logtide's log items.

Transactions: MariaDB starts each with a GTID event (flag STANDALONE for DDL) and ends it
with an XID event, a COMMIT query (non-transactional engines) or, for DDL, the statement
itself. MySQL's BEGIN query plays the GTID event's part when GTIDs are off.

LSN: (binlog file number << 32 | offset of the event, index of the change inside the event);
the offset is the event's next position minus its body's length (as Logtide has always
numbered events: replays must give the LSNs already landed). Every event's offset is larger
than the previous event's, across file rotation the file number grows, so the order is total.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from threading import Event
from typing import Any

import pymysql
from pymysqlreplication.constants import FIELD_TYPE

from capture.config import SourceConfig
from capture.errors import BinlogDecodeError, PreflightError, SourceConnectionError
from capture.events import (
    Change,
    ChangeBatch,
    Heartbeat,
    LogItem,
    Lsn,
    Op,
    SchemaChange,
    TableSchema,
    TransactionEnd,
    Truncate,
)
from capture.log import get_logger
from capture.sources.base import WATERMARK_SCHEMA, WATERMARK_TABLE
from capture.sources.mysql import binlog_events as ev
from capture.sources.mysql.binlog_events import BinlogStream
from capture.sources.mysql.catalog import column_names, data_types, fractional_columns, system_period, table_keys
from capture.sources.mysql.column_rewrites import (
    Columns,
    check_column_rewrite,
    column_rewrite,
    columns_after,
    landed_column_types,
    table_charset,
)
from capture.sources.mysql.column_types import Collations, from_binlog
from capture.sources.mysql.connection import ER_SPECIFIC_ACCESS_DENIED, connection_settings, translate
from capture.sources.mysql.foreign_keys import (
    MAY_ADD,
    CascadingKey,
    added_by_text,
    cascading_keys,
    check_cascades,
)
from capture.sources.mysql.partitions import (
    PartitionChange,
    check_partition_change,
    partition_change,
    system_time_partitioned,
)
from capture.sources.mysql.rows import OLD_TEMPORAL, RowDecoder
from capture.sources.mysql.statements import (
    called_functions,
    created_by_select,
    hidden_writes,
    parse_alter,
    truncated_table,
    written_tables,
)
from capture.sources.mysql.table_charsets import may_change, unchanged_since
from capture.sources.mysql.table_maps import BinlogColumn, TableMap, TableMapCache
from capture.sources.mysql.table_moves import check_rename, dropped_database, table_moves, temporary_tables
from capture.sources.mysql.types import table_schema
from capture.sources.table_keys import log_key

THREAD_SPECIFIC = 0x04  # an event header's flag: the statement used a temporary table (or the pseudo thread id)
MARIADB_FL_STANDALONE = 0x01
MARIADB_FL_DDL = 0x20  # the GTID's event group holds DDL (CREATE TABLE ... SELECT carries rows as well)
_FILE_NUMBER = re.compile(r"\.(\d+)$")

log = get_logger(__name__)


def read_timeout_s(heartbeat_s: float) -> float:
    """Socket read timeout of the binlog connection: four missed heartbeats, but at least 10 s.
    An idle server keeps the connection alive with heartbeats, so idling longer is no error."""
    return max(10.0, 4 * heartbeat_s)


def file_number(name: str) -> int:
    match = _FILE_NUMBER.search(name)
    if match is None:
        raise PreflightError(f"binlog file name {name!r} does not end in a number")
    return int(match.group(1))


def position_lsn(file: str, pos: int) -> Lsn:
    return Lsn(file_number(file) << 32 | pos)


def parse_gtid_state(text: str) -> dict[int, str]:
    """'0-1-12,1-2-5' -> {0: '0-1-12', 1: '1-2-5'} (MariaDB: one GTID per replication domain)."""
    return {int(g.split("-")[0]): g for g in text.split(",") if g.strip()}


# the row end of a current row: the largest TIMESTAMP (2038-01-19 03:14:07.999999 UTC on MariaDB
# up to 11.4, 2106-02-07 06:28:15.999999 from 11.5 on 64-bit systems: a history row's row end
# is a commit time, never as late) or, with transaction-precise versioning, the largest BIGINT UNSIGNED
_CURRENT_TIMESTAMP = datetime(2038, 1, 19, 3, 14, 7, 999999)
_CURRENT_TRX_ID = 2**64 - 1


def period_type(col: BinlogColumn) -> bool:
    """Whether a column can be a system-versioning period column."""
    if col.nullable:
        return False
    return (col.type == FIELD_TYPE.TIMESTAMP2 and col.fsp == 6) or (col.type == FIELD_TYPE.LONGLONG and col.unsigned)


def current_row_end(col: BinlogColumn) -> Any:
    return _CURRENT_TIMESTAMP if col.type == FIELD_TYPE.TIMESTAMP2 else _CURRENT_TRX_ID


@dataclasses.dataclass(frozen=True)
class Versioning:
    """A system-versioned table's rows events as changes of its current rows, the rows `SELECT *`
    shows, without the period columns. The binlog carries every row the table stores: an INSERT
    writes a current row; an UPDATE updates the current row and writes the old one as a history
    row; a DELETE updates the row's end (to the statement's time); DELETE HISTORY and history
    purges delete history rows. So: a current row written is an insert, a history row written
    nothing; an update from current to current an update, from current to history a delete,
    from history to current an insert, between history rows nothing; a current row deleted a
    delete, a history row deleted nothing."""

    period: tuple[str, str]  # (row start, row end) column names
    visible: tuple[int, ...]  # indexes of the other columns
    end: int  # index of the row end
    current: Any  # the row end of current rows

    def changes(
        self, kind: int, decoder: RowDecoder, data: bytes, pos: int, end: int, start: int, keys: tuple[int, ...]
    ) -> list[Change]:
        visible, row_end, current = self.visible, self.end, self.current
        changes: list[Change] = []
        index = 0
        if kind in ev.UPDATE_ROWS:
            for before, after in decoder.pairs(data, pos, end):
                was, now = before[row_end] >= current, after[row_end] >= current
                old = tuple(before[i] for i in visible) if was else None
                new = tuple(after[i] for i in visible) if now else None
                if old is not None and new is not None and keys and any(old[i] != new[i] for i in keys):
                    changes.append(Change(Lsn(start, index), Op.DELETE, old, None))
                    index += 1
                    changes.append(Change(Lsn(start, index), Op.CREATE, None, new))
                elif old is not None and new is not None:
                    changes.append(Change(Lsn(start, index), Op.UPDATE, old, new))
                elif old is not None:
                    changes.append(Change(Lsn(start, index), Op.DELETE, old, None))
                elif new is not None:
                    changes.append(Change(Lsn(start, index), Op.CREATE, None, new))
                else:
                    continue
                index += 1
            return changes
        create = kind in ev.WRITE_ROWS
        for row in decoder.rows(data, pos, end):
            if row[row_end] >= current:
                image = tuple(row[i] for i in visible)
                if create:
                    changes.append(Change(Lsn(start, index), Op.CREATE, None, image))
                else:
                    changes.append(Change(Lsn(start, index), Op.DELETE, image, None))
                index += 1
        return changes


def refuse_zero_date_keys(table: TableSchema, dated_keys: tuple[int, ...], changes: list[Change], at: str) -> None:
    """Stop at a row whose DATE or DATETIME key column holds a zero date (a zero year, month or day:
    sql_mode without NO_ZERO_DATE / NO_ZERO_IN_DATE) or a day its month does not have (sql_mode
    ALLOW_INVALID_DATES), which decodes as NULL: rows whose keys differ
    only in their zero dates would land under one key, and a dump refuses such a table anyway."""
    for change in changes:
        for row in (change.before, change.after):
            if row is not None and any(row[i] is None for i in dated_keys):
                column = next(table.names[i] for i in dated_keys if row[i] is None)
                raise BinlogDecodeError(
                    f"{table.qualified_name}: a row changed at {at} has a zero date in key column {column!r} (a "
                    "zero year, month or day, which sql_mode without NO_ZERO_DATE / NO_ZERO_IN_DATE allows) or a "
                    "day its month does not have ('2020-02-30', which sql_mode ALLOW_INVALID_DATES allows), which "
                    "lands as NULL: rows whose keys differ only in such dates would land as one. Give those "
                    f"rows real dates, or leave {table.qualified_name} out of capture (exclude)"
                )


class BinlogReader:
    """One pass over the binlog from a resume token, until stopped or disconnected."""

    def __init__(
        self,
        name: str,
        config: SourceConfig,
        resume: dict[str, Any],
        stop: Event,
        cascades: set[CascadingKey] | None = None,
        landed: Callable[[], set[tuple[str, str]]] | None = None,
        history: Callable[[], list[dict]] | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.stop = stop
        self.mariadb = config.kind == "mariadb"
        self.file: str = resume["file"]
        self.gtids = parse_gtid_state(resume.get("gtid", ""))
        self.resume = resume
        # cascading foreign keys of captured tables already accepted (foreign_key_cascades: accept)
        self._cascades = cascades if cascades is not None else set()
        self._captured: dict[tuple[str, str], bool] = {}
        self._landed = landed  # the tables the landing zone holds (`_dropped_database`, `_columns`)
        self._history = history  # its schema history's records (`_columns`)
        self._landed_types: dict[tuple[str, str], Columns] | None = None  # from them, read once needed
        self._partial_types: set[tuple[str, str]] = set()  # ... from records without definitions
        self._mapped: set[tuple[str, str]] = set()  # captured tables whose rows this reader read
        # the table map read last of each captured table, and the column types ALTERs gave it since
        # (`_columns`): what a MODIFY of a type is judged against
        self._maps: dict[tuple[str, str], TableMap] = {}
        # captured tables' default charsets at the event being read (`_default_charset`), and its end
        self._charsets: dict[tuple[str, str], str | None] = {}
        self._collation_charsets: Collations | None = None  # `_collations`
        self._event_end = 4
        self._resumed_charsets: dict[tuple[str, str], str | None] = {}  # `_resumed_charset`
        self._altered: dict[tuple[str, str], tuple[TableMap | None, Columns | None]] = {}
        # sessions' temporary tables (by thread id) as their logged DDL shows them (`_table_moves`)
        self._temporary: dict[int, set[tuple[str, str]]] = {}
        # statement-logged writes of tables capture leaves out: what the catalog says they hide (`_statement_logged`)
        self._hidden: dict[tuple[frozenset[tuple[str, str]], frozenset[str]], list[str]] = {}
        self._catalog: pymysql.connections.Connection | None = None  # key lookups (`_key`), opened once needed
        self._fold: bool | None = None  # lower_case_table_names=1 (`_named`), asked once needed
        self._last_timestamp: int | None = None
        self._last_commit_ts = datetime.now(UTC)
        # read-only watermarks: heartbeats carry the binlog end, which moves the frontier (`_heartbeat`)
        self.placing_heartbeats = self.mariadb and config.watermarks == "readonly"
        self.server: str | None = None  # read-only: the server read, in every resume (`_resume`)
        self._read_to = position_lsn(self.file, int(resume.get("pos", 4)))  # every transaction before it ended

    def _stream(self) -> BinlogStream:
        return BinlogStream(self.config, self.resume, read_timeout_s(self.config.heartbeat_s))

    def captured(self, schema: str, table: str) -> bool:
        key = (schema, table)
        hit = self._captured.get(key)
        if hit is None:
            hit = self._captured[key] = (schema, table) == (WATERMARK_SCHEMA, WATERMARK_TABLE) or (
                schema != WATERMARK_SCHEMA and self.config.captures(schema, table)
            )
        return hit

    def __iter__(self) -> Iterator[LogItem]:
        stream = self._stream()
        if self.placing_heartbeats:
            self.server = stream.identity
        try:
            yield from self._items(stream)
        except pymysql.MySQLError as exc:
            if exc.args and exc.args[0] == ER_SPECIFIC_ACCESS_DENIED:
                raise PreflightError(f"source {self.name!r}: {exc.args[1]}") from None
            error = translate(exc, self.config)
            if isinstance(error, SourceConnectionError):
                raise error from None
            raise
        except SourceConnectionError as exc:
            raise SourceConnectionError(f"source {self.name!r}: {exc}") from None
        except (OSError, EOFError) as exc:
            raise SourceConnectionError(f"source {self.name!r}: {exc}") from None
        finally:
            stream.close()
            if self._catalog is not None:
                self._catalog.close()
                self._catalog = None

    def _items(self, stream: BinlogStream) -> Iterator[LogItem]:
        file_seq = file_number(self.file) << 32
        txid = ""
        commit_ts = datetime.now(UTC)
        pending_gtid: tuple[int, str] | None = None
        in_transaction = False
        standalone = False
        ddl_group = False
        watermark_key = (WATERMARK_SCHEMA, WATERMARK_TABLE)
        post_header = stream.post_header
        table_maps = TableMapCache(self.mariadb)
        tables: dict[int, TableMap] = {}  # table id -> the table map the next rows events refer to
        for kind, timestamp, server_id, log_pos, data, end in stream:
            if kind in ev.WRITE_ROWS or kind in ev.UPDATE_ROWS or kind in ev.DELETE_ROWS:
                table_id = int.from_bytes(data[ev.BODY : ev.BODY + 6], "little")
                table_map = tables.get(table_id)
                if table_map is None:
                    raise BinlogDecodeError(f"rows event ending at {self.file}:{log_pos} has no table map before it")
                if not self.captured(table_map.schema, table_map.table):
                    continue
                start = file_seq | (log_pos - (end - ev.BODY))
                table, decoder, versioning, dated_keys = self._table(table_map)
                watermark = (table_map.schema, table_map.table) == watermark_key
                pos = ev.rows_body(data, kind, post_header[kind])
                changes: list[Change] = []
                if versioning is not None:
                    changes = versioning.changes(kind, decoder, data, pos, end, start, table.key_indexes)
                    if dated_keys:
                        refuse_zero_date_keys(table, dated_keys, changes, f"{self.file}:{log_pos}")
                    if changes:
                        yield ChangeBatch(table, txid, commit_ts, watermark, changes)
                elif kind in ev.UPDATE_ROWS:
                    keys = table.key_indexes
                    index = 0
                    for before, after in decoder.pairs(data, pos, end):
                        if keys and any(before[i] != after[i] for i in keys):
                            changes.append(Change(Lsn(start, index), Op.DELETE, before, None))
                            index += 1
                            changes.append(Change(Lsn(start, index), Op.CREATE, None, after))
                        else:
                            changes.append(Change(Lsn(start, index), Op.UPDATE, before, after))
                        index += 1
                elif kind in ev.WRITE_ROWS:
                    for index, row in enumerate(decoder.rows(data, pos, end)):
                        changes.append(Change(Lsn(start, index), Op.CREATE, None, row))
                else:
                    for index, row in enumerate(decoder.rows(data, pos, end)):
                        changes.append(Change(Lsn(start, index), Op.DELETE, row, None))
                if versioning is None:
                    if dated_keys:
                        refuse_zero_date_keys(table, dated_keys, changes, f"{self.file}:{log_pos}")
                    yield ChangeBatch(table, txid, commit_ts, watermark, changes)
            elif kind == ev.TABLE_MAP:
                table_map = table_maps.get(data[ev.BODY : end], post_header[ev.TABLE_MAP])
                tables[table_map.table_id] = table_map
                if not table_map.seen:  # the table changed (or was emptied) since its last table map
                    self._note_map(table_map)
            elif kind == ev.XID:
                in_transaction = False
                yield self._end(log_pos, file_seq, pending_gtid, commit_ts)
                pending_gtid = None
            elif kind == ev.MARIADB_GTID:
                sequence = int.from_bytes(data[ev.BODY : ev.BODY + 8], "little")
                domain = int.from_bytes(data[ev.BODY + 8 : ev.BODY + 12], "little")
                txid = f"{domain}-{server_id}-{sequence}"
                pending_gtid = (domain, txid)
                commit_ts = self._commit_time(timestamp)
                standalone = bool(data[ev.BODY + 12] & MARIADB_FL_STANDALONE)
                ddl_group = bool(data[ev.BODY + 12] & MARIADB_FL_DDL)
                in_transaction = not standalone
            elif kind == ev.QUERY:
                schema, statement = ev.query_parts(data, end, post_header[ev.QUERY])
                if statement == "BEGIN":
                    in_transaction = True
                    if not self.mariadb:
                        txid = f"{self.file}:{log_pos}"
                        commit_ts = self._commit_time(timestamp)
                    continue
                if in_transaction and statement.startswith("SAVEPOINT "):
                    continue  # logged inside a transaction, no schema change
                if in_transaction and (statement == "ROLLBACK" or statement.startswith("ROLLBACK TO ")):
                    # logged when a non-transactional write keeps the rolled-back rows in the log:
                    # those rows have been yielded already and cannot be taken back
                    raise BinlogDecodeError(
                        f"{statement!r} at {self.file}:{log_pos} undoes rows already read from the binlog (a "
                        "transaction that also wrote a non-transactional table rolled back): capture cannot follow it"
                    )
                if statement == "COMMIT":
                    in_transaction = False
                    yield self._end(log_pos, file_seq, pending_gtid, commit_ts)
                    pending_gtid = None
                    continue
                if self.mariadb and in_transaction and not ddl_group and not statement.startswith("XA "):
                    self._statement_logged(schema, statement, log_pos)  # refused unless it writes no captured table
                    continue
                lsn = Lsn(file_seq | (log_pos - (end - ev.BODY)))
                self._event_end = log_pos
                if not self.mariadb and not in_transaction:
                    txid = f"{self.file}:{log_pos}"
                    commit_ts = self._commit_time(timestamp)
                made = created_by_select(schema, statement)
                if made is not None and self.captured(*self._named(made)):
                    raise BinlogDecodeError(
                        f"{statement[:60]!r} at {self.file}:{log_pos} creates {made[0]}.{made[1]} from a SELECT logged "
                        "as its statement (a session with binlog_format STATEMENT or MIXED): its rows are not in the "
                        "log, and capture reads row events only"
                    )
                if MAY_ADD.search(statement):
                    self._check_cascades(schema, statement, log_pos)
                partitioned = partition_change(statement, schema)
                if partitioned is not None:
                    partitioned = self._partition_change(partitioned, statement, log_pos)
                # a statement that used a temporary table (LOG_EVENT_THREAD_SPECIFIC_F): a TRUNCATE then
                # emptied the session's temporary table of that name, not the captured table (DROP and
                # RENAME: `table_moves`)
                temporary = bool(data[ev.BODY - 2] & THREAD_SPECIFIC)
                thread = int.from_bytes(data[ev.BODY : ev.BODY + 4], "little")
                emptied = self._table_moves(schema, statement, temporary, thread, log_pos)
                emptied = emptied or self._dropped_database(statement)
                rewrite = column_rewrite(
                    statement, schema, temporary, self._columns, self._default_charset, self._collations()
                )
                rewritten = None if rewrite is None else self._named(rewrite.table)
                if rewritten is not None and rewritten[0] != WATERMARK_SCHEMA and self.captured(*rewritten):
                    check_column_rewrite(self.name, self.config, rewrite, statement, f"{self.file}:{log_pos}")
                if not temporary and "alter" in statement[:40].lower():
                    self._alter_columns(schema, statement)
                if not temporary:
                    self._follow_charsets(schema, statement)
                self._hidden.clear()  # DDL may have created or dropped a trigger, view or function
                yield SchemaChange(lsn, txid, commit_ts, schema, statement)
                truncated = None if temporary else truncated_table(schema, statement)
                if truncated is None and partitioned is not None and partitioned.whole:
                    truncated = partitioned.table  # TRUNCATE PARTITION ALL: the whole table emptied
                truncated = None if truncated is None else self._named(truncated)
                if truncated is not None and truncated[0] != WATERMARK_SCHEMA and self.captured(*truncated):
                    yield Truncate(lsn, txid, commit_ts, *truncated)
                for index, gone in enumerate(emptied):
                    yield Truncate(Lsn(lsn.major, index), txid, commit_ts, *gone)
                for gone in [truncated, *emptied] if truncated is not None else emptied:
                    last = self._maps.pop(gone, None)
                    if last is not None:
                        last.seen = False  # its next table map (likely this one) is noted again
                    self._altered[gone] = (None, None)  # its landed rows are gone: no MODIFY changes them
                if standalone or not in_transaction:
                    standalone = False
                    yield self._end(log_pos, file_seq, pending_gtid, commit_ts)
                    pending_gtid = None
            elif kind == ev.EXECUTE_LOAD_QUERY:  # the file's blocks came before it: no rows
                schema, statement = ev.query_parts(data, end, post_header[ev.EXECUTE_LOAD_QUERY])
                self._statement_logged(schema, statement, log_pos)
            elif kind == ev.FORMAT_DESCRIPTION and int.from_bytes(data[ev.BODY + 52 : ev.BODY + 56], "little"):
                self._temporary.clear()  # written at a server start (`created` set): its sessions are gone
            elif kind == ev.ROTATE:
                self.file = data[ev.BODY + 8 : end].decode()
                file_seq = file_number(self.file) << 32
                tables.clear()  # table ids are not stable across a server restart, which rotates the binlog
            elif (kind == ev.HEARTBEAT or kind == ev.HEARTBEAT_V2) and not in_transaction:
                # between event groups only: a GTID event's group (a standalone DDL's too) has ended
                yield self._heartbeat(kind, log_pos, data[ev.BODY : end]) if pending_gtid is None else Heartbeat()
            if self.stop.is_set() and not in_transaction:
                return

    def _note_map(self, table_map: TableMap) -> None:
        """Note a captured table's map as the one read last (`_maps`), once a table map object: the
        same object comes back from `TableMapCache` for every TABLE_MAP event until the table changes
        (an ALTER, a reopened table: a new table id); one of a table emptied since is noted again."""
        table_map.seen = True
        if self.captured(table_map.schema, table_map.table):
            self._maps[table_map.schema, table_map.table] = table_map

    def _heartbeat(self, kind: int, log_pos: int, body: bytes) -> Heartbeat:
        """A heartbeat; with read-only watermarks on MariaDB, one that names where the binlog ends.

        MariaDB's dump thread sends HEARTBEAT_LOG_EVENT only while it waits at the end of the active
        binlog, having sent (or, for event kinds capture is not sent, skipped) every event before it:
        its header's log_pos is that end, its body the file's name (sql/sql_repl.cc wait_new_events,
        send_heartbeat_event). The end moves only once a whole commit group is written, so it is a
        transaction boundary, and every event after it starts at or past it; on MariaDB every event
        group begins with a GTID event, which capture does not land, so no landed event will ever have
        an LSN at or below it. Past 4 GiB log_pos is 0 (the position moves into a sub-header): no
        position then, as when the heartbeat names a file the reader is not in."""
        if kind != ev.HEARTBEAT or not self.placing_heartbeats or log_pos == 0:
            return Heartbeat()
        if body.decode(errors="replace") != self.file:
            return Heartbeat()
        at = position_lsn(self.file, log_pos)
        if at < self._read_to:
            return Heartbeat()
        self._read_to = at
        resume = {"file": self.file, "pos": log_pos, "gtid": ",".join(self.gtids[d] for d in sorted(self.gtids))}
        if self.server is not None:
            resume["server"] = self.server
        return Heartbeat(at, resume)

    def _statement_logged(self, schema: str, statement: str, log_pos: int) -> None:
        """A row change logged as its statement (a session with binlog_format STATEMENT or MIXED)
        carries no rows: passed over when it writes only tables capture leaves out, else refused."""
        tables = written_tables(statement, schema)
        where = f"{statement[:60]!r} at {self.file}:{log_pos} is a row change logged as its statement (a session "
        where += "with binlog_format STATEMENT or MIXED, or a write to a table with transaction-precise system "
        where += "versioning, AS ROW START on BIGINT UNSIGNED, which MariaDB logs as statements)"
        if tables is None:
            raise BinlogDecodeError(
                f"{where} in database {schema!r}: capture cannot tell which tables it writes, and reads row events only"
            )
        tables = {self._named(table) for table in tables}
        captured = sorted(f"{s}.{t}" for s, t in tables if self.captured(s, t))
        if captured:
            raise BinlogDecodeError(f"{where} writing {', '.join(captured)}: capture reads row events only")
        functions = called_functions(statement)
        key = (frozenset(tables), frozenset(functions))
        hidden = self._hidden.get(key)
        if hidden is None:
            hidden = self._hidden[key] = hidden_writes(self._catalog_connection(), tables, functions)
        if hidden:
            raise BinlogDecodeError(
                f"{where} in database {schema!r}: capture cannot tell which tables {hidden[0]} writes, and reads "
                "row events only"
            )

    def _check_cascades(self, schema: str, statement: str, log_pos: int) -> None:
        """DDL that may have made a captured table the child of a cascading foreign key (REFERENCES
        or RENAME): ask the catalog, and refuse (or, accepted, warn about) a key not seen before.
        The catalog is read now, later than the DDL when capture is behind: a statement that adds a
        cascading key to a captured table is refused on its text too, if the catalog no longer shows
        one on that table (dropped since), since the cascades in between left no rows in the log."""
        where = f"DDL at {self.file}:{log_pos} ({statement[:80]!r}) made captured tables"
        found = cascading_keys(self._catalog_connection(), self.config)
        new = [key for key in found if key not in self._cascades]
        check_cascades(self.name, self.config, new, where)
        self._cascades.update(new)
        gone = added_by_text(schema, statement)
        if gone is None or not self.captured(gone.schema, gone.table):
            return
        if any((k.schema, k.table) == (gone.schema, gone.table) for k in found):
            return
        if gone not in self._cascades:
            check_cascades(self.name, self.config, [gone], where.replace("made", "added a cascading key to"))
            self._cascades.add(gone)

    def _table_moves(
        self, schema: str, statement: str, temporary: bool, thread: int, log_pos: int
    ) -> list[tuple[str, str]]:
        """The captured names a DROP TABLE, RENAME or CREATE OR REPLACE TABLE empties (`table_moves`),
        each to land as a truncate; a RENAME that brings rows under a captured name stops capture
        here (`table_renames: refuse`) or warns (accept: the name is emptied as well). A session
        logging statements logs its temporary tables' DDL, flagged (`temporary`) but for RENAME
        TABLE: the temporary tables of each session (`thread`) are followed so that a RENAME TABLE
        of one (shadowing a captured name, say) moves no captured table's rows."""
        if temporary:
            temporary_tables(statement, schema, self._temporary.setdefault(thread, set()), self._named)
        sessions = self._temporary.get(thread)
        moves = table_moves(statement, schema, temporary, sessions, self._named)
        if sessions is not None and not sessions:
            del self._temporary[thread]
        if moves is None:
            return []

        def captured(tables: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
            named = (self._named(t) for t in tables)
            return [t for t in named if t[0] != WATERMARK_SCHEMA and self.captured(*t)]

        arrived = captured(moves.arrived)
        if arrived:
            check_rename(self.name, self.config, arrived, statement, f"{self.file}:{log_pos}")
        emptied = captured(moves.removed)
        return emptied + [t for t in arrived if t not in emptied]

    def _columns(self, table: tuple[str, str]) -> Columns | None:
        """The column types of a captured table before the ALTER being read (`column_rewrite`): from
        the table map read last, as the ALTERs since changed them; None when no landed row of it can
        change (a table capture leaves out, one emptied since: no rows read since a truncate, a drop;
        one the landing zone does not hold). Rows landed before the reader started and none read
        since: the types the landed schema history shows, as its ALTERs since changed them
        (`landed_column_types`: the whole types its `table` records carry; from a record landed
        before they did, integers, DECIMAL, FLOAT, DOUBLE, temporal, BIT only, and a warning)."""
        table = self._named(table)
        if table[0] == WATERMARK_SCHEMA or not self.captured(*table):
            return None
        last = self._maps.get(table)
        altered = self._altered.get(table)
        if altered is not None and altered[0] is last:
            return altered[1]
        if last is not None:
            return {col.name.lower(): from_binlog(col) for col in last.columns}
        if self._landed is None or table not in self._landed():
            return None
        if self._landed_types is None:  # as landed before this reader started (no DDL of the table since)
            history = self._history() if self._history is not None else []
            self._landed_types, self._partial_types = landed_column_types(
                history, self._resumed_charset, self._collations()
            )
        if table in self._partial_types:
            self._partial_types.discard(table)  # said once
            log.warning(
                "capture.column_types_partly_known",
                source=self.name,
                table=f"{table[0]}.{table[1]}",
                reason="the landed schema history's last table record of it was landed before column definitions "
                "were recorded (an older landing zone): its string types (length, charset, ENUM/SET values) and "
                "nullability are not known, so an ALTER changing them is refused as a column rewrite",
                fix="a row of the table read by this version lands a record with them; until then "
                "`column_rewrites: accept` and a dump of the table",
            )
        return dict(self._landed_types.get(table, {}))

    def _default_charset(self, table: tuple[str, str]) -> str | None:
        """The table's default charset at the event being read (`table_charsets`): as the DDL read
        since set it, else the catalog's if no DDL logged since the event changed it (asked once a
        table, then followed); None when not known."""
        table = self._named(table)
        if table not in self._charsets:
            conn = self._catalog_connection()
            self._charsets[table] = unchanged_since(conn, table, self.file, self._event_end, self._collations())
        return self._charsets[table]

    def _resumed_charset(self, table: tuple[str, str]) -> str | None:
        """The table's default charset where this reader resumed, for the landed history's ALTERs
        (`landed_column_types`): the catalog's, if no DDL logged since may have changed it (one
        binlog scan a table)."""
        table = self._named(table)
        if table not in self._resumed_charsets:
            at = (str(self.resume["file"]), int(self.resume.get("pos", 4)))
            self._resumed_charsets[table] = unchanged_since(self._catalog_connection(), table, *at, self._collations())
        return self._resumed_charsets[table]

    def _follow_charsets(self, schema: str, statement: str) -> None:
        """Follow the default charsets `_default_charset` knows through a DDL statement: set where it
        names one, forgotten (asked again when needed) where it may have changed one otherwise."""
        stated = table_charset(statement, schema, self._collations())
        text = statement.lower()
        for table in [t for t in self._charsets if t[1].lower() in text]:  # parsed only if it may name it
            if may_change(statement, schema, table, self._collations()):
                del self._charsets[table]
        if stated is not None and stated[1] is not None:
            self._charsets[self._named(stated[0])] = stated[1]

    def _alter_columns(self, schema: str, statement: str) -> None:
        """Follow the column types of the captured table an ALTER TABLE (landed) changes (`_columns`)."""
        table = parse_alter(statement, schema)[2]
        if table is None:
            return
        table = self._named(table)
        before = self._columns(table)
        if before is not None:
            after = columns_after(statement, schema, before, self._default_charset, self._collations())
            self._altered[table] = (self._maps.get(table), after)

    def _dropped_database(self, statement: str) -> list[tuple[str, str]]:
        """The captured tables a DROP DATABASE empties, each to land as a truncate: those of the
        database whose rows this reader read, or that the landing zone holds (log events, dump
        chunks). A table created there since the last of those, with no rows yet, has none to take."""
        dropped = dropped_database(statement)
        if dropped is None:
            return []
        schema = self._named((dropped, ""))[0]
        known = self._mapped | (self._landed() if self._landed is not None else set())
        return sorted(t for t in known if t[0] == schema and schema != WATERMARK_SCHEMA and self.captured(*t))

    def _partition_change(self, change: PartitionChange, statement: str, log_pos: int) -> PartitionChange | None:
        """A partition statement that drops or moves rows (`partitions`): None when it changes no
        captured table's landed rows; the change when it is reproduced (TRUNCATE PARTITION ALL of a
        captured table); else capture stops here (`partition_changes: refuse`) or warns (accept)."""
        tables = [self._named(t) for t in change.tables]
        captured = [t for t in tables if t[0] != WATERMARK_SCHEMA and self.captured(*t)]
        if not captured:
            return None
        if change.whole:
            return change
        if change.other is None and system_time_partitioned(self._catalog_connection(), *self._named(change.table)):
            return None  # history partitions only: the current rows stay, and capture lands current rows only
        check_partition_change(self.name, self.config, change, captured, statement, f"{self.file}:{log_pos}")
        return None

    def _commit_time(self, timestamp: int) -> datetime:
        """The event header's commit time (whole seconds): one datetime a second, shared by the
        transactions committed in it (the writer converts each distinct object once)."""
        if timestamp != self._last_timestamp:
            self._last_timestamp, self._last_commit_ts = timestamp, datetime.fromtimestamp(timestamp, UTC)
        return self._last_commit_ts

    def _end(self, pos: int, file_seq: int, gtid: tuple[int, str] | None, commit_ts: datetime) -> TransactionEnd:
        gtids = self.gtids
        if gtid is not None:
            gtids[gtid[0]] = gtid[1]
        resume = {"file": self.file, "pos": pos}
        self._read_to = frontier = Lsn(file_seq | pos)
        if self.mariadb:
            # one replication domain (the common case): its GTID is the whole state
            one = gtid is not None and len(gtids) == 1
            resume["gtid"] = gtid[1] if one else ",".join(gtids[d] for d in sorted(gtids))
        if self.server is not None:
            resume["server"] = self.server
        return TransactionEnd(frontier, resume, commit_ts)

    def _table(self, table_map: TableMap) -> tuple[TableSchema, RowDecoder, Versioning | None, tuple[int, ...]]:
        """Schema, row decoder, (a system-versioned table) row filter and key columns of a DATE or
        DATETIME type (`refuse_zero_date_keys`) of a table map, built once per distinct table map
        (`table_maps`)."""
        compiled = table_map.compiled
        if compiled is None:
            self._mapped.add((table_map.schema, table_map.table))
            if any(col.type in OLD_TEMPORAL for col in table_map.columns):
                self._refuse_old_fractions(table_map)
            if any(col.type == FIELD_TYPE.STRING and col.character_set_name == "binary" for col in table_map.columns):
                self._refuse_plugin_types(table_map)
            decoder = RowDecoder(table_map)
            versioning = self._versioning(table_map)
            columns, key = table_map.columns, table_map.key
            if versioning is not None:
                columns = tuple(columns[i] for i in versioning.visible)
                key = tuple(k for k in key if k not in versioning.period)
            described = table_schema(table_map.schema, table_map.table, columns, key)
            if not described.key:
                described = dataclasses.replace(described, key=self._key(described))
            dated = tuple(i for i in described.key_indexes if described.columns[i].source_type.startswith("date"))
            compiled = table_map.compiled = (described, decoder, versioning, dated)
        return compiled

    def _versioning(self, table_map: TableMap) -> Versioning | None:
        """The row filter of a MariaDB system-versioned table (None for any other table). Its period
        columns are NOT NULL TIMESTAMP(6) or BIGINT UNSIGNED, so only a table map with two such
        columns asks the catalog, which names them (`system_period`) as the table is now: a table
        map without those columns predates ADD SYSTEM VERSIONING, and one with the implicit
        `row_start` and `row_end` (the latter in its primary key, if it has one) the table no longer
        has predates DROP SYSTEM VERSIONING."""
        if not self.mariadb:
            return None
        candidates = {col.name for col in table_map.columns if period_type(col)}
        if len(candidates) < 2:
            return None
        conn = self._catalog_connection()
        period = system_period(conn, table_map.schema, table_map.table)
        if period is None or not set(period) <= candidates:
            implicit = {"row_start", "row_end"}
            gone = (
                implicit <= candidates
                and (not table_map.key or "row_end" in table_map.key)  # a versioned table's key ends with it
                and not implicit & column_names(conn, table_map.schema, table_map.table)
            )
            period = ("row_start", "row_end") if gone else None
        if period is None:
            return None
        names = [col.name for col in table_map.columns]
        end = table_map.columns[names.index(period[1])]
        visible = tuple(i for i, name in enumerate(names) if name not in period)
        return Versioning(period, visible, names.index(period[1]), current_row_end(end))

    def _refuse_old_fractions(self, table_map: TableMap) -> None:
        """MariaDB 5.3's temporal formats (columns created with mysql56_temporal_format=OFF) store
        fractional seconds without saying how many digits in the table map: such a column's values
        cannot be decoded, whole seconds can. The catalog tells them apart."""
        fractional = fractional_columns(self._catalog_connection(), table_map.schema, table_map.table)
        for col in table_map.columns:
            if col.type in OLD_TEMPORAL and col.name in fractional:
                raise BinlogDecodeError(
                    f"{table_map.schema}.{table_map.table}: column {col.name!r} has fractional seconds in MariaDB "
                    "5.3's format (created with mysql56_temporal_format=OFF), which the binlog cannot describe: "
                    "rewrite it with ALTER TABLE ... FORCE while mysql56_temporal_format=ON"
                )

    def _refuse_plugin_types(self, table_map: TableMap) -> None:
        """MariaDB's INET4, INET6 and UUID columns reach the binlog as BINARY(n) of their stored
        bytes, where SELECT shows text (and a dump refuses them): the catalog tells them apart."""
        kinds = data_types(self._catalog_connection(), table_map.schema, table_map.table)
        for col in table_map.columns:
            kind = kinds.get(col.name, "binary")
            if col.type == FIELD_TYPE.STRING and col.character_set_name == "binary" and kind not in ("binary", "char"):
                raise BinlogDecodeError(
                    f"{table_map.schema}.{table_map.table}: column {col.name!r} is {kind.upper()}, which the binlog "
                    "carries as raw bytes where SELECT shows text: capture cannot land it as the source shows it"
                )

    def _named(self, table: tuple[str, str]) -> tuple[str, str]:
        """(db, table) as a statement's text names it, as row events and the catalog name it: with
        lower_case_table_names=1 the server stores names in lowercase and compares them so."""
        if self._fold is None:
            with self._catalog_connection().cursor() as cursor:
                cursor.execute("SELECT @@lower_case_table_names")
                self._fold = int(cursor.fetchone()[0]) == 1
        return (table[0].lower(), table[1].lower()) if self._fold else table

    def _collations(self) -> Collations:
        """The server's collations and their charsets (`column_types.Collations`), read once."""
        if self._collation_charsets is None:
            self._collation_charsets = Collations.load(self._catalog_connection())
        return self._collation_charsets

    def _catalog_connection(self) -> pymysql.connections.Connection:
        if self._catalog is None:
            self._catalog = pymysql.connect(**connection_settings(self.config), autocommit=True)
        return self._catalog

    def _key(self, table: TableSchema) -> tuple[str, ...]:
        """The key of a table whose table map names no primary key, as the dump finds it: a UNIQUE
        index on NOT NULL columns (read from the catalog now), else the key the configuration names."""
        keys = table_keys(self._catalog_connection(), table.schema, table.table)
        return log_key(keys.own if keys else (), self.config.named_key(table.schema, table.table), table.names)
