"""Paths, locking, crash recovery and reading of one source's landing zone."""

from __future__ import annotations

import fcntl
import functools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute
import pyarrow.parquet as pq

from capture.errors import LockHeldError
from capture.events import Lsn, definitions_digest
from capture.landing.checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from capture.landing.files import TMP_PREFIX, fenced_rename, fsync_dir, parse_segment_name, segments
from capture.log import get_logger

log = get_logger(__name__)

SCHEMA_HISTORY = "schema_history"


@functools.lru_cache(maxsize=4096)
def schema_version(fingerprint: str, relation: int | None, definitions: str | None = None) -> str:
    """What a new `table` record is written for: another schema, (PostgreSQL) another relation, or
    (MariaDB/MySQL) other column definitions (`TableSchema.definitions`: a longer VARCHAR, another
    charset; also where the last record has none, as one landed before they were recorded)."""
    version = fingerprint if relation is None else f"{fingerprint}@{relation}"
    return version if definitions is None else f"{version}#{definitions}"


def table_folder(schema: str, table: str) -> str:
    """`db.table`, with characters that are unsafe in a path percent-encoded."""
    return f"{quote(schema, safe='')}.{quote(table, safe='')}"


def folder_table(folder: str) -> tuple[str, str]:
    schema, _, table = folder.partition(".")
    return unquote(schema), unquote(table)


class LandingZone:
    def __init__(self, root: Path, source: str) -> None:
        self.root = Path(root) / source
        self.source = source
        self.log_dir = self.root / "log"
        self.history_dir = self.root / SCHEMA_HISTORY
        self.checkpoint_path = self.root / "checkpoint.json"
        # a capture leader's staging folder (see capture.coordination.fencing): when set, every
        # write and delete of the writing side goes through it, so a newer leader can fence this one
        self.staging: Path | None = None

    # -- writing side -------------------------------------------------------------------------

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the source's lock file: one capture instance per source and machine."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / "capture.lock"
        handle = open(path, "a+")  # noqa: SIM115 - held for the life of the context
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "unknown"
                raise LockHeldError(
                    f"another capture instance (pid {holder}) is running for source {self.source!r} "
                    f"on this landing zone; stop it first (only one may write {self.root})"
                ) from None
            handle.seek(0)
            handle.truncate()
            handle.write(str(os.getpid()))
            handle.flush()
            yield
        finally:
            handle.close()

    def checkpoint(self) -> Checkpoint | None:
        return read_checkpoint(self.checkpoint_path)

    def newest_commit(self, checkpoint: Checkpoint | None = None) -> datetime | None:
        """Source commit time of the newest landed event: kept in the checkpoint (the given one, else
        the zone's), or, from a checkpoint written before it was kept, `scan_newest_commit`."""
        checkpoint = checkpoint or self.checkpoint()
        if checkpoint is None:
            return None
        if checkpoint.last_commit_known:
            return checkpoint.last_commit_at
        return self.scan_newest_commit(checkpoint.frontier)

    def scan_newest_commit(self, frontier: Lsn | None = None) -> datetime | None:
        """The newest `_commit_ts` of the last committed file of every table folder (a file removed
        meanwhile, by a restarted capture, is left out): one read per table, for older checkpoints."""
        newest: datetime | None = None
        for schema, table in self.tables():
            files = self.committed_files(table_folder(schema, table), frontier)
            if not files:
                continue
            try:
                column = pq.read_table(files[-1], columns=["_commit_ts"])["_commit_ts"]
            except FileNotFoundError:
                continue
            value = pyarrow.compute.max(column).as_py()
            if value is not None:
                value = value.replace(tzinfo=value.tzinfo or UTC)
                newest = value if newest is None else max(newest, value)
        return newest

    def write_checkpoint(self, checkpoint: Checkpoint) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        write_checkpoint(checkpoint, self.checkpoint_path, self.staging)

    def folder(self, name: str) -> Path:
        return self.history_dir if name == SCHEMA_HISTORY else self.log_dir / name

    def discard_uncommitted(self, frontier: Lsn) -> int:
        """Delete temp files and files at or past the frontier (from a crash or an unfinished
        transaction). Their events will be read from the source again, with the same LSNs."""
        limit = frontier.encode()
        removed = 0
        for folder in self._segment_folders():
            changed = False
            for path in folder.iterdir():
                span = parse_segment_name(path.name)
                if path.name.startswith(TMP_PREFIX) or (span is not None and span[0] >= limit):
                    self._remove(path)
                    removed += 1
                    changed = True
            if changed:
                fsync_dir(folder)
        if removed:
            log.info("landing.uncommitted_discarded", source=self.source, files=removed, frontier=limit)
        return removed

    def _remove(self, path: Path) -> None:
        """Unlink; through the staging folder when there is one (a fenced writer's move fails)."""
        if self.staging is None:
            path.unlink()
            return
        trash = self.staging / f"{TMP_PREFIX}discard-{path.name}"
        fenced_rename(path, trash, self.staging)
        trash.unlink()

    # -- reading side -------------------------------------------------------------------------

    def _segment_folders(self) -> list[Path]:
        folders = [p for p in self.log_dir.iterdir() if p.is_dir()] if self.log_dir.exists() else []
        if self.history_dir.exists():
            folders.append(self.history_dir)
        return folders

    def tables(self) -> list[tuple[str, str]]:
        """(schema, table) of every table with landed events."""
        if not self.log_dir.exists():
            return []
        return sorted(folder_table(p.name) for p in self.log_dir.iterdir() if p.is_dir())

    def committed_files(self, folder: str, frontier: Lsn | None = None) -> list[Path]:
        """Files wholly below the frontier (the checkpoint's, unless given), in LSN order."""
        if frontier is None:
            checkpoint = self.checkpoint()
            if checkpoint is None:
                return []
            frontier = checkpoint.frontier
        limit = frontier.encode()
        return [s.path for s in segments(self.folder(folder), limit) if s.last < limit]

    def read_files(self, folder: str, frontier: Lsn | None = None) -> list[pa.Table]:
        """The committed files of one folder, each as its own table, in LSN order (each keeps its own
        schema and metadata: the key its events were logged under, `logtide.key`)."""
        return [pq.read_table(f) for f in self.committed_files(folder, frontier)]

    def read(self, folder: str, frontier: Lsn | None = None) -> pa.Table | None:
        """All committed events of one folder as one table in LSN order (schemas unified:
        columns added later are null in older rows)."""
        return unified(self.read_files(folder, frontier))

    def read_table(self, schema: str, table: str, frontier: Lsn | None = None) -> pa.Table | None:
        return self.read(table_folder(schema, table), frontier)

    def read_schema_history(self, frontier: Lsn | None = None) -> pa.Table | None:
        return self.read(SCHEMA_HISTORY, frontier)

    def table_fingerprints(self) -> dict[str, str]:
        """Folder -> `schema_version` of the table schema last recorded in the schema history."""
        latest: dict[str, str] = {}
        for row in self.table_records():
            definitions = definitions_digest([c.get("definition") for c in row["columns"] or []])
            latest[table_folder(row["schema"], row["table"])] = schema_version(
                row["fingerprint"], row["relation"], definitions
            )
        return latest

    def table_records(self) -> list[dict]:
        """The schema history's `table` records, in LSN order (`relation` None where not recorded)."""
        history = self.read_schema_history()
        if history is None:
            return []
        names = ["_lsn", "schema", "table", "columns", "key", "fingerprint"]
        if "relation" in history.column_names:
            names.append("relation")
        rows = history.filter(pa.compute.equal(history["kind"], "table")).select(names).to_pylist()
        return [{"relation": None, **row} for row in rows]

    def relation_records(self) -> list[dict]:
        """PostgreSQL: what the schema history says of each captured name's relation, in LSN order: the
        `table` records, and the `truncate` records of dropped tables (`relation` set), each with its
        `kind` (sources/postgres/schema_change.py)."""
        history = self.read_schema_history()
        if history is None or "relation" not in history.column_names:
            return [{"kind": "table", **row} for row in self.table_records()]
        kinds = history["kind"]
        dropped = pa.compute.and_(pa.compute.equal(kinds, "truncate"), pa.compute.is_valid(history["relation"]))
        wanted = pa.compute.or_(pa.compute.equal(kinds, "table"), dropped)
        names = ["_lsn", "kind", "schema", "table", "columns", "key", "fingerprint", "relation"]
        return history.filter(wanted).select(names).to_pylist()


def unified(tables: list[pa.Table]) -> pa.Table | None:
    """Landed files' tables as one (columns added later are null in older rows); None for none."""
    return pa.concat_tables(tables, promote_options="permissive") if tables else None
