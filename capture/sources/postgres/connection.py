"""Connections to PostgreSQL (psycopg2), with driver errors turned into Logtide errors.

Every connection, the replication one included, runs with `SESSION_SETTINGS`: pgoutput
formats values with the walsender's session settings, so the log and chunk SELECTs see the
same text for the same value.
"""

from __future__ import annotations

from typing import Any

import psycopg2
import psycopg2.extensions
import psycopg2.extras

from capture.config import SourceConfig
from capture.errors import PreflightError, SourceConnectionError
from capture.sources.postgres.types import SESSION_SETTINGS

CONNECT_TIMEOUT_S = 10
INVALID_PASSWORD, INVALID_AUTHORIZATION = "28P01", "28000"
INVALID_CATALOG = "3D000"


def _options() -> str:
    return " ".join(f"-c {name}={value.replace(' ', '')}" for name, value in SESSION_SETTINGS.items())


def where(config: SourceConfig) -> str:
    return f"{config.user}@{config.host}:{config.port}/{config.database}"


def translate(exc: psycopg2.Error, config: SourceConfig) -> Exception:
    code = getattr(exc, "pgcode", None)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if code in (INVALID_PASSWORD, INVALID_AUTHORIZATION) or "password authentication failed" in text:
        return PreflightError(f"{where(config)}: access denied; check the user and password (password not shown)")
    if code == INVALID_CATALOG or ("database" in text and "does not exist" in text):
        return PreflightError(f"{where(config)}: {text}")
    if isinstance(exc, (psycopg2.OperationalError, psycopg2.InterfaceError)):
        return SourceConnectionError(f"{where(config)}: {text}")
    return exc


def connect(config: SourceConfig, replication: bool = False, autocommit: bool = True) -> Any:
    """A connection (a LogicalReplicationConnection when `replication`); the password is only here."""
    kwargs: dict[str, Any] = {
        "host": config.host,
        "port": config.port,
        "user": config.user,
        "password": config.password.get_secret_value(),
        "dbname": config.database,
        "connect_timeout": CONNECT_TIMEOUT_S,
        "options": _options(),
        "application_name": "logtide",
        # the server notices a dead client within about 20 s; we notice a dead server the same way
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 2,
    }
    if replication:
        kwargs["connection_factory"] = psycopg2.extras.LogicalReplicationConnection
    try:
        conn = psycopg2.connect(**kwargs)
    except psycopg2.Error as exc:
        raise translate(exc, config) from None
    if not replication:
        conn.autocommit = autocommit
    return conn


def query(conn: Any, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
    with conn.cursor() as cursor:
        cursor.execute(sql, args)
        return list(cursor.fetchall()) if cursor.description else []


def format_lsn(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    high, _, low = text.partition("/")
    return int(high, 16) << 32 | int(low, 16)
