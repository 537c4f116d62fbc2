"""Connections to a MySQL/MariaDB server, with driver errors turned into Logtide errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pymysql

from capture.config import SourceConfig
from capture.errors import PreflightError, SourceConnectionError

CONNECT_TIMEOUT_S = 10
ER_ACCESS_DENIED = 1045
ER_SPECIFIC_ACCESS_DENIED = 1227
# client-side codes: cannot connect, server gone, lost connection, server shutdown in progress
LOST_CONNECTION = {2002, 2003, 2006, 2013, 2055, 1053, 1927}
# every session's own sql_mode, whatever the server's global one: PAD_CHAR_TO_FULL_LENGTH would read
# CHAR(n) padded (the binlog carries it trimmed), EMPTY_STRING_IS_NULL the literal '' (a bound key, the
# catalog queries' COALESCE(..., '')) as NULL, ANSI_QUOTES / PIPES_AS_CONCAT ... would change what the
# SQL says. These three modes exist in MariaDB and MySQL 5.7 and 8 alike.
SESSION_SQL_MODE = "STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"


def connection_settings(config: SourceConfig, read_timeout: float | None = None) -> dict[str, Any]:
    """PyMySQL keyword arguments. The password is only ever here, never in a log line."""
    settings: dict[str, Any] = {
        "host": config.host,
        "port": config.port,
        "user": config.user,
        "password": config.password.get_secret_value(),
        "charset": "utf8mb4",
        "connect_timeout": CONNECT_TIMEOUT_S,
        "init_command": f"SET SESSION sql_mode = '{SESSION_SQL_MODE}'",
    }
    if read_timeout is not None:
        settings["read_timeout"] = read_timeout
    return settings


def translate(exc: pymysql.MySQLError, config: SourceConfig) -> Exception:
    code = exc.args[0] if exc.args else None
    where = f"{config.user}@{config.host}:{config.port}"
    if code == ER_ACCESS_DENIED:
        return PreflightError(f"{where}: access denied; check the user and password (password not shown)")
    if code in LOST_CONNECTION or isinstance(exc, pymysql.err.InterfaceError):
        return SourceConnectionError(f"{where}: {exc.args[-1] if exc.args else exc}")
    return exc


@contextmanager
def connect(config: SourceConfig) -> Iterator[pymysql.connections.Connection]:
    try:
        conn = pymysql.connect(**connection_settings(config), autocommit=True)
    except pymysql.MySQLError as exc:
        raise translate(exc, config) from None
    try:
        yield conn
    except pymysql.MySQLError as exc:
        raise translate(exc, config) from exc
    finally:
        conn.close()


def query(conn: pymysql.connections.Connection, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
    with conn.cursor() as cursor:
        cursor.execute(sql, args)
        return list(cursor.fetchall())
