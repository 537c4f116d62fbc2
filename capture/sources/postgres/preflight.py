"""Startup checks for logical replication, each problem saying what to change, and the
publication (`publication.Publication`); the replication slot is created by `source`."""

from __future__ import annotations

from typing import Any

from capture.errors import PreflightError
from capture.sources.postgres.connection import query
from capture.sources.postgres.publication import Publication, SyncResult

MIN_VERSION = 100000  # pgoutput; Logtide is tested on 15


def check_server(conn: Any, user: str, slot: str) -> list[str]:
    problems = []
    version = int(query(conn, "SHOW server_version_num")[0][0])
    if version < MIN_VERSION:
        problems.append(f"server version {version} is too old: capture needs PostgreSQL 10 or later (tested: 15)")
    wal_level = query(conn, "SHOW wal_level")[0][0]
    if wal_level != "logical":
        problems.append(
            f"wal_level is {wal_level}, must be logical: ALTER SYSTEM SET wal_level = logical, then restart the server"
        )
    replication, superuser = query(conn, "SELECT rolreplication, rolsuper FROM pg_roles WHERE rolname = current_user")[
        0
    ]
    if not (replication or superuser):
        problems.append(f'user {user!r} lacks the REPLICATION attribute: ALTER ROLE "{user}" WITH REPLICATION')
    max_slots = int(query(conn, "SHOW max_replication_slots")[0][0])
    slots = {row[0] for row in query(conn, "SELECT slot_name FROM pg_replication_slots")}
    if slot not in slots and len(slots) >= max_slots:
        problems.append(
            f"all {max_slots} replication slots are in use ({', '.join(sorted(slots)) or 'none'}): raise "
            "max_replication_slots (ALTER SYSTEM SET max_replication_slots = N, then restart) or drop an unused "
            "slot with SELECT pg_drop_replication_slot('name')"
        )
    max_senders = int(query(conn, "SHOW max_wal_senders")[0][0])
    senders = int(query(conn, "SELECT count(*) FROM pg_stat_replication")[0][0])
    if max_senders == 0 or senders >= max_senders:
        problems.append(
            f"max_wal_senders is {max_senders} and {senders} are in use: ALTER SYSTEM SET max_wal_senders = "
            f"{max(10, senders + 2)}, then restart the server"
        )
    return problems


def preflight(conn: Any, user: str, slot: str, publication: Publication, where: str) -> SyncResult:
    """Settings and grants; then the publication, created or brought in step with the captured
    tables (`Publication.sync`). PreflightError naming every problem with its fix."""
    problems = check_server(conn, user, slot)
    result = SyncResult()
    if not problems:
        result = publication.sync(conn)
        if result.problem:
            problems.append(result.problem)
    if problems:
        raise PreflightError(f"source {where} is not ready for capture:\n  - " + "\n  - ".join(problems))
    return result
