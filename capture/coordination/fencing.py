"""Fencing: a capture instance that lost its lease cannot change the landing zone.

A lease (ZooKeeper or local) says who *should* write; these rules make sure nobody else *can*,
even a leader that was paused (SIGSTOP, a long GC, a frozen VM) and wakes up still believing
it leads:

1. Every acquisition has an epoch larger than any before it (`landed_epoch` is the floor:
   the landing zone remembers the highest epoch that ever claimed it, so a wiped ZooKeeper
   cannot hand out an old number again).
2. `claim(zone, epoch)`: the new leader creates its staging folder `<root>/.epoch-<epoch>`
   and removes the staging folders of all older epochs (rename, then delete). It refuses
   when a newer epoch already has one.
3. A leader writes every file, the checkpoint included, in its staging folder and renames it
   into place; it deletes files by renaming them into its staging folder. Once a newer leader
   has removed that folder, each of these fails (FencedError): an old leader's commit either
   completed before the new leader's claim - and the new leader starts from that checkpoint
   and discards whatever lies past it - or it changes nothing.
4. `CommitGuard`, called by the LogWriter before a commit's files and before its checkpoint:
   the lease must still be held (the ZooKeeper lease re-confirms its session when the last
   confirmation is older than a third of the session timeout) and the checkpoint on disk must
   not carry a higher epoch than ours.

Rule 3 is what holds under any timing; 4 stops a deposed leader early, with a clear error,
and keeps it from committing once it knows (or could know) that its session is gone.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from pathlib import Path

from capture.coordination import Lease
from capture.errors import FencedError, LeaseLostError
from capture.landing import LandingZone
from capture.landing.files import fsync_dir
from capture.log import get_logger

log = get_logger(__name__)

STAGING_PREFIX = ".epoch-"
FENCED_PREFIX = ".fenced-"
_STAGING = re.compile(r"^\.epoch-(\d+)$")


def _staging_folders(zone: LandingZone) -> dict[int, Path]:
    if not zone.root.is_dir():
        return {}
    found = {}
    for path in zone.root.iterdir():
        match = _STAGING.match(path.name)
        if match and path.is_dir():
            found[int(match.group(1))] = path
    return found


def landed_epoch(zone: LandingZone) -> int:
    """The highest epoch that has claimed this landing zone (0: none yet)."""
    checkpoint = zone.checkpoint()
    epochs = [*_staging_folders(zone), (checkpoint.epoch or 0) if checkpoint else 0]
    return max(epochs, default=0)


def claim(zone: LandingZone, epoch: int) -> Path:
    """Fence off every older epoch and make `epoch` the landing zone's writer (sets zone.staging)."""
    zone.root.mkdir(parents=True, exist_ok=True)
    folders = _staging_folders(zone)
    newer = [e for e in folders if e > epoch]
    if newer:
        raise FencedError(
            f"source {zone.source!r}: epoch {max(newer)} has already claimed {zone.root}; "
            f"this instance (epoch {epoch}) is not the leader any more"
        )
    for old, path in folders.items():
        if old < epoch:
            target = zone.root / f"{FENCED_PREFIX}{old}-{uuid.uuid4().hex[:8]}"
            os.rename(path, target)  # from here on, epoch `old` can neither write nor delete
            log.info("capture.fenced_off", source=zone.source, epoch=old, by_epoch=epoch)
    staging = zone.root / f"{STAGING_PREFIX}{epoch}"
    staging.mkdir(exist_ok=True)
    fsync_dir(zone.root)
    for path in zone.root.iterdir():
        if path.name.startswith(FENCED_PREFIX):
            shutil.rmtree(path, ignore_errors=True)  # a fenced writer may still be adding to it
    zone.staging = staging
    return staging


class CommitGuard:
    """The check the LogWriter runs before each commit (cheap: a flag, now and then a ZooKeeper
    round trip, and one read of the small checkpoint file)."""

    def __init__(self, lease: Lease, zone: LandingZone, epoch: int) -> None:
        self.lease, self.zone, self.epoch = lease, zone, epoch

    def __call__(self) -> None:
        if not self.lease.is_held():
            raise LeaseLostError(
                f"source {self.zone.source!r}: the {self.lease.kind} lease (epoch {self.epoch}) is no longer held; "
                "this instance commits nothing more"
            )
        on_disk = self.zone.checkpoint()
        if on_disk is not None and on_disk.epoch is not None and on_disk.epoch > self.epoch:
            raise FencedError(
                f"source {self.zone.source!r}: the checkpoint was written by epoch {on_disk.epoch}, "
                f"newer than this instance's {self.epoch}; a newer leader has committed, so this commit is refused"
            )
