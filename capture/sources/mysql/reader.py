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
from collections.abc import Iterator
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
)
from capture.sources.base import WATERMARK_SCHEMA, WATERMARK_TABLE
from capture.sources.mysql import binlog_events as ev
from capture.sources.mysql.binlog_events import BinlogStream
from capture.sources.mysql.catalog import data_types, fractional_columns, table_keys
from capture.sources.mysql.connection import ER_SPECIFIC_ACCESS_DENIED, connection_settings, translate
from capture.sources.mysql.rows import OLD_TEMPORAL, RowDecoder
from capture.sources.mysql.table_maps import TableMap, TableMapCache
from capture.sources.mysql.types import table_schema
from capture.sources.table_keys import log_key

MARIADB_FL_STANDALONE = 0x01
MARIADB_FL_DDL = 0x20  # the GTID's event group holds DDL (CREATE TABLE ... SELECT carries rows as well)
_FILE_NUMBER = re.compile(r"\.(\d+)$")


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
                table, decoder = self._table(table_map)
                watermark = (table_map.schema, table_map.table) == watermark_key
                pos = ev.rows_body(data, kind, post_header[kind])
                changes: list[Change] = []
                if kind in ev.UPDATE_ROWS:
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
                yield ChangeBatch(table, txid, commit_ts, watermark, changes)
            elif kind == ev.TABLE_MAP:
                table_map = table_maps.get(data[ev.BODY : end], post_header[ev.TABLE_MAP])
                tables[table_map.table_id] = table_map
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
                    raise BinlogDecodeError(
                        f"{statement[:60]!r} at {self.file}:{log_pos} is a row change logged as its statement (a "
                        "session with binlog_format STATEMENT or MIXED): capture reads row events only"
                    )
                lsn = Lsn(file_seq | (log_pos - (end - ev.BODY)))
                if not self.mariadb and not in_transaction:
                    txid = f"{self.file}:{log_pos}"
                    commit_ts = self._commit_time(timestamp)
                yield SchemaChange(lsn, txid, commit_ts, schema, statement)
                if standalone or not in_transaction:
                    standalone = False
                    yield self._end(log_pos, file_seq, pending_gtid, commit_ts)
                    pending_gtid = None
            elif kind == ev.ROTATE:
                self.file = data[ev.BODY + 8 : end].decode()
                file_seq = file_number(self.file) << 32
                tables.clear()  # table ids are not stable across a server restart, which rotates the binlog
            elif (kind == ev.HEARTBEAT or kind == ev.HEARTBEAT_V2) and not in_transaction:
                # between event groups only: a GTID event's group (a standalone DDL's too) has ended
                yield self._heartbeat(kind, log_pos, data[ev.BODY : end]) if pending_gtid is None else Heartbeat()
            if self.stop.is_set() and not in_transaction:
                return

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

    def _table(self, table_map: TableMap) -> tuple[TableSchema, RowDecoder]:
        """Schema and row decoder of a table map, built once per distinct table map (`table_maps`)."""
        compiled = table_map.compiled
        if compiled is None:
            if any(col.type in OLD_TEMPORAL for col in table_map.columns):
                self._refuse_old_fractions(table_map)
            if any(col.type == FIELD_TYPE.STRING and col.character_set_name == "binary" for col in table_map.columns):
                self._refuse_plugin_types(table_map)
            decoder = RowDecoder(table_map)
            described = table_schema(table_map.schema, table_map.table, table_map.columns, table_map.key)
            if not described.key:
                described = dataclasses.replace(described, key=self._key(described))
            compiled = table_map.compiled = (described, decoder)
        return compiled

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

    def _catalog_connection(self) -> pymysql.connections.Connection:
        if self._catalog is None:
            self._catalog = pymysql.connect(**connection_settings(self.config), autocommit=True)
        return self._catalog

    def _key(self, table: TableSchema) -> tuple[str, ...]:
        """The key of a table whose table map names no primary key, as the dump finds it: a UNIQUE
        index on NOT NULL columns (read from the catalog now), else the key the configuration names."""
        keys = table_keys(self._catalog_connection(), table.schema, table.table)
        return log_key(keys.own if keys else (), self.config.named_key(table.schema, table.table), table.names)
