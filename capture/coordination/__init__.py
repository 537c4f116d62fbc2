"""Leases: which capture instance of a source may read its log and write its landing zone.

A `Lease` is held by at most one instance per source. Two kinds:

- `local` (`LocalLease`, the default): the landing zone's lock file. One instance per source
  and machine; a second one is refused at once with a message naming the holder's pid.
- `zookeeper` (`ZooKeeperLease`): an ephemeral sequential node under
  `<root>/<source>/leader` (kazoo's Lock recipe); standbys queue behind the leader and the next
  one takes over when the leader's session ends (kill, crash, pause, network cut).

Each acquisition gets an epoch, a number larger than every epoch before it. The leader writes
it into every checkpoint and claims the landing zone with it (`fencing.claim`); a commit is
refused when the lease is no longer held or a newer epoch has written the checkpoint, and the
staging folder of an older epoch is removed so its writes fail (see `fencing`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from capture.config import LogtideConfig
    from capture.landing import LandingZone


class Lease(Protocol):
    """One source's leadership. Not reentrant; acquire, then release, then acquire again."""

    kind: str
    identity: str  # who this instance is, e.g. "host:pid"
    waits: bool  # True: acquire() waits as a standby; False: it refuses at once when held elsewhere
    lost: threading.Event  # set (from any thread) when a held lease is lost

    def acquire(self, stop: threading.Event) -> bool:
        """Block until the lease is held (True) or `stop` is set (False)."""
        ...

    def is_held(self) -> bool:
        """True while this instance may still commit (the local lease: always, once acquired)."""
        ...

    @property
    def epoch(self) -> int | None:
        """The epoch of the current acquisition (None before the first)."""
        ...

    def release(self) -> None:
        """Give the lease up (idempotent); standbys may take it at once."""
        ...


def open_lease(config: LogtideConfig, source: str, zone: LandingZone) -> Lease:
    """The lease the configuration asks for (`coordination.kind`)."""
    from capture.coordination.fencing import landed_epoch

    coordination = config.coordination
    if coordination.kind == "zookeeper":
        from capture.coordination.zookeeper import ZooKeeperLease

        return ZooKeeperLease(coordination, source, floor=lambda: landed_epoch(zone))
    from capture.coordination.local import LocalLease

    return LocalLease(zone)


__all__ = ["Lease", "open_lease"]
