"""What `logtide status` reports, collected without Spark and without a running capture service.

Per source:
- the lease (ZooKeeper: leader, standbys, epoch) and the checkpoint (frontier, position, epoch);
- lag: the source's log end against the landed position (MariaDB/MySQL: binlog bytes and, with
  GTIDs, transactions; PostgreSQL: WAL bytes from the slot's confirmed LSN), the time since the
  last landed commit, and `lag_s`: 0 when nothing is waiting, else that time (an upper bound: the
  oldest waiting transaction may be younger);
- per dump found under `<landing>/<source>/dumps/`: state, per table chunks, rows, percent, ETA;
- per target Iceberg table: the frontier the merge applied (`logtide.frontier`, read from the
  table's metadata JSON: Hadoop catalog via version-hint.text, JDBC catalog via its
  `iceberg_tables` row) and how many landed events of the table lie past it; and the values
  PostgreSQL key changes left out that the merge could not complete (`logtide.unknown-values`,
  NULL in the target until a dump repairs them); a landed table the merge skips (no key landed,
  none named in `keys`) with the reason and the fix.

Frontiers (`frontier`, `applied`, `landed`) are decimal text in the report, as everywhere an LSN
leaves a process (`capture.events.lsn_text`).

Each part fails on its own: an unreachable database, ZooKeeper or catalog is reported in its
place and the rest is still shown.
"""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow.compute as pc
import pyarrow.parquet as pq

from capture.config import LogtideConfig, MergeConfig, SourceConfig
from capture.coordination.claims import LocalClaims
from capture.dump.progress import dump_dir
from capture.dump.record import RECORD, read_record
from capture.errors import UnusableTableError
from capture.events import lsn_text
from capture.landing import LandingZone
from capture.landing.checkpoint import Checkpoint
from capture.landing.chunks import chunk_files
from capture.landing.files import parse_segment_name
from capture.landing.zone import folder_table, table_folder
from capture.sources.table_keys import no_key

FRONTIER = "logtide.frontier"  # as capture/merge/table.py writes it
UNKNOWN_VALUES, UNKNOWN_SAMPLE = "logtide.unknown-values", "logtide.unknown-sample"
CHANGELOG_SUFFIX = "__changelog"


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
        "landing": str(zone.root),
        "frontier": lsn_text(checkpoint.frontier.encode()) if checkpoint else None,  # text: see lsn_text
        "position": checkpoint.resume if checkpoint else None,
        "checkpoint_at": checkpoint.updated_at.isoformat() if checkpoint else None,
        "epoch": checkpoint.epoch if checkpoint else None,
        "lease": lease_status(config, name),
        "events_by_table": events_by_table(zone) if checkpoint else {},
    }
    report["lag"] = lag_status(name, source, zone, checkpoint)
    report["dumps"] = dumps_status(zone)
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


def last_landed_commit(zone: LandingZone) -> float | None:
    """Source commit time (epoch seconds) of the newest landed event: the last committed file of
    every table folder holds it."""
    newest: float | None = None
    for schema, table in zone.tables():
        files = zone.committed_files(table_folder(schema, table))
        if not files:
            continue
        column = pq.read_table(files[-1], columns=["_commit_ts"])["_commit_ts"]
        value = pc.max(column).as_py()
        if value is not None:
            stamp = value.replace(tzinfo=value.tzinfo or UTC).timestamp()
            newest = stamp if newest is None else max(newest, stamp)
    return newest


# -- lag --------------------------------------------------------------------------------------


def lag_status(name: str, source: SourceConfig, zone: LandingZone, checkpoint: Checkpoint | None) -> dict[str, Any]:
    if checkpoint is None:
        return {"error": "capture has not started (no checkpoint)"}
    last = last_landed_commit(zone)
    report: dict[str, Any] = {
        "last_commit_at": datetime.fromtimestamp(last, UTC).isoformat() if last is not None else None,
        "since_last_commit_s": round(time.time() - last, 1) if last is not None else None,
    }
    try:
        if source.kind == "postgresql":
            report.update(_postgres_lag(name, source))
        else:
            report.update(_mysql_lag(source, checkpoint.resume))
    except Exception as exc:  # unreachable, access denied, missing password: say so, show the rest
        report["error"] = f"database unreachable: {type(exc).__name__}: {exc}"
        return report
    waiting = report.get("bytes") or report.get("transactions")
    report["lag_s"] = 0.0 if not waiting else report["since_last_commit_s"]
    return report


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


def _mysql_lag(source: SourceConfig, resume: dict[str, Any]) -> dict[str, Any]:
    from capture.sources.mysql.connection import connect, query
    from capture.sources.mysql.source import binlog_distance

    with connect(source) as conn:
        status = query(conn, "SHOW MASTER STATUS")
        logs = [(str(r[0]), int(r[1])) for r in query(conn, "SHOW BINARY LOGS")]
        gtid = query(conn, "SELECT @@gtid_binlog_pos")[0][0] if source.kind == "mariadb" else None
    end = (str(status[0][0]), int(status[0][1])) if status else None
    report: dict[str, Any] = {"server_position": {"file": end[0], "pos": end[1]} if end else None}
    report["bytes"] = binlog_distance(logs, (resume["file"], int(resume["pos"])), end) if end else None
    if gtid is not None and resume.get("gtid") is not None:
        report["server_gtid"] = gtid
        report["transactions"] = gtid_distance(gtid, resume["gtid"])
    if end and report["bytes"] is None:
        report["note"] = f"the checkpoint's binlog {resume['file']} is no longer on the server"
    return report


def _postgres_lag(name: str, source: SourceConfig) -> dict[str, Any]:
    from capture.sources.postgres.connection import connect, query

    slot = source.slot_name(name)
    conn = connect(source)
    try:
        rows = query(
            conn,
            "SELECT pg_current_wal_lsn()::text, confirmed_flush_lsn::text,"
            " pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint,"
            " pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint"
            " FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        )
    finally:
        conn.close()
    if not rows:
        return {"bytes": None, "note": f"replication slot {slot!r} does not exist"}
    current, confirmed, behind, retained = rows[0]
    return {
        "server_position": {"lsn": current},
        "slot": slot,
        "confirmed_flush_lsn": confirmed,
        "bytes": int(behind) if behind is not None else None,
        "retained_bytes": int(retained) if retained is not None else None,
    }


# -- dumps ------------------------------------------------------------------------------------


def dumps_status(zone: LandingZone) -> list[dict[str, Any]]:
    base = zone.root / "dumps"
    if not base.is_dir():
        return []
    folders = sorted((p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")), key=_started)
    claims = LocalClaims(zone)
    return [_dump_status(zone, claims, folder.name) for folder in folders]


def _started(folder: Path) -> str:
    record = read_record(folder / RECORD) or {}
    return str(record.get("started_at") or datetime.fromtimestamp(folder.stat().st_mtime, UTC).isoformat())


def _dump_status(zone: LandingZone, claims: LocalClaims, dump_id: str) -> dict[str, Any]:
    folder = dump_dir(zone, dump_id)
    record = read_record(folder / RECORD) or {}
    tables: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("*.json")):
        if path.name in (RECORD, "control.json"):
            continue
        progress = read_record(path) or {}
        schema, table = folder_table(path.stem)
        tables[f"{schema}.{table}"] = {
            "chunks": progress.get("chunk", 0),
            "rows": progress.get("rows", 0),
            "done": bool(progress.get("done")),
        }
    for table, fields in record.get("tables", {}).items():
        tables[table] = {**tables.get(table, {}), **fields}
    control = read_record(folder / "control.json") or {}
    state = record.get("state")
    entry: dict[str, Any] = {"dump_id": dump_id, "tables": tables}
    if state == "running":
        pending = [t for t, v in tables.items() if not v.get("done")]
        holders = [h for t in pending if (h := claims.probe(t)) is not None]
        if not pending:  # it ended between its last table and its record's last write
            state = "finished"
        elif not any(h.dump_id == dump_id for h in holders):
            state = "failed"
            entry["error"] = (
                f"its process is gone (host {record.get('host')}, pid {record.get('pid')}) without finishing; "
                "rerun it with the same dump id to resume"
            )
        elif control.get("state") in ("paused", "cancelled"):
            state = "paused" if control["state"] == "paused" else "cancelling"
    elif state is None:  # a dump without a record (older versions): its progress files alone
        state = "finished" if tables and all(v.get("done") for v in tables.values()) else "unfinished"
    entry["state"] = state
    for key in ("host", "pid", "started_at", "resumed_at", "updated_at", "finished_at"):
        if record.get(key):
            entry[key] = record[key]
    if record.get("error") and "error" not in entry:
        entry["error"] = record["error"]
    if record.get("skipped"):
        entry["skipped"] = record["skipped"]
    entry["rows"] = sum(int(v.get("rows") or 0) for v in tables.values())
    entry["tables_done"] = sum(1 for v in tables.values() if v.get("done"))
    return entry


# -- targets ----------------------------------------------------------------------------------


def targets_status(
    merge: MergeConfig, source: str, source_config: SourceConfig, zone: LandingZone, checkpoint: Checkpoint | None
) -> list[dict[str, Any]]:
    namespace = merge.namespace or source
    landed = checkpoint.frontier.encode() if checkpoint else None
    found = []
    for name in zone.merge_tables():
        schema, _, table = name.partition(".")
        target = f"{schema}__{table}"
        entry: dict[str, Any] = {"table": name, "target": f"{merge.catalog_name}.{namespace}.{target}"}
        unusable = unmergeable(zone, source, source_config, schema, table)
        if unusable is not None:
            entry.update(skipped=unusable.reason, fix=unusable.fix)
        try:
            metadata = read_table_metadata(merge, namespace, target)
        except Exception as exc:
            entry["error"] = f"catalog unreadable: {type(exc).__name__}: {exc}"
            found.append(entry)
            continue
        if metadata is None:
            entry.update(applied=None, note="not merged yet")
        else:
            applied = applied_frontier(metadata)
            entry["applied"] = lsn_text(applied)
            unknown = recorded(metadata, UNKNOWN_VALUES)
            if unknown is not None:
                entry["unknown_values"] = int(unknown)
                entry["unknown_sample"] = json.loads(recorded(metadata, UNKNOWN_SAMPLE) or "[]")
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


def recorded(metadata: dict[str, Any], key: str) -> str | None:
    """`key` of the newest snapshot summary in the current ancestry that has it, else the table
    property (as capture.merge.table.recorded, from the metadata JSON)."""
    snapshots = {s["snapshot-id"]: s for s in metadata.get("snapshots") or []}
    current = metadata.get("current-snapshot-id")
    snapshot = snapshots.get(current) if current not in (None, -1) else None
    has_snapshot = snapshot is not None
    while snapshot is not None:
        value = (snapshot.get("summary") or {}).get(key)
        if value is not None:
            return str(value)
        snapshot = snapshots.get(snapshot.get("parent-snapshot-id"))
    value = (metadata.get("properties") or {}).get(key) if has_snapshot else None
    return str(value) if value is not None else None


def applied_frontier(metadata: dict[str, Any]) -> int:
    value = recorded(metadata, FRONTIER)
    return int(value) if value is not None else 0


def events_past(zone: LandingZone, schema: str, table: str, applied: int) -> int:
    """Committed log events of the table with an LSN at or past `applied` (not yet in the target)."""
    count = 0
    for path in zone.committed_files(table_folder(schema, table)):
        span = parse_segment_name(path.name)
        if span is None or span[1] < applied:
            continue
        if span[0] >= applied:
            count += pq.ParquetFile(path).metadata.num_rows
        else:
            lsns = pq.read_table(path, columns=["_lsn"])["_lsn"].to_pylist()
            count += sum(1 for lsn in lsns if int(lsn) >= applied)
    return count


def _local_path(location: str) -> Path:
    """A file: URI or a plain path; other schemes need Spark or their own client."""
    if "://" not in location and not location.startswith("file:"):
        return Path(location)
    parsed = urlparse(location)
    if parsed.scheme != "file":
        raise ValueError(f"{location} is not on a local or mounted file system; status reads only those")
    return Path(unquote(parsed.path))


def _read_json(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    if path.name.endswith(".gz") or path.name.endswith(".gz.metadata.json"):
        data = gzip.decompress(data)
    return json.loads(data)


def read_table_metadata(merge: MergeConfig, namespace: str, table: str) -> dict[str, Any] | None:
    """The current metadata JSON of an Iceberg table (None: no such table)."""
    if merge.catalog == "hadoop":
        folder = _local_path(merge.warehouse).resolve() / namespace / table / "metadata"
        if not folder.is_dir():
            return None
        hint = folder / "version-hint.text"
        version = int(hint.read_text().strip()) if hint.exists() else None
        if version is None:
            versions = [int(p.name[1:].split(".")[0]) for p in folder.glob("v*.metadata.json*")]
            if not versions:
                return None
            version = max(versions)
        for name in (f"v{version}.metadata.json", f"v{version}.gz.metadata.json", f"v{version}.metadata.json.gz"):
            if (folder / name).exists():
                return _read_json(folder / name)
        return None
    location = _jdbc_metadata_location(merge, namespace, table)
    return _read_json(_local_path(location)) if location else None


def _jdbc_metadata_location(merge: MergeConfig, namespace: str, table: str) -> str | None:
    uri = merge.jdbc_uri or ""
    sql = (
        "SELECT metadata_location FROM iceberg_tables"
        " WHERE catalog_name = {p} AND table_namespace = {p} AND table_name = {p}"
    )
    args = (merge.catalog_name, namespace, table)
    if uri.startswith("jdbc:sqlite:"):
        path = uri.removeprefix("jdbc:sqlite:").removeprefix("file:").split("?")[0]
        if not os.path.exists(path):
            return None
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            try:
                row = conn.execute(sql.format(p="?"), args).fetchone()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return None
                raise
        return row[0] if row else None
    if uri.startswith("jdbc:postgresql:"):
        import psycopg2

        parsed = urlparse(uri.removeprefix("jdbc:"))
        conn = psycopg2.connect(
            host=parsed.hostname,
            port=parsed.port or 5432,
            dbname=parsed.path.lstrip("/"),
            user=merge.jdbc_user,
            password=merge.jdbc_password.get_secret_value() or None,
            connect_timeout=5,
        )
        try:
            with conn.cursor() as cursor:
                cursor.execute("SELECT to_regclass('iceberg_tables') IS NOT NULL")
                if not cursor.fetchone()[0]:
                    return None
                cursor.execute(sql.format(p="%s"), args)
                row = cursor.fetchone()
        finally:
            conn.close()
        return row[0] if row else None
    raise ValueError(f"merge.jdbc_uri {uri!r}: status reads sqlite and postgresql JDBC catalogs")


# -- text output ------------------------------------------------------------------------------


def render(report: list[dict[str, Any]]) -> str:
    lines: list[str] = []
    for entry in report:
        lines.append(
            f"source {entry['source']} ({entry['kind']}, {entry['watermarks']} watermarks)  landing {entry['landing']}"
        )
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
