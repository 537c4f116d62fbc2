"""The local lease: the landing zone's lock file (one capture instance per source and machine), and
how another process tells that it is held (`capture_runs`): the lock in the kernel's lock table, else
the heartbeat (`capture.landing.alive`) judged on the reader's own clock."""

from __future__ import annotations

import os
import socket
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from capture.coordination.fencing import landed_epoch
from capture.landing import LandingZone
from capture.landing.alive import ALIVE_EVERY_S, ALIVE_STALE_S, AliveBeat, alive_path, parse_alive

LOCK_TABLE = Path("/proc/locks")
WATCH_POLL_S = 0.1


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


def lock_held(zone: LandingZone, locks: Path = LOCK_TABLE) -> bool | None:
    """Whether a process holds the zone's lock file (`LandingZone.lock`), read from the kernel's lock
    table without taking the lock (a probe that took it would make a capture starting at that moment
    fail); None where the table cannot be read. The table lists only the locks of this PID namespace's
    processes: a capture in another container (docker-compose.yml runs Airflow and capture in separate
    ones) or on another machine does not show here, nor reliably one on NFS or overlayfs; its
    heartbeat does (`heartbeat`)."""
    try:
        stat = (zone.root / "capture.lock").stat()
        table = locks.read_text()
    except FileNotFoundError:
        return False if locks.exists() else None
    except OSError:
        return None
    ident = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    for line in table.splitlines():
        fields = line.split()
        if "->" not in fields and len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == ident:
            return True
    return False


# heartbeat path -> (its content, this process's monotonic time from which it has stood unchanged)
_seen: dict[Path, tuple[str, float]] = {}


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def heartbeat(root: Path) -> tuple[bool, dict[str, Any] | None, str]:
    """Whether the heartbeat under `root` is fresh, the beat (`parse_alive`, or None: none), and how
    that was told. The writer's clock (its `at`) may be set hours apart from this host's (another host
    in docker-compose.yml): it is only a hint. The judgment is this process's own clock watching the
    content (every beat changes it, `seq`):
    - changed since this process last looked: fresh (written meanwhile);
    - unchanged for `ALIVE_STALE_S` of this process's time: stale;
    - first look: fresh when `at` is plausible by this clock (no older than `ALIVE_STALE_S`, not ahead
      by more than a beat: no wait, as before); otherwise (stale by this clock, or from the future)
      watched for two beats (the beat's `every_s`): fresh if it changes, stale if not.
    A long-lived reader (Airflow's wait for HIGH watermarks) keeps its observations: after a kill it
    tells `stale` `ALIVE_STALE_S` after it last saw a change, whatever either clock says."""
    path = alive_path(root)
    text = _read(path)
    if text is None:
        _seen.pop(path, None)
        return False, None, "no heartbeat"
    beat = parse_alive(text)
    now = time.monotonic()
    seen = _seen.get(path)
    if seen is not None and seen[0] == text:
        unchanged = round(now - seen[1], 1)
        if unchanged < ALIVE_STALE_S:
            return True, beat, f"wrote its heartbeat within the last {unchanged} s (seen here)"
        return False, beat, f"its last heartbeat is unchanged for {unchanged} s (stale after {ALIVE_STALE_S:g} s)"
    if seen is not None:
        _seen[path] = (text, now)
        return True, beat, "rewrote its heartbeat since this process last looked"
    every_s = (beat or {}).get("every_s")
    every_s = float(every_s) if isinstance(every_s, int | float) and every_s > 0 else ALIVE_EVERY_S
    age = None if beat is None else beat["age_s"]
    if age is not None and -every_s <= age < ALIVE_STALE_S:
        _seen[path] = (text, now - max(age, 0.0))
        return True, beat, f"wrote its heartbeat {age} s ago"
    deadline = now + min(2 * every_s, ALIVE_STALE_S)
    while time.monotonic() < deadline:
        time.sleep(WATCH_POLL_S)
        again = _read(path)
        if again is None:  # removed: a clean stop
            _seen.pop(path, None)
            return False, None, "no heartbeat"
        if again != text:
            _seen[path] = (again, time.monotonic())
            return (
                True,
                parse_alive(again) or beat,
                f"rewrote its heartbeat while watched (stamped {age} s ago by this host's clock)",
            )
    _seen[path] = (text, now - ALIVE_STALE_S)
    clock = f"{age} s old by this host's clock" if age is not None else "unreadable"
    watched = f"unchanged for {2 * every_s:g} s (stale after {ALIVE_STALE_S:g} s)"
    return False, beat, f"its last heartbeat is {clock} and {watched}"


def capture_runs(zone: LandingZone, locks: Path = LOCK_TABLE) -> tuple[bool | None, str]:
    """Whether a capture instance holds the zone's local lease (True, False or None: unknown) and why:
    a process holds the lock file (`lock_held`, this PID namespace only) or its heartbeat is fresh
    (`heartbeat`); stopped when neither, so a capture in another container or on another host counts."""
    lock = zone.root / "capture.lock"
    held = lock_held(zone, locks)
    if held:
        return True, f"a process holds {lock}"
    fresh, beat, how = heartbeat(zone.root)
    if fresh:
        who = f"pid {beat.get('pid')} on {beat.get('host')}" if beat else "an unreadable heartbeat"
        return True, f"capture ({who}) {how}"
    if beat is None and held is None:
        return None, "the kernel's lock table cannot be read and there is no heartbeat"
    return False, f"no process holds {lock} here and {how}"
