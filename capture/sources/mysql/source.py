"""MySQL/MariaDB as a `LogSource`: positions, preflight, and the binlog reader."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from threading import Event
from typing import Any

import pymysql

from capture.config import SourceConfig
from capture.errors import CheckpointPurgedError, PositionWentBackwardsError, PreflightError
from capture.events import LogItem, Lsn
from capture.log import get_logger
from capture.sources.mysql.catalog import base_tables, table_keys, trx_versioned_tables
from capture.sources.mysql.connection import connect, connection_settings, query
from capture.sources.mysql.foreign_keys import CascadingKey, cascading_keys, check_cascades
from capture.sources.mysql.preflight import preflight
from capture.sources.mysql.reader import BinlogReader, file_number, position_lsn
from capture.sources.mysql.snapshot import check_server as check_readonly
from capture.sources.mysql.snapshot import server_identity
from capture.sources.table_keys import TableKeys, check_named_keys, log_keyless

log = get_logger(__name__)


def binlog_distance(logs: list[tuple[str, int]], start: tuple[str, int], end: tuple[str, int]) -> int | None:
    """Bytes of binlog from `start` to `end` (file, pos), across files; None when `start`'s file is gone."""
    names = [n for n, _ in logs]
    if start[0] not in names or end[0] not in names:
        return None
    first, last = names.index(start[0]), names.index(end[0])
    if first == last:
        return max(0, end[1] - start[1])
    if first > last:
        return 0
    sizes = dict(logs)
    return sizes[start[0]] - start[1] + sum(sizes[n] for n in names[first + 1 : last]) + end[1]


def gtid_distance(server: str, landed: str) -> int:
    """Transactions the server has past `landed`, summed over replication domains (MariaDB GTIDs)."""

    def parse(text: str) -> dict[int, int]:
        found = {}
        for gtid in filter(None, (g.strip() for g in text.split(","))):
            domain, _, seq = gtid.split("-")
            found[int(domain)] = int(seq)
        return found

    ours = parse(landed)
    return sum(max(0, seq - ours.get(domain, 0)) for domain, seq in parse(server).items())


class MySqlSource:
    def __init__(self, name: str, config: SourceConfig) -> None:
        self.name = name
        self.config = config
        self.where = f"{name} ({config.kind} {config.host}:{config.port})"
        self._lag_conn: pymysql.connections.Connection | None = None
        self._cascades: set[CascadingKey] = set()  # cascading keys accepted (foreign_key_cascades: accept)
        self._landed: Callable[[], set[tuple[str, str]]] | None = None  # tables the landing zone holds
        self._history: Callable[[], list[dict]] | None = None  # its schema history's records

    def use_landed_tables(
        self, landed: Callable[[], set[tuple[str, str]]], history: Callable[[], list[dict]] | None = None
    ) -> None:
        """How to list the tables the landing zone holds (log events or dump chunks): a DROP
        DATABASE empties those of its database (`BinlogReader._dropped_database`); and to read its
        schema history: the column types a MODIFY is judged against (`BinlogReader._columns`)."""
        self._landed, self._history = landed, history

    def preflight(self) -> None:
        """Server settings and grants, the keys the configuration names, captured children of
        cascading foreign keys (refused unless accepted: `foreign_keys`); then log the captured
        tables that have no usable key."""
        with connect(self.config) as conn:
            preflight(conn, self.config.kind, self.config.user, self.where)
            if self.config.watermarks == "readonly" and (
                problems := check_readonly(lambda sql, args=None: query(conn, sql, args))
            ):
                raise PreflightError(
                    f"source {self.where} cannot place read-only watermarks:\n  - " + "\n  - ".join(problems)
                )
            check_named_keys(self.name, self.config, lambda schema, table: table_keys(conn, schema, table))
            found: dict[str, TableKeys] = {}
            for schema, table in base_tables(conn):
                if self.config.captures(schema, table) and (keys := table_keys(conn, schema, table)) is not None:
                    found[f"{schema}.{table}"] = keys
            keys = cascading_keys(conn, self.config)
            check_cascades(self.name, self.config, keys)
            self._cascades = set(keys)
            log_keyless(self.name, self.config, found)
            if self.config.kind == "mariadb":
                self._warn_trx_versioned(conn)

    def _warn_trx_versioned(self, conn: pymysql.connections.Connection) -> None:
        """Name the captured tables whose writes MariaDB logs as statements (transaction-precise
        system versioning): capture stops at the first one it reads."""
        names = [f"{s}.{t}" for s, t in trx_versioned_tables(conn) if self.config.captures(s, t)]
        if names:
            log.warning(
                "capture.statement_logged_tables",
                source=self.name,
                tables=",".join(names),
                reason="transaction-precise system versioning (AS ROW START on BIGINT UNSIGNED): MariaDB logs "
                "writes to these tables as statements, whatever binlog_format says",
                action="capture stops at the first write to one of them: exclude them, or version them by "
                "timestamp (TIMESTAMP(6) AS ROW START)",
            )

    def _server_position(self, conn: pymysql.connections.Connection) -> tuple[str, int]:
        rows = query(conn, "SHOW MASTER STATUS")
        if not rows:
            raise PreflightError(f"{self.where}: binary logging is off; start the server with --log-bin")
        return rows[0][0], int(rows[0][1])

    def current_position(self, reset: bool = False) -> tuple[Lsn, dict[str, Any]]:
        with connect(self.config) as conn:
            file, pos = self._server_position(conn)
            resume: dict[str, Any] = {"file": file, "pos": pos}
            if self.config.kind == "mariadb":
                resume["gtid"] = query(conn, "SELECT BINLOG_GTID_POS(%s, %s)", (file, pos))[0][0] or ""
            if self.config.watermarks == "readonly":
                resume["server"] = server_identity(lambda sql, args=None: query(conn, sql, args))
        return position_lsn(file, pos), resume

    def check_resumable(self, frontier: Lsn, resume: dict[str, Any]) -> None:
        with connect(self.config) as conn:
            files = [row[0] for row in query(conn, "SHOW BINARY LOGS")]
            current = position_lsn(*self._server_position(conn))
        if resume["file"] not in files:
            raise CheckpointPurgedError(
                f"{self.where}: the checkpoint's binlog {resume['file']} has been purged from the server "
                f"(oldest is {files[0] if files else 'none'}); changes since then are lost to capture. "
                f"Run `logtide capture --source {self.name} --reset` to start from the current position, "
                "then a full dump of every table to recover the history."
            )
        if current.major < frontier.major:  # a heartbeat's frontier stands at the binlog end, minor > 0
            raise PositionWentBackwardsError(
                f"{self.where}: the server's binlog ends before the landed frontier (was RESET MASTER run?). "
                "Move the landing zone aside, start capture with --reset, then run a full dump."
            )

    def read(self, resume: dict[str, Any], stop: Event, hold_s: float = 0.0) -> Iterator[LogItem]:
        return iter(BinlogReader(self.name, self.config, resume, stop, self._cascades, self._landed, self._history))

    def acknowledge(self, resume: dict[str, Any]) -> None:
        """Nothing to tell the server: a binlog reader keeps no position there."""

    def lag_bytes(self, position: Lsn) -> int | None:
        """Bytes of binlog past `position`, across file rotations; None when its file is gone."""
        if self._lag_conn is None:
            self._lag_conn = pymysql.connect(**connection_settings(self.config), autocommit=True)
        try:
            logs = [(str(r[0]), int(r[1])) for r in query(self._lag_conn, "SHOW BINARY LOGS")]
            end = self._server_position(self._lag_conn)
        except pymysql.MySQLError:
            self._lag_conn.close()
            self._lag_conn = None
            raise
        start = next((name for name, _ in logs if file_number(name) == position.major >> 32), None)
        return None if start is None else binlog_distance(logs, (start, position.major & 0xFFFFFFFF), end)

    def log_lag(self, resume: dict[str, Any]) -> dict[str, Any]:
        """The server's binlog end against a checkpoint's resume token: bytes and, with MariaDB
        GTIDs, transactions."""
        with connect(self.config) as conn:
            status = query(conn, "SHOW MASTER STATUS")
            logs = [(str(r[0]), int(r[1])) for r in query(conn, "SHOW BINARY LOGS")]
            gtid = query(conn, "SELECT @@gtid_binlog_pos")[0][0] if self.config.kind == "mariadb" else None
        end = (str(status[0][0]), int(status[0][1])) if status else None
        report: dict[str, Any] = {"server_position": {"file": end[0], "pos": end[1]} if end else None}
        report["bytes"] = binlog_distance(logs, (resume["file"], int(resume["pos"])), end) if end else None
        if gtid is not None and resume.get("gtid") is not None:
            report["server_gtid"] = gtid
            report["transactions"] = gtid_distance(gtid, resume["gtid"])
        if end and report["bytes"] is None:
            report["note"] = f"the checkpoint's binlog {resume['file']} is no longer on the server"
        return report

    def retained_bytes(self) -> None:
        """The binlog is kept by the server's own expiry settings, not for a reader."""
        return None

    def close(self) -> None:
        if self._lag_conn is not None:
            self._lag_conn.close()
            self._lag_conn = None
