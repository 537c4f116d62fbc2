"""PostgreSQL as a `LogSource`: preflight, the replication slot, positions, the pgoutput reader.

Positions: the slot's confirmed LSN is where the server resumes; Logtide's checkpoint holds
the end LSN of the last landed transaction and starts the stream there, so a slot that is
behind (feedback not yet sent when the process died) replays nothing that landed. The slot
only moves forward through `acknowledge`, called after the checkpoint is written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from threading import Event
from typing import Any

import psycopg2

from capture.config import SourceConfig
from capture.errors import (
    CheckpointPurgedError,
    PositionWentBackwardsError,
    PreflightError,
    UnlandableKeyError,
    UnlandableValueError,
)
from capture.events import LogItem, Lsn
from capture.log import get_logger
from capture.sources.postgres.catalog import base_tables, table_keys
from capture.sources.postgres.connection import connect, format_lsn, parse_lsn, query, translate
from capture.sources.postgres.preflight import preflight
from capture.sources.postgres.publication import Publication
from capture.sources.postgres.reader import Landed, PgOutputReader
from capture.sources.postgres.types import ClampedKeys
from capture.sources.table_keys import TableKeys, check_named_keys, log_keyless

log = get_logger(__name__)

SLOT_SQL = (
    "SELECT confirmed_flush_lsn::text, restart_lsn::text, active_pid, plugin, database, wal_status"
    " FROM pg_replication_slots WHERE slot_name = %s"
)


class PostgresSource:
    def __init__(self, name: str, config: SourceConfig) -> None:
        self.name = name
        self.config = config
        self.slot = config.slot_name(name)
        self.publication = Publication(name, config)
        self.where = f"{name} (postgresql {config.host}:{config.port}/{config.database})"
        self._reader: PgOutputReader | None = None
        self._acknowledged = 0
        self._lag_conn: Any = None
        self.landed: Landed | None = None  # set by the service (`use_landed`)
        # clamped_keys: accept warns once per table and column for the capture run, not per reader (reconnect)
        self._clamped = ClampedKeys(name, config.clamped_keys, UnlandableKeyError, UnlandableValueError)

    def use_landed(
        self,
        records: Callable[[], list[dict[str, Any]]],
        dumped_schema: Callable[[str, str], tuple[dict[str, str], int | None] | None],
        dumped_tables: Callable[[], AbstractSet[tuple[str, str]]],
    ) -> None:
        """What the landing zone holds per table: the schema history's `table` records and the
        truncates of dropped tables (LandingZone.relation_records), and for tables only dumped the
        schema and relation their newest chunk recorded (landing.reader.dumped_schema, DumpedTables):
        the reader compares each Relation message with it and finds drops (schema_change.py)."""
        self.landed = Landed(records, dumped_schema, dumped_tables)

    def use_needs_dump(
        self,
        needs_dump: Callable[..., None],
        recall: Callable[[], tuple[set[str], set[str]] | None] | None = None,
        remember: Callable[[set[str], set[str]], None] | None = None,
    ) -> None:
        """Where to record a table whose target lacks rows no log carries until it is dumped (a table added
        to the publication, a partition attached, a captured table a read-only publication lacks):
        landing.unconverged.record, listed by `logtide status` until a dump of it finishes; and where the
        publication's coverage is kept across runs (landing.unconverged.covered, remember_covered), so
        what changed while capture was stopped is found at its start."""
        self.publication.needs_dump = needs_dump
        self.publication.recall, self.publication.remember = recall, remember

    def _slot(self, conn: Any) -> tuple[Any, ...] | None:
        rows = query(conn, SLOT_SQL, (self.slot,))
        return rows[0] if rows else None

    def preflight(self) -> None:
        """The keys the configuration names; settings, grants and the publication; then log the
        captured tables that have no usable key."""
        conn = connect(self.config)
        try:
            named = check_named_keys(self.name, self.config, lambda schema, table: table_keys(conn, schema, table))
            self.publication.check_named_keys(conn, list(named))
            preflight(conn, self.config.user, self.slot, self.publication, self.where)
            found: dict[str, TableKeys] = {}
            for schema, table in base_tables(conn):
                if self.config.captures(schema, table) and (keys := table_keys(conn, schema, table)) is not None:
                    found[f"{schema}.{table}"] = keys
            log_keyless(self.name, self.config, found, ", and REPLICA IDENTITY FULL")
            slot = self._slot(conn)
        except psycopg2.Error as exc:
            raise translate(exc, self.config) from None
        finally:
            conn.close()
        if slot is not None and (slot[3] != "pgoutput" or slot[4] != self.config.database):
            raise PreflightError(
                f"source {self.where}: replication slot {self.slot!r} exists for plugin {slot[3]!r} on database "
                f"{slot[4]!r}; Logtide needs pgoutput on {self.config.database!r}. Choose another `slot` in the "
                "configuration, or drop it: SELECT pg_drop_replication_slot('" + self.slot + "')"
            )

    def current_position(self, reset: bool = False) -> tuple[Lsn, dict[str, Any]]:
        """First start: the slot's position (created now if missing). --reset: the slot is
        dropped and created again, explicitly, at the server's current position."""
        conn = connect(self.config)
        try:
            slot = self._slot(conn)
            if slot is not None and reset:
                if slot[2] is not None:
                    raise PreflightError(
                        f"source {self.where}: replication slot {self.slot!r} is in use by pid {slot[2]}; "
                        "stop that consumer before --reset"
                    )
                query(conn, "SELECT pg_drop_replication_slot(%s)", (self.slot,))
                log.warning(
                    "capture.slot_dropped",
                    source=self.name,
                    slot=self.slot,
                    confirmed_lsn=slot[0],
                    note="--reset: changes between the old position and the new slot are not captured",
                )
                slot = None
            if slot is None:
                lsn_text = query(
                    conn, "SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput')", (self.slot,)
                )[0][0]
                log.info("capture.slot_created", source=self.name, slot=self.slot, lsn=lsn_text)
            else:
                lsn_text = slot[0]
        except psycopg2.Error as exc:
            raise translate(exc, self.config) from None
        finally:
            conn.close()
        lsn = parse_lsn(lsn_text)
        self._acknowledged = lsn
        if self.config.watermarks == "readonly":  # frontiers stand below their WAL position (reader.py `_ends`)
            frontier = Lsn(lsn - 1)
            return frontier, {"lsn": format_lsn(lsn), "slot": self.slot, "frontier_at": str(frontier.encode())}
        return Lsn(lsn), {"lsn": format_lsn(lsn), "slot": self.slot}

    def check_resumable(self, frontier: Lsn, resume: dict[str, Any]) -> None:
        conn = connect(self.config)
        try:
            slot = self._slot(conn)
            current = parse_lsn(query(conn, "SELECT pg_current_wal_lsn()::text")[0][0])
        except psycopg2.Error as exc:
            raise translate(exc, self.config) from None
        finally:
            conn.close()
        if slot is None or slot[5] == "lost":
            state = "does not exist" if slot is None else "has lost required WAL (max_slot_wal_keep_size)"
            raise CheckpointPurgedError(
                f"{self.where}: replication slot {self.slot!r} {state}; changes since the checkpoint are lost to "
                f"capture. Run `logtide capture --source {self.name} --reset` to create it again at the current "
                "position, then a full dump of every table to recover the history."
            )
        if current < frontier.major:
            raise PositionWentBackwardsError(
                f"{self.where}: the server's WAL ends at {format_lsn(current)}, before the landed frontier "
                f"{resume.get('lsn')} (a different or restored server?). Move the landing zone aside, start capture "
                "with --reset, then run a full dump."
            )
        self._acknowledged = parse_lsn(resume["lsn"])

    def read(self, resume: dict[str, Any], stop: Event, hold_s: float = 0.0) -> Iterator[LogItem]:
        start = parse_lsn(resume["lsn"])
        self._acknowledged = max(self._acknowledged, start)
        # read-only: the checkpoint's frontier (it stands below `lsn`; reader.py `_idle_end`)
        frontier = int(resume.get("frontier_at", Lsn(start).encode()))
        self._reader = PgOutputReader(
            self.name,
            self.config,
            self.slot,
            self.publication,
            start,
            stop,
            self._acknowledged,
            hold_s,
            frontier,
            self.landed,
            resume.get("enums"),
            self._clamped,
        )
        return iter(self._reader)

    def acknowledge(self, resume: dict[str, Any]) -> None:
        """The checkpoint up to `resume` is written: let the slot release the WAL before it."""
        lsn = parse_lsn(resume["lsn"])
        self._acknowledged = max(self._acknowledged, lsn)
        if self._reader is not None:
            self._reader.feedback(lsn)

    def lag_bytes(self, position: Lsn) -> int | None:
        if self._lag_conn is None:
            self._lag_conn = connect(self.config)
        try:
            current = parse_lsn(query(self._lag_conn, "SELECT pg_current_wal_lsn()::text")[0][0])
        except psycopg2.Error:
            self._lag_conn.close()
            self._lag_conn = None
            raise
        read = max(position.major, self._reader.idle_wal_end if self._reader is not None else 0)
        return max(0, current - read)

    def log_lag(self, resume: dict[str, Any]) -> dict[str, Any]:
        """The server's WAL end against the slot's confirmed LSN (what capture acknowledged after
        landing it), and the WAL the slot holds."""
        conn = connect(self.config)
        try:
            rows = query(
                conn,
                "SELECT pg_current_wal_lsn()::text, confirmed_flush_lsn::text,"
                " pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint,"
                " pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint"
                " FROM pg_replication_slots WHERE slot_name = %s",
                (self.slot,),
            )
        finally:
            conn.close()
        if not rows:
            return {"bytes": None, "note": f"replication slot {self.slot!r} does not exist"}
        current, confirmed, behind, retained = rows[0]
        return {
            "server_position": {"lsn": current},
            "slot": self.slot,
            "confirmed_flush_lsn": confirmed,
            "bytes": int(behind) if behind is not None else None,
            "retained_bytes": int(retained) if retained is not None else None,
        }

    def retained_bytes(self) -> int | None:
        """WAL the server keeps for the slot: from its restart LSN to the current WAL end."""
        if self._lag_conn is None:
            self._lag_conn = connect(self.config)
        try:
            rows = query(
                self._lag_conn,
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint FROM pg_replication_slots"
                " WHERE slot_name = %s",
                (self.slot,),
            )
        except psycopg2.Error:
            self._lag_conn.close()
            self._lag_conn = None
            raise
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    def close(self) -> None:
        if self._lag_conn is not None:
            self._lag_conn.close()
            self._lag_conn = None
        reader = self._reader
        if reader is not None and self._acknowledged > reader.sent:
            # the stream closed before the last checkpoint's feedback: move the (now idle) slot there
            try:
                conn = connect(self.config)
                try:
                    query(
                        conn,
                        "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                        (self.slot, format_lsn(self._acknowledged)),
                    )
                finally:
                    conn.close()
            except Exception as exc:  # the next start resumes from the checkpoint anyway
                log.debug("capture.slot_advance_skipped", source=self.name, error=str(exc))
