"""The binlog as raw events: a replica connection (COM_BINLOG_DUMP) read packet by packet.

Each event is handed on as (type, timestamp, server_id, log_pos, packet bytes, body end): the
19-byte header is unpacked with one struct, the CRC32 checksum verified and cut off (`end`), the
body left to the reader, which decodes only what it needs. MariaDB starts from a GTID state
(@slave_connect_state), MySQL from a file and position.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import Any

import pymysql
from pymysql.constants.COMMAND import COM_BINLOG_DUMP

from capture.config import SourceConfig
from capture.errors import BinlogDecodeError, SourceConnectionError
from capture.sources.mysql.connection import LOST_CONNECTION, connection_settings

QUERY = 0x02
EXECUTE_LOAD_QUERY = 0x12  # LOAD DATA logged as its statement: a QUERY event's layout, 13 more post-header bytes
ROTATE = 0x04
FORMAT_DESCRIPTION = 0x0F
XID = 0x10
TABLE_MAP = 0x13
WRITE_ROWS_V1, UPDATE_ROWS_V1, DELETE_ROWS_V1 = 0x17, 0x18, 0x19
HEARTBEAT = 0x1B
WRITE_ROWS_V2, UPDATE_ROWS_V2, DELETE_ROWS_V2 = 0x1E, 0x1F, 0x20
HEARTBEAT_V2 = 0x29
MARIADB_GTID = 0xA2
WRITE_ROWS = {WRITE_ROWS_V1, WRITE_ROWS_V2}
UPDATE_ROWS = {UPDATE_ROWS_V1, UPDATE_ROWS_V2}
DELETE_ROWS = {DELETE_ROWS_V1, DELETE_ROWS_V2}
ROWS_V2 = {WRITE_ROWS_V2, UPDATE_ROWS_V2, DELETE_ROWS_V2}
# events that carry rows or statements capture cannot read: refused, never skipped
REFUSED = {
    0x14: "a pre-GA rows event (MySQL 5.1.0-5.1.15)",
    0x15: "a pre-GA rows event (MySQL 5.1.0-5.1.15)",
    0x16: "a pre-GA rows event (MySQL 5.1.0-5.1.15)",
    0x26: "an XA PREPARE: the prepared transaction's rows may yet be undone by an XA ROLLBACK in a later "
    "transaction, which capture cannot follow (use XA COMMIT ... ONE PHASE, or no XA)",
    0x27: "a partial JSON update (set binlog_row_value_options='' on MySQL)",
    0x28: "a compressed transaction (set binlog_transaction_compression=OFF on MySQL)",
    **{code: "a compressed event (set log_bin_compress=OFF on MariaDB)" for code in range(0xA5, 0xAC)},
}
HEADER = struct.Struct("<IBIIIH")  # after the OK byte: timestamp, type, server id, size, next position, flags
BODY = 20  # the OK byte and the 19-byte header
CHECKSUM_LEN = 4
CHECKSUM_CRC32 = 1  # binlog_checksum_alg: 0 none, 1 CRC32
DEFAULT_POST_HEADER = {
    QUERY: 13,
    EXECUTE_LOAD_QUERY: 26,
    TABLE_MAP: 8,
    **dict.fromkeys((0x17, 0x18, 0x19), 8),
    **dict.fromkeys(ROWS_V2, 10),
}

Event = tuple[int, int, int, int, bytes, int]  # type, timestamp, server id, next position, packet, body end


class _RaisingConnection(pymysql.connections.Connection):
    """A PyMySQL connection whose lost-connection errors are SourceConnectionErrors: capture
    reconnects itself, from its checkpoint."""

    def _read_packet(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super()._read_packet(*args, **kwargs)
        except pymysql.err.OperationalError as exc:
            if exc.args and exc.args[0] in LOST_CONNECTION:
                raise SourceConnectionError(f"lost the binlog connection: {exc.args[-1]}") from None
            raise


def heartbeat_ns(heartbeat_s: float, read_timeout_s: float) -> int:
    """@master_heartbeat_period: at most half the read timeout, so an idle stream never times out."""
    return int(min(read_timeout_s / 2, heartbeat_s, 4294967) * 1_000_000_000)


class BinlogStream:
    """One replica connection; iterate it for raw events until the server ends the stream."""

    def __init__(self, config: SourceConfig, resume: dict[str, Any], read_timeout_s: float) -> None:
        self.mariadb = config.kind == "mariadb"
        self.post_header = dict(DEFAULT_POST_HEADER)
        self.identity = ""  # the server reached (`_prepare`)
        self.conn = _RaisingConnection(**connection_settings(config, read_timeout=read_timeout_s))
        try:
            self.checksum = self._prepare(config, resume, read_timeout_s)
        except BaseException:
            self.conn.close()
            raise

    def _prepare(self, config: SourceConfig, resume: dict[str, Any], read_timeout_s: float) -> bool:
        with self.conn.cursor() as cur:
            cur.execute("SHOW GLOBAL VARIABLES LIKE 'binlog_checksum'")
            row = cur.fetchone()
            checksum = row is not None and str(row[1]).upper() != "NONE"
            # checksum-aware whatever the setting now: each file's FORMAT_DESCRIPTION says its own (`__iter__`)
            cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
            cur.execute("SET @master_heartbeat_period = %s", (heartbeat_ns(config.heartbeat_s, read_timeout_s),))
            cur.execute("SET @mariadb_slave_capability = 4")  # GTID events, not dummies in their place
            cur.execute("SELECT @@server_id, @@hostname, @@port")
            server_id, hostname, port = cur.fetchone()
            self.identity = f"{hostname}:{port} (server_id {server_id})"  # as snapshot.server_identity
            if self.mariadb:
                cur.execute("SET @slave_connect_state = %s", (resume.get("gtid", ""),))
                cur.execute("SET @slave_gtid_strict_mode = 1")
                cur.execute("SET @slave_gtid_ignore_duplicates = 0")
                dump = struct.pack("<IHI", 4, 0, config.server_id) + b"\0\0\0\0"  # the GTID state decides
            else:
                dump = struct.pack("<IHI", resume["pos"], 0, config.server_id) + resume["file"].encode()
        self.conn._execute_command(COM_BINLOG_DUMP, dump)  # flags 0: blocking, the server waits for events
        return checksum

    def close(self) -> None:
        self.conn.close()

    def __iter__(self) -> Iterator[Event]:
        read = self.conn._read_packet
        unpack = HEADER.unpack_from
        crc = zlib.crc32
        trailer = CHECKSUM_LEN if self.checksum else 0
        while True:
            data = read().get_all_data()
            if data[0] != 0:
                if data[0] == 0xFE and len(data) < 9:  # EOF: the server ended the stream
                    return
                continue
            timestamp, kind, server_id, size, log_pos, _flags = unpack(data, 1)
            if size != len(data) - 1:
                raise BinlogDecodeError(f"binlog event of type {kind} is {len(data) - 1} bytes, its header says {size}")
            if kind == FORMAT_DESCRIPTION:
                # it ends in the file's checksum algorithm (1 byte) and 4 checksum bytes, whatever the
                # algorithm: it says how the events after it end (SET GLOBAL binlog_checksum rotates)
                trailer = CHECKSUM_LEN if data[-CHECKSUM_LEN - 1] == CHECKSUM_CRC32 else 0
                end = len(data) - CHECKSUM_LEN
            else:
                end = len(data) - trailer
            if (
                trailer
                and kind not in (HEARTBEAT, HEARTBEAT_V2)
                and crc(data[1:end]) != int.from_bytes(data[end:], "little")
            ):
                raise BinlogDecodeError(f"binlog event of type {kind} ending at {log_pos} fails its CRC32 checksum")
            if kind in REFUSED:
                raise BinlogDecodeError(
                    f"binlog event of type {kind} ending at {log_pos} is {REFUSED[kind]}: capture cannot read it"
                )
            if kind == FORMAT_DESCRIPTION:
                self._format(data, end)
            yield kind, timestamp, server_id, log_pos, data, end

    def _format(self, data: bytes, end: int) -> None:
        """Post-header lengths per event type (binlog version 4: they follow 57 bytes of the body)."""
        lengths = data[BODY + 57 : end]
        for kind in DEFAULT_POST_HEADER:
            if kind - 1 < len(lengths):
                self.post_header[kind] = lengths[kind - 1]


def rows_body(data: bytes, kind: int, post_header_len: int) -> int:
    """Where a rows event's column count starts: after the post-header and, in v2, its extra data."""
    pos = BODY + post_header_len
    if kind in ROWS_V2:
        pos += int.from_bytes(data[BODY + 8 : BODY + 10], "little") - 2
    return pos


def query_parts(data: bytes, end: int, post_header_len: int) -> tuple[str, str]:
    """A QUERY event's default schema and statement."""
    schema_len = data[BODY + 8]
    status_len = int.from_bytes(data[BODY + 11 : BODY + 13], "little")
    pos = BODY + post_header_len + status_len
    schema = data[pos : pos + schema_len].decode()
    return schema, data[pos + schema_len + 1 : end].decode("utf-8", errors="backslashreplace")
