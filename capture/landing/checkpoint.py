"""The checkpoint: the committed frontier and where the source resumes from.

Writing it is the commit of everything landed before it: files are made durable first,
then the checkpoint, and only then is the source told (PostgreSQL feedback).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from capture.errors import LandingZoneError
from capture.events import Lsn, lsn_text
from capture.landing.files import write_json_atomic

FORMAT_VERSION = 1


@dataclass(frozen=True)
class Checkpoint:
    frontier: Lsn  # every event with a smaller LSN is landed; nothing at or past it is
    resume: dict[str, Any]  # source-specific position, e.g. {"gtid": "0-1-42", "file": ..., "pos": ...}
    updated_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    epoch: int | None = None  # the writer's lease epoch (fencing token); absent in older checkpoints
    # source commit time of the newest event landed below the frontier (None: none landed), so readers
    # (`logtide status`, every Airflow merge task) need not open the newest file of every table for it;
    # False in checkpoints written before it was kept: `LandingZone.newest_commit` reads the files then
    last_commit_at: datetime | None = None
    last_commit_known: bool = True

    def to_json(self) -> dict[str, Any]:
        data = {
            "version": FORMAT_VERSION,
            "frontier": lsn_text(self.frontier.encode()),  # text, as every LSN outside a process; ints still read
            "frontier_major": self.frontier.major,
            "frontier_minor": self.frontier.minor,
            "resume": self.resume,
            "updated_at": self.updated_at.isoformat(),
        }
        if self.epoch is not None:
            data["epoch"] = self.epoch
        if self.last_commit_known:
            data["last_commit_at"] = None if self.last_commit_at is None else self.last_commit_at.isoformat()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Checkpoint:
        if data.get("version") != FORMAT_VERSION:
            raise LandingZoneError(f"checkpoint format {data.get('version')!r} is not {FORMAT_VERSION}")
        epoch = data.get("epoch")
        if epoch is not None and (not isinstance(epoch, int) or isinstance(epoch, bool)):
            raise ValueError(f"epoch {epoch!r} is not an integer")
        last = data.get("last_commit_at")
        return cls(
            Lsn.decode(data["frontier"]),
            data["resume"],
            datetime.fromisoformat(data["updated_at"]),
            epoch,
            None if last is None else datetime.fromisoformat(last),
            "last_commit_at" in data,
        )


def read_checkpoint(path: Path) -> Checkpoint | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return Checkpoint.from_json(json.loads(text))
    except (ValueError, KeyError) as exc:
        raise LandingZoneError(
            f"checkpoint {path} is unreadable ({exc}); restore it or start over with --reset"
        ) from None


def write_checkpoint(checkpoint: Checkpoint, path: Path, tmp_dir: Path | None = None) -> None:
    write_json_atomic(checkpoint.to_json(), path, tmp_dir=tmp_dir)
