"""What `logtide status` reports, collected without Spark and without a running capture service.

Per source:
- the lease (ZooKeeper: leader, standbys, epoch), whether capture runs (`capture_running`) and the
  checkpoint (frontier, position, epoch);
- lag: the source's log end against the landed position (MariaDB/MySQL: binlog bytes and, with
  GTIDs, transactions; PostgreSQL: WAL bytes from the slot's confirmed LSN), the time since the
  last landed commit, and `lag_s`: 0 when nothing is waiting, else that time (an upper bound: the
  oldest waiting transaction may be younger);
- per dump found under `<landing>/<source>/dumps/`: state, per table chunks, rows, percent, ETA;
- per target Iceberg table: the frontier the merge applied (`logtide.frontier`, as
  capture/merge/target.py defines it, read with pyiceberg: Hadoop catalog via version-hint.text,
  JDBC catalog via its `iceberg_tables` row) and how many landed events of the table lie past it; and the values
  PostgreSQL key changes left out that the merge could not complete (`logtide.unknown-values`,
  NULL in the target until a dump repairs them); a landed table the merge skips (no key landed,
  none named in `keys`) with the reason and the fix.

Frontiers (`frontier`, `applied`, `landed`) are decimal text in the report, as everywhere an LSN
leaves a process (`capture.events.lsn_text`).

Each part fails on its own: an unreachable database, ZooKeeper or catalog is reported in its
place and the rest is still shown.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlparse

import pyarrow.parquet as pq

from capture.config import LogtideConfig, MergeConfig, SourceConfig
from capture.coordination.local import LOCK_TABLE, capture_runs
from capture.dump.states import dumps_status, held_dumps
from capture.errors import UnusableTableError
from capture.events import lsn_text
from capture.landing import LandingZone, unconverged
from capture.landing.checkpoint import Checkpoint
from capture.landing.reader import chunk_files, committed_frontier, merge_tables, table_segments
from capture.landing.zone import table_folder
from capture.merge.target import FRONTIER, UNKNOWN_SAMPLE, UNKNOWN_VALUES, Target, frontier_value, recorded, target_of
from capture.sources import open_source
from capture.sources.table_keys import no_key


def collect(config: LogtideConfig, names: list[str]) -> list[dict[str, Any]]:
    return [source_status(config, name) for name in names]


def source_status(config: LogtideConfig, name: str) -> dict[str, Any]:
    source = config.source(name)
    zone = LandingZone(config.landing.path, name)
    checkpoint = zone.checkpoint()
    report: dict[str, Any] = {
        "source": name,
        "kind": source.kind,
        "watermarks": source.watermarks,
        "foreign_key_cascades": None if source.kind == "postgresql" else source.foreign_key_cascades,
        "partition_changes": None if source.kind == "postgresql" else source.partition_changes,
        "table_renames": source.table_renames,
        "column_rewrites": source.column_rewrites,
        "clamped_keys": source.clamped_keys if source.kind == "postgresql" else None,
        "landing": str(zone.root),
        "frontier": lsn_text(checkpoint.frontier.encode()) if checkpoint else None,  # text: see lsn_text
        "position": checkpoint.resume if checkpoint else None,
        "checkpoint_at": checkpoint.updated_at.isoformat() if checkpoint else None,
        "epoch": checkpoint.epoch if checkpoint else None,
        "lease": lease_status(config, name),
        "capture": dict(zip(("running", "reason"), capture_running(config, name, zone), strict=True)),
        "events_by_table": events_by_table(zone) if checkpoint else {},
    }
    report["lag"] = lag_status(name, source, zone, checkpoint)
    report["dumps"] = dumps_status(zone)
    report["not_converged"] = unconverged.pending(zone, report["dumps"])
    report["targets"] = targets_status(config.merge, name, source, zone, checkpoint)
    report["outputs"] = outputs_status(config, name, zone)
    return report


def outputs_status(config: LogtideConfig, source: str, zone: LandingZone) -> list[dict[str, Any]]:
    """Each output of the source: its acknowledged position and whether its relay is retrying (why, since when)."""
    from capture.output.landing import position_path, read_position

    report = []
    for name, output in sorted(config.outputs.items()):
        if output.source != source:
            continue
        position = read_position(zone, name)
        state_path = position_path(zone, name).with_name("state.json")
        state = _read_json(state_path) if state_path.exists() else {}
        report.append(
            {
                "output": name,
                "kind": output.kind,
                "format": output.format,
                "acknowledged_lsn": None if position is None else lsn_text(position.lsn),
                "delivered": None if position is None else position.delivered,
                "state": state.get("state", "never run"),
                "error": state.get("error"),
                "retrying_since": state.get("since"),
                "backpressure_rows": output.backpressure_rows,
                "chunks_undelivered": state.get("chunks_undelivered"),
                "holding_dumps": held_dumps(zone, name),
            }
        )
    return report


# -- lease and landing zone -------------------------------------------------------------------


def lease_status(config: LogtideConfig, source: str) -> dict[str, Any] | None:
    """Leader, standbys and epoch from ZooKeeper (None with the local lease)."""
    if config.coordination.kind != "zookeeper":
        return None
    from capture.coordination.zookeeper import leader_status

    return leader_status(config.coordination, source)


def events_by_table(zone: LandingZone) -> dict[str, int]:
    tables = {}
    for schema, table in zone.tables():
        files = zone.committed_files(table_folder(schema, table))
        tables[f"{schema}.{table}"] = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    return tables


def last_landed_commit(zone: LandingZone, checkpoint: Checkpoint | None = None) -> float | None:
    """Source commit time (epoch seconds) of the newest landed event: kept in the checkpoint
    (`LandingZone.newest_commit`; read from the files only for a checkpoint that predates it)."""
    newest = zone.newest_commit(checkpoint)
    return None if newest is None else newest.timestamp()


def capture_running(
    config: LogtideConfig, name: str, zone: LandingZone, locks: Path = LOCK_TABLE
) -> tuple[bool | None, str]:
    """Whether capture of source `name` runs (True, False or None: unknown) and why. ZooKeeper: a
    leader holds the lease. Local lease: a process holds the lock file (/proc/locks, this PID
    namespace only) or its heartbeat is fresh, told on this host's clock whatever the writer's says
    (`capture.coordination.local.capture_runs`); stopped when neither, so a capture in another
    container or on another host counts."""
    if config.coordination.kind == "zookeeper":
        try:
            lease = lease_status(config, name) or {}
        except Exception as exc:  # a merge goes on without knowing: say so
            lease = {"error": f"ZooKeeper unreadable: {type(exc).__name__}: {exc}"}
        if lease.get("error"):
            return None, str(lease["error"])
        if lease.get("leader"):
            return True, f"leader {lease['leader']} holds the lease in ZooKeeper"
        return False, "no capture instance holds its lease in ZooKeeper"
    return capture_runs(zone, locks)


def capture_state(config: LogtideConfig, name: str, zone: LandingZone) -> dict[str, Any]:
    """Whether capture of source `name` runs (`capture_running`), and how far its landing zone
    reaches, from the landing zone and the lease alone (no database): `running` is True, False or
    None (unknown) with `reason`; `frontier`, `checkpoint_at`/`checkpoint_age_s` (the last commit of
    capture) and `last_commit_at`/`since_last_commit_s` (source commit time of the newest landed event)."""
    checkpoint = zone.checkpoint()
    last = last_landed_commit(zone, checkpoint) if checkpoint is not None else None
    now = time.time()
    running, reason = capture_running(config, name, zone)
    return {
        "source": name,
        "frontier": lsn_text(checkpoint.frontier.encode()) if checkpoint else None,
        "checkpoint_at": checkpoint.updated_at.isoformat() if checkpoint else None,
        "checkpoint_age_s": round(now - checkpoint.updated_at.timestamp(), 1) if checkpoint else None,
        "last_commit_at": datetime.fromtimestamp(last, UTC).isoformat() if last is not None else None,
        "since_last_commit_s": round(now - last, 1) if last is not None else None,
        "running": running,
        "reason": reason,
    }


# -- lag --------------------------------------------------------------------------------------


def lag_status(name: str, source: SourceConfig, zone: LandingZone, checkpoint: Checkpoint | None) -> dict[str, Any]:
    if checkpoint is None:
        return {"error": "capture has not started (no checkpoint)"}
    last = last_landed_commit(zone, checkpoint)
    report: dict[str, Any] = {
        "last_commit_at": datetime.fromtimestamp(last, UTC).isoformat() if last is not None else None,
        "since_last_commit_s": round(time.time() - last, 1) if last is not None else None,
    }
    try:
        log_source = open_source(name, source)
        try:
            report.update(log_source.log_lag(checkpoint.resume))
        finally:
            log_source.close()
    except Exception as exc:  # unreachable, access denied, missing password: say so, show the rest
        report["error"] = f"database unreachable: {type(exc).__name__}: {exc}"
        return report
    waiting = report.get("bytes") or report.get("transactions")
    report["lag_s"] = 0.0 if not waiting else report["since_last_commit_s"]
    return report


# -- dumps ------------------------------------------------------------------------------------


# -- targets ----------------------------------------------------------------------------------


def targets_status(
    merge: MergeConfig, source: str, source_config: SourceConfig, zone: LandingZone, checkpoint: Checkpoint | None
) -> list[dict[str, Any]]:
    landed = checkpoint.frontier.encode() if checkpoint else None
    found = []
    catalog: TargetCatalog | None = None
    for name in merge_tables(zone):
        schema, _, table = name.partition(".")
        target = target_of(merge, source, schema, table)
        entry: dict[str, Any] = {"table": name, "target": str(target)}
        unusable = unmergeable(zone, source, source_config, schema, table)
        if unusable is not None:
            entry.update(skipped=unusable.reason, fix=unusable.fix)
        try:
            catalog = catalog or TargetCatalog(merge)
            iceberg = catalog.load(target)
        except Exception as exc:
            entry["error"] = f"catalog unreadable: {type(exc).__name__}: {exc}"
            found.append(entry)
            continue
        if iceberg is None:
            entry.update(applied=None, note="not merged yet")
        else:
            applied = frontier_value(table_recorded(iceberg, FRONTIER))
            entry["applied"] = lsn_text(applied)
            unknown = table_recorded(iceberg, UNKNOWN_VALUES)
            if unknown is not None:
                entry["unknown_values"] = int(unknown)
                entry["unknown_sample"] = json.loads(table_recorded(iceberg, UNKNOWN_SAMPLE) or "[]")
            if landed is not None:
                entry["landed"] = lsn_text(landed)
                entry["events_behind"] = events_past(zone, schema, table, applied)
        found.append(entry)
    return found


def unmergeable(
    zone: LandingZone, source: str, config: SourceConfig, schema: str, table: str
) -> UnusableTableError | None:
    """Why the merge skips this table (as capture.merge.table.TableMerge._key decides it): its newest
    landed file records no key, no chunk of it has one, and the configuration names none."""
    files = zone.committed_files(table_folder(schema, table))
    if files and (pq.read_schema(files[-1]).metadata or {}).get(b"logtide.key"):
        return None
    if chunk_files(zone, schema, table) or config.named_key(schema, table) is not None:
        return None
    return no_key(source, f"{schema}.{table}")


def events_past(zone: LandingZone, schema: str, table: str, applied: int) -> int:
    """Committed log events of the table with an LSN at or past `applied` (not yet in the target)."""
    frontier = committed_frontier(zone)
    if frontier is None:
        return 0
    count = 0
    for segment in table_segments(zone, schema, table, frontier, since=applied):
        if segment.first >= applied:
            count += pq.ParquetFile(segment.path).metadata.num_rows
        else:
            lsns = pq.read_table(segment.path, columns=["_lsn"])["_lsn"].to_pylist()
            count += sum(1 for lsn in lsns if int(lsn) >= applied)
    return count


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_bytes())


class TargetCatalog:
    """The merge's Iceberg catalog, read with pyiceberg: Hadoop (a folder per table, its current
    metadata named by version-hint.text) or JDBC (the `iceberg_tables` rows of a SQLite or
    PostgreSQL database, which pyiceberg's SQL catalog reads; opened read-only, never created)."""

    def __init__(self, merge: MergeConfig) -> None:
        self.merge = merge
        self._sql: Any = None
        self._uri = _sqlalchemy_uri(merge) if merge.catalog == "jdbc" else None

    def load(self, target: Target) -> Any | None:
        """The pyiceberg table (its metadata only), or None when no merge created it."""
        if self.merge.catalog == "hadoop":
            return _hadoop_table(self.merge.warehouse, target)
        if self._uri is None:  # a SQLite catalog no merge has created yet
            return None
        if self._sql is None:
            from pyiceberg.catalog.sql import SqlCatalog

            # Iceberg's Java JDBC catalog creates the v0 layout; pyiceberg warns about it on every open
            logging.getLogger("pyiceberg.catalog.sql").setLevel(logging.ERROR)
            self._sql = SqlCatalog(self.merge.catalog_name, uri=self._uri, init_catalog_tables="false")
        from pyiceberg.exceptions import NoSuchTableError
        from sqlalchemy.exc import OperationalError, ProgrammingError

        try:
            return self._sql.load_table((target.namespace, target.name))
        except NoSuchTableError:
            return None
        except (OperationalError, ProgrammingError) as exc:
            if "iceberg_tables" in str(exc):  # no merge ran yet: the catalog has no tables
                return None
            raise


def _hadoop_table(warehouse: str, target: Target) -> Any | None:
    from pyiceberg.table import StaticTable

    if "://" in warehouse and not warehouse.startswith("file:"):  # an object store: pyiceberg's FileIO reads it
        try:
            return StaticTable.from_metadata(f"{warehouse.rstrip('/')}/{target.namespace}/{target.name}")
        except FileNotFoundError:
            return None
    local = Path(unquote(urlparse(warehouse).path) if warehouse.startswith("file:") else warehouse).resolve()
    folder = local / target.namespace / target.name
    if (folder / "metadata" / "version-hint.text").exists():
        return StaticTable.from_metadata(str(folder))
    # the hint is written right after the metadata file: a table being created may lack it
    versions = sorted((folder / "metadata").glob("v*.metadata.json"), key=lambda p: int(p.name[1:].split(".")[0]))
    return StaticTable.from_metadata(str(versions[-1])) if versions else None


def _sqlalchemy_uri(merge: MergeConfig) -> str | None:
    """merge.jdbc_uri in SQLAlchemy's spelling (SQLite opened read-only; None: its file does not exist)."""
    uri = merge.jdbc_uri or ""
    if uri.startswith("jdbc:sqlite:"):
        path = Path(uri.removeprefix("jdbc:sqlite:").removeprefix("file:").split("?")[0]).resolve()
        return f"sqlite:///file:{path}?mode=ro&uri=true" if path.exists() else None
    if uri.startswith("jdbc:postgresql:"):
        parsed = urlparse(uri.removeprefix("jdbc:"))
        user = quote(merge.jdbc_user or "", safe="")
        password = merge.jdbc_password.get_secret_value()
        auth = f"{user}:{quote(password, safe='')}@" if password else (f"{user}@" if user else "")
        return f"postgresql+psycopg2://{auth}{parsed.hostname}:{parsed.port or 5432}/{parsed.path.lstrip('/')}"
    raise ValueError(f"merge.jdbc_uri {uri!r}: status reads sqlite and postgresql JDBC catalogs")


def table_recorded(table: Any, key: str) -> str | None:
    """`recorded` (capture.merge.target) of a pyiceberg table."""
    metadata = table.metadata

    def ancestry() -> Iterator[dict[str, str] | None]:
        snapshot = table.current_snapshot()
        while snapshot is not None:
            yield None if snapshot.summary is None else snapshot.summary.additional_properties
            parent = snapshot.parent_snapshot_id
            snapshot = metadata.snapshot_by_id(parent) if parent is not None else None

    return recorded(ancestry(), metadata.properties if table.current_snapshot() is not None else None, key)


# -- text output ------------------------------------------------------------------------------


def render(report: list[dict[str, Any]]) -> str:
    lines: list[str] = []
    for entry in report:
        cascades = ", foreign-key cascades accepted" if entry.get("foreign_key_cascades") == "accept" else ""
        cascades += ", partition changes accepted" if entry.get("partition_changes") == "accept" else ""
        cascades += ", table renames accepted" if entry.get("table_renames") == "accept" else ""
        cascades += ", column rewrites accepted" if entry.get("column_rewrites") == "accept" else ""
        cascades += ", clamped keys accepted" if entry.get("clamped_keys") == "accept" else ""
        lines.append(
            f"source {entry['source']} ({entry['kind']}, {entry['watermarks']} watermarks{cascades})"
            f"  landing {entry['landing']}"
        )
        running = {True: "running", False: "not running", None: "unknown"}[entry["capture"]["running"]]
        lines.append(f"  capture {running} ({entry['capture']['reason']})")
        lease = entry["lease"]
        if lease is not None:
            standbys = ", ".join(lease.get("standbys") or []) or "none"
            line = f"  lease: leader {lease['leader']}  epoch {lease['epoch']}  standbys {standbys}"
            lines.append(line + (f"  ({lease['error']})" if lease.get("error") else ""))
        if entry["frontier"] is None:
            lines.append("  capture not started (no checkpoint)")
        else:
            lines.append(
                f"  frontier {entry['frontier']}  position {json.dumps(entry['position'])}  epoch {entry['epoch']}"
            )
            lines.append(f"  checkpoint written at {entry['checkpoint_at']}")
            lines.append("  " + _render_lag(entry["lag"]))
        for table, count in entry["events_by_table"].items():
            lines.append(f"  {table:40s} {count:>10d} events")
        for table in entry.get("not_converged", ()):
            action = ("run " if table["action"].startswith("logtide ") else "") + table["action"]
            lines.append(f"  {table['table']:40s} not converged: {action}  (since {table['since']}: {table['reason']})")
        if entry["dumps"]:
            lines.append("  dumps:")
        for dump in entry["dumps"]:
            lines.extend(_render_dump(dump))
        if entry["targets"]:
            lines.append("  targets (Iceberg):")
        for target in entry["targets"]:
            lines.append("    " + _render_target(target))
        if entry.get("outputs"):
            lines.append("  outputs:")
        for output in entry.get("outputs", ()):
            line = (
                f"    {output['output']} ({output['kind']}, {output['format']}): {output['state']}  "
                f"acknowledged to LSN {output['acknowledged_lsn']}  delivered {output['delivered']}"
            )
            if output["error"]:
                line += f"  last error: {output['error']}"
            if output["chunks_undelivered"]:
                line += f"  {output['chunks_undelivered']} dump chunks read, undelivered"
            if output["holding_dumps"]:
                line += f"  holding back dump {', '.join(output['holding_dumps'])}"
            lines.append(line)
    return "\n".join(lines)


def _render_lag(lag: dict[str, Any]) -> str:
    parts = []
    if lag.get("bytes") is not None:
        parts.append(f"{lag['bytes']} bytes")
    if lag.get("transactions") is not None:
        parts.append(f"{lag['transactions']} transactions")
    if lag.get("lag_s") is not None:
        parts.append(f"{lag['lag_s']} s")
    text = "lag " + (", ".join(parts) if parts else "unknown")
    if lag.get("last_commit_at"):
        text += f"; last landed commit {lag['last_commit_at']} ({lag['since_last_commit_s']} s ago)"
    for key in ("note", "error"):
        if lag.get(key):
            text += f"  [{lag[key]}]"
    return text


def _render_dump(dump: dict[str, Any]) -> list[str]:
    head = f"    {dump['dump_id']}  {dump['state']}  {dump['tables_done']}/{len(dump['tables'])} tables"
    head += f"  {dump['rows']} rows"
    if dump.get("started_at"):
        head += f"  started {dump['started_at']}"
    if dump.get("host"):
        head += f"  on {dump['host']} pid {dump.get('pid')}"
    lines = [head]
    if dump.get("error"):
        lines.append(f"      {dump['error']}")
    for skipped in dump.get("skipped", ()):
        lines.append(f"      {skipped['table']:36s} skipped: {skipped['reason']}; {skipped['fix']}")
    for table, t in dump["tables"].items():
        line = f"      {table:36s} chunk {t.get('chunks', 0)}"
        if t.get("of_about"):
            line += f" of about {t['of_about']}"
        line += f"  {t.get('rows', 0)} rows"
        if t.get("percent") is not None:
            line += f"  {t['percent']}%"
        if t.get("waiting_for_outputs"):
            line += f"  waiting for outputs {', '.join(t['waiting_for_outputs'])}"
        if t.get("done"):
            line += "  done"
        elif t.get("eta_s") is not None:
            line += f"  ETA {t['eta_s']} s  ({t.get('rows_per_s', 0)} rows/s)"
        lines.append(line)
    return lines


def _render_target(target: dict[str, Any]) -> str:
    text = f"{target['table']:36s} -> {target['target']}"
    if target.get("error"):
        return text + f"  [{target['error']}]"
    if target.get("skipped"):
        return text + f"  skipped by the merge: {target['skipped']}; {target['fix']}"
    if target.get("applied") is None:
        return text + "  not merged yet"
    text += f"  applied frontier {target['applied']}"
    if "events_behind" in target:
        text += f"  ({target['events_behind']} landed events not applied; landing frontier {target['landed']})"
    if target.get("unknown_values"):
        count, newest = target["unknown_values"], target["unknown_sample"][0]
        text += (
            f"\n      {count} value{'s' if count > 1 else ''} unknown after key changes (NULL in the target;"
            f" newest: key {json.dumps(newest['key'])} column {newest['column']} at LSN {newest['lsn']});"
            " dump those keys or the table to repair"
        )
    return text
