"""Turns the binlog, as mysql-replication streams it, into Logtide's log items.

Transactions: MariaDB starts each with a GTID event (flag STANDALONE for DDL) and ends it
with an XID event, a COMMIT query (non-transactional engines) or, for DDL, the statement
itself. MySQL's BEGIN query plays the GTID event's part when GTIDs are off.

LSN: (binlog file number << 32 | start offset of the event, index of the change inside
the event). Every event's start offset is larger than the previous event's, across file
rotation the file number grows, so the order is total and replays give the same LSNs.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from threading import Event
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

from capture.config import SourceConfig
from capture.errors import PreflightError, SourceConnectionError
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
)
from capture.sources.base import WATERMARK_SCHEMA, WATERMARK_TABLE
from capture.sources.mysql import table_maps
from capture.sources.mysql.catalog import table_keys
from capture.sources.mysql.connection import (
    ER_SPECIFIC_ACCESS_DENIED,
    LOST_CONNECTION,
    connection_settings,
    translate,
)
from capture.sources.mysql.types import RowConverter, table_schema
from capture.sources.table_keys import log_key


class _RaisingConnection(pymysql.connections.Connection):
    """A PyMySQL connection whose lost-connection errors are not OperationalErrors.

    mysql-replication silently reconnects on errors 2006/2013 and, with a MariaDB GTID start,
    replays from where the *session* began. Logtide reconnects itself, from its checkpoint,
    so the library must see an error it does not catch. As a stream's control connection it
    also holds the stream's parsed table maps (`table_maps`).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.table_maps: dict[bytes, dict[str, Any]] = {}
        super().__init__(*args, **kwargs)

    def _read_packet(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super()._read_packet(*args, **kwargs)
        except pymysql.err.OperationalError as exc:
            if exc.args and exc.args[0] in LOST_CONNECTION:
                raise SourceConnectionError(f"lost the binlog connection: {exc.args[-1]}") from None
            raise


table_maps.install()

MARIADB_FL_STANDALONE = 0x01
_FILE_NUMBER = re.compile(r"\.(\d+)$")
EVENTS = [
    RotateEvent,
    MariadbGtidEvent,
    QueryEvent,
    XidEvent,
    HeartbeatLogEvent,
    TableMapEvent,
    WriteRowsEvent,
    UpdateRowsEvent,
    DeleteRowsEvent,
]


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


class BinlogReader:
    """One pass over the binlog from a resume token, until stopped or disconnected."""

    def __init__(self, name: str, config: SourceConfig, resume: dict[str, Any], stop: Event) -> None:
        self.name = name
        self.config = config
        self.stop = stop
        self.mariadb = config.kind == "mariadb"
        self.file: str = resume["file"]
        self.gtids = parse_gtid_state(resume.get("gtid", ""))
        self.resume = resume
        self._captured: dict[tuple[str, str], bool] = {}
        self._catalog: pymysql.connections.Connection | None = None  # key lookups (`_key`), opened once needed
        self._last_timestamp: int | None = None
        self._last_commit_ts = datetime.now(UTC)

    def _stream(self) -> BinLogStreamReader:
        heartbeat = self.config.heartbeat_s
        position: dict[str, Any]
        if self.mariadb:
            position = {"auto_position": self.resume.get("gtid", "")}
        else:
            position = {"resume_stream": True, "log_file": self.resume["file"], "log_pos": self.resume["pos"]}
        return BinLogStreamReader(
            connection_settings=connection_settings(self.config, read_timeout=read_timeout_s(heartbeat)),
            server_id=self.config.server_id,
            blocking=True,
            is_mariadb=self.mariadb,
            only_events=EVENTS,
            slave_heartbeat=heartbeat,
            pymysql_wrapper=_RaisingConnection,
            enable_logging=False,
            **position,
        )

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

    def _items(self, stream: BinLogStreamReader) -> Iterator[LogItem]:
        file_seq = file_number(self.file) << 32
        txid = ""
        commit_ts = datetime.now(UTC)
        pending_gtid: tuple[int, str] | None = None
        in_transaction = False
        standalone = False
        watermark_key = (WATERMARK_SCHEMA, WATERMARK_TABLE)
        for event in stream:
            if isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
                if not self.captured(event.schema, event.table):
                    continue
                start = file_seq | (event.packet.log_pos - event.event_size)
                table, convert = self._table(event)
                watermark = (event.schema, event.table) == watermark_key
                changes: list[Change] = []
                if isinstance(event, WriteRowsEvent):
                    for index, row in enumerate(event.rows):
                        changes.append(
                            Change(Lsn(start, index), Op.CREATE, None, convert(row["values"], row["none_sources"]))
                        )
                elif isinstance(event, UpdateRowsEvent):
                    keys = table.key_indexes
                    index = 0
                    for row in event.rows:
                        before = convert(row["before_values"], row["before_none_sources"])
                        after = convert(row["after_values"], row["after_none_sources"])
                        if keys and any(before[i] != after[i] for i in keys):
                            changes.append(Change(Lsn(start, index), Op.DELETE, before, None))
                            index += 1
                            changes.append(Change(Lsn(start, index), Op.CREATE, None, after))
                        else:
                            changes.append(Change(Lsn(start, index), Op.UPDATE, before, after))
                        index += 1
                else:
                    for index, row in enumerate(event.rows):
                        changes.append(
                            Change(Lsn(start, index), Op.DELETE, convert(row["values"], row["none_sources"]), None)
                        )
                yield ChangeBatch(table, txid, commit_ts, watermark, changes)
            elif isinstance(event, XidEvent):
                in_transaction = False
                yield self._end(event, file_seq, pending_gtid, commit_ts)
                pending_gtid = None
            elif isinstance(event, MariadbGtidEvent):
                pending_gtid = (event.domain_id, event.gtid)
                txid = event.gtid
                commit_ts = self._commit_time(event.timestamp)
                standalone = bool(event.flags & MARIADB_FL_STANDALONE)
                in_transaction = not standalone
            elif isinstance(event, QueryEvent):
                statement = event.query
                if statement == "BEGIN":
                    in_transaction = True
                    if not self.mariadb:
                        txid = f"{self.file}:{event.packet.log_pos}"
                        commit_ts = self._commit_time(event.timestamp)
                    continue
                if statement == "COMMIT":
                    in_transaction = False
                    yield self._end(event, file_seq, pending_gtid, commit_ts)
                    pending_gtid = None
                    continue
                schema = event.schema.decode() if isinstance(event.schema, bytes) else event.schema
                lsn = Lsn(file_seq | (event.packet.log_pos - event.event_size))
                if not self.mariadb and not in_transaction:
                    txid = f"{self.file}:{event.packet.log_pos}"
                    commit_ts = self._commit_time(event.timestamp)
                yield SchemaChange(lsn, txid, commit_ts, schema, statement)
                if standalone or not in_transaction:
                    standalone = False
                    yield self._end(event, file_seq, pending_gtid, commit_ts)
                    pending_gtid = None
            elif isinstance(event, RotateEvent):
                self.file = event.next_binlog
                file_seq = file_number(self.file) << 32
            elif isinstance(event, HeartbeatLogEvent) and not in_transaction:
                yield Heartbeat()
            if self.stop.is_set() and not in_transaction:
                return

    def _commit_time(self, timestamp: int) -> datetime:
        """The event header's commit time (whole seconds): one datetime a second, shared by the
        transactions committed in it (the writer converts each distinct object once)."""
        if timestamp != self._last_timestamp:
            self._last_timestamp, self._last_commit_ts = timestamp, datetime.fromtimestamp(timestamp, UTC)
        return self._last_commit_ts

    def _end(self, event: Any, file_seq: int, gtid: tuple[int, str] | None, commit_ts: datetime) -> TransactionEnd:
        gtids = self.gtids
        if gtid is not None:
            gtids[gtid[0]] = gtid[1]
        pos = event.packet.log_pos
        resume = {"file": self.file, "pos": pos}
        if self.mariadb:
            # one replication domain (the common case): its GTID is the whole state
            one = gtid is not None and len(gtids) == 1
            resume["gtid"] = gtid[1] if one else ",".join(gtids[d] for d in sorted(gtids))
        return TransactionEnd(Lsn(file_seq | pos), resume, commit_ts)

    def _table(self, event: Any) -> tuple[TableSchema, RowConverter]:
        """Schema and converter of the rows event's table, built once per table map: kept on
        mysql-replication's Table object, which identical table maps share (`table_maps`)."""
        table = event.table_map[event.table_id]
        cached = getattr(table, "_logtide", None)
        if cached is None:
            described, convert = table_schema(event.schema, event.table, table)
            if not described.key:
                described = dataclasses.replace(described, key=self._key(described))
            cached = table._logtide = (described, convert)
        return cached

    def _key(self, table: TableSchema) -> tuple[str, ...]:
        """The key of a table whose table map names no primary key, as the dump finds it: a UNIQUE
        index on NOT NULL columns (read from the catalog now), else the key the configuration names."""
        if self._catalog is None:
            self._catalog = pymysql.connect(**connection_settings(self.config), autocommit=True)
        keys = table_keys(self._catalog, table.schema, table.table)
        return log_key(keys.own if keys else (), self.config.named_key(table.schema, table.table), table.names)
