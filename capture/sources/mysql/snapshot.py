"""Read-only watermarks on MariaDB (`watermarks: readonly`): a chunk read in a consistent
snapshot that the server places at an exact position of its own binlog.

`START TRANSACTION WITH CONSISTENT SNAPSHOT` makes MariaDB take the InnoDB read view and the
binlog position together (under the lock that orders commits), and report that position as
`Binlog_snapshot_file`/`Binlog_snapshot_position`: the snapshot sees exactly the transactions
the binlog holds before it (MariaDB commits in binlog order). That position is the chunk's LOW.
The transaction ends once the chunk's reads are done (`finish_reads`), before its file is written:
its metadata lock holds back an ALTER TABLE only as long as a plain SELECT's would.
Its HIGH is the binlog end read after the chunk file is durable (`binlog_end`), which the engine
writes next to the file (capture/landing/chunks.py `write_chunk_high`), since nothing may be
written to the source. Between them, DBLog's window: every event there is newer than the
chunk (the snapshot did not see it), so a key it touches is dropped from the chunk, and the rest
stand at HIGH. A merge that reaches HIGH finds the file, as with a HIGH watermark row: the log
passes HIGH only after the file was written. Nothing is written to the source; the transaction
is READ ONLY.

Why not the GTID position read before and after the SELECT (Debezium's read-only snapshots):
`@@gtid_binlog_pos` moves when a transaction is written to the binlog, before its InnoDB commit
is visible, so a LOW read that way can name a transaction the SELECT does not see (a stale
chunk placed after the change it missed); `@@gtid_slave_pos` on a replica moves after the
commit, but a replica's own binlog (what capture reads) is not the primary's, and positions
from two servers cannot be compared by LSN. The consistent snapshot has neither race.

Sound when capture reads the binlog of the server the dump reads: the primary, or a replica
that writes what it applies to its own binlog (log_bin and log_slave_updates ON). Commit order
there is that server's binlog order whatever its parallel replication mode, so slave_parallel_mode
does not matter for placement; gtid_strict_mode does, for capture's resume (`check_server`).
`check_server` refuses the rest before a dump reads anything (and capture's preflight, for a
read-only source); the dump refuses a server other than the one capture's checkpoint was read
from (`server_identity`, capture/dump/engine.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pymysql

from capture.events import Lsn
from capture.sources.mysql.connection import ER_SPECIFIC_ACCESS_DENIED
from capture.sources.mysql.reader import position_lsn

Run = Callable[..., list[tuple[Any, ...]]]


def open_snapshot(run: Run) -> Lsn:
    """Begin the chunk's transaction: REPEATABLE READ (a consistent snapshot means nothing under
    READ COMMITTED), READ ONLY; the binlog position its snapshot stands at."""
    run("ROLLBACK")  # a chunk read again after a failed SELECT: its transaction is still open
    run("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # this transaction only
    run("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
    status = {str(name).lower(): value for name, value in run("SHOW STATUS LIKE 'binlog\\_snapshot\\_%'")}
    file, pos = status.get("binlog_snapshot_file"), status.get("binlog_snapshot_position")
    if not file:
        run("ROLLBACK")
        raise pymysql.err.OperationalError(0, "the server reports no binlog snapshot position (is log_bin off?)")
    return position_lsn(str(file), int(pos))


def binlog_end(run: Run) -> Lsn:
    """The server's binlog end now: a read-only chunk's HIGH, read after its file is durable."""
    file, pos = run("SHOW MASTER STATUS")[0][:2]
    return position_lsn(str(file), int(pos))


def check_server(run: Run) -> list[str]:
    """Why this server's binlog cannot place read-only chunks, each with the fix (empty: it can).
    Run by the dump before it reads anything and by capture's preflight (a read-only source)."""
    settings = {name.lower(): str(value).upper() for name, value in run(
        "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'log_slave_updates', 'gtid_slave_pos', "
        "'gtid_strict_mode')"
    )}  # fmt: skip
    problems = []
    if settings.get("log_bin") not in ("ON", "1"):
        problems.append(
            "log_bin is OFF: a consistent snapshot has no binlog position to stand at; start the server "
            "with --log-bin (on a replica: and --log-slave-updates)"
        )
    if _replicates(run, settings.get("gtid_slave_pos", "")) and settings.get("log_slave_updates") not in ("ON", "1"):
        problems.append(
            "this server is a replica with log_slave_updates OFF: what it applies is not in its binlog, so "
            "capture would miss it and chunks could not be placed; set log_slave_updates=ON (restart)"
        )
    if settings.get("gtid_strict_mode") not in ("ON", "1"):
        problems.append(
            "gtid_strict_mode is OFF: a replication domain's GTIDs may then repeat or go backwards in the "
            "binlog, and capture, which resumes from its GTID state, could restart at another binlog "
            "position than the frontier that read-only windows are placed against (events landed twice "
            "below it, or a resume refused); SET GLOBAL gtid_strict_mode=ON and put gtid_strict_mode=ON "
            "under [mysqld] in the config"
        )
    return problems


def server_identity(run: Run) -> str:
    """Which server this connection reached, as capture records it in its checkpoint (`resume`
    "server") and the dump compares it: binlog positions of two servers do not compare."""
    server_id, hostname, port = run("SELECT @@server_id, @@hostname, @@port")[0]
    return f"{hostname}:{port} (server_id {server_id})"


def _replicates(run: Run, slave_pos: str) -> bool:
    """Whether the server has a replication connection configured; a user without SLAVE MONITOR
    cannot ask, and then a non-empty gtid_slave_pos (it applied replicated transactions) says so."""
    try:
        return bool(run("SHOW ALL SLAVES STATUS"))
    except pymysql.err.OperationalError as exc:
        if exc.args and exc.args[0] != ER_SPECIFIC_ACCESS_DENIED:
            raise
        return bool(slave_pos.strip())
