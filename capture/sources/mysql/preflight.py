"""Startup checks: the server writes the binlog the way capture needs, and we may read it."""

from __future__ import annotations

import pymysql

from capture.errors import PreflightError
from capture.sources.mysql.connection import ER_SPECIFIC_ACCESS_DENIED, query

REQUIRED_SETTINGS = {
    "log_bin": "ON",
    "binlog_format": "ROW",
    "binlog_row_image": "FULL",
    "binlog_row_metadata": "FULL",
}
# Chunk reads must see transactions in binlog order. MariaDB always commits in binlog order
# (commit_ordered); MySQL does only with this setting.
MYSQL_ONLY_SETTINGS = {"binlog_order_commits": "ON"}


def check_server(conn: pymysql.connections.Connection, kind: str) -> list[str]:
    """Problems with the server's binlog settings, each saying what to set."""
    problems = []
    version = query(conn, "SELECT VERSION()")[0][0]
    required = REQUIRED_SETTINGS if kind == "mariadb" else {**REQUIRED_SETTINGS, **MYSQL_ONLY_SETTINGS}
    for name, wanted in required.items():
        rows = query(conn, "SHOW GLOBAL VARIABLES LIKE %s", (name,))
        if not rows:
            problems.append(f"{name} does not exist on {version}: capture needs MariaDB 10.5+ or MySQL 8.0.14+")
            continue
        actual = str(rows[0][1]).upper()
        if actual in ("1", "0"):
            actual = "ON" if actual == "1" else "OFF"
        if actual != wanted:
            if name == "log_bin":
                fix = "start the server with --log-bin (binary logging is off; it cannot be turned on live)"
            else:
                fix = f"SET GLOBAL {name}='{wanted}' and put {name}={wanted} under [mysqld] in the config"
            problems.append(f"{name} is {actual}, must be {wanted}: {fix}")
    return problems


def check_grants(conn: pymysql.connections.Connection, user: str) -> list[str]:
    """Missing privileges: REPLICATION SLAVE to stream, BINLOG MONITOR/REPLICATION CLIENT for positions."""
    problems = []
    # the session's grants: the user's own and those of its enabled (default) roles, as the
    # binlog connection will hold them (SHOW GRANTS FOR CURRENT_USER() lists a role, not its grants)
    grants = " ".join(row[0].upper() for row in query(conn, "SHOW GRANTS"))
    on_all = "ALL PRIVILEGES ON *.*" in grants
    if not on_all and "REPLICATION SLAVE" not in grants and "REPLICATION REPLICA" not in grants:
        problems.append(f"user {user!r} lacks REPLICATION SLAVE: GRANT REPLICATION SLAVE ON *.* TO {user!r}")
    try:
        query(conn, "SHOW MASTER STATUS")
    except pymysql.err.OperationalError as exc:
        if exc.args[0] != ER_SPECIFIC_ACCESS_DENIED:
            raise
        problems.append(
            f"user {user!r} may not read binlog positions: GRANT BINLOG MONITOR ON *.* TO {user!r} "
            "(REPLICATION CLIENT on MySQL)"
        )
    return problems


def preflight(conn: pymysql.connections.Connection, kind: str, user: str, where: str) -> None:
    problems = check_server(conn, kind) + check_grants(conn, user)
    if problems:
        raise PreflightError(f"source {where} is not ready for capture:\n  - " + "\n  - ".join(problems))
