"""The local lease: the landing zone's lock file (one capture instance per source and machine)."""

from __future__ import annotations

import os
import socket
import threading
from contextlib import ExitStack

from capture.coordination.fencing import landed_epoch
from capture.landing import LandingZone
from capture.landing.alive import AliveBeat


class LocalLease:
    """`LandingZone.lock()` as a Lease. Does not wait: a second instance gets LockHeldError,
    whose message names the holder's pid. The lock dies with its process, so it is never lost.
    While held, the heartbeat file (`capture.landing.alive`) says so to other containers and hosts."""

    kind = "local"
    waits = False

    def __init__(self, zone: LandingZone) -> None:
        self.zone = zone
        self.identity = f"{socket.gethostname()}:{os.getpid()}"
        self.lost = threading.Event()
        self._stack: ExitStack | None = None
        self._epoch: int | None = None

    def acquire(self, stop: threading.Event) -> bool:
        if stop.is_set():
            return False
        with ExitStack() as stack:
            stack.enter_context(self.zone.lock())  # raises LockHeldError when held
            beat = AliveBeat(self.zone.root)
            stack.callback(beat.stop)  # before the lock is released: stopped cleanly, no heartbeat left
            beat.start()
            self._stack = stack.pop_all()
        self._epoch = landed_epoch(self.zone) + 1  # under the lock: no other writer can race us
        return True

    def is_held(self) -> bool:
        return self._stack is not None

    @property
    def epoch(self) -> int | None:
        return self._epoch

    def release(self) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None
