"""The capture heartbeat: `<landing>/<source>/capture.alive`, rewritten every `ALIVE_EVERY_S` by the
instance holding the local lease, idle source or not (its own thread, not the stream's).

Why: the lock file's holder shows in /proc/locks only to processes of the same kernel PID
namespace (not to another container: Airflow's and capture's are separate in docker-compose.yml)
and not reliably over NFS or overlayfs; a checkpoint is written only when the source gives
something to commit (not during a reconnect backoff or a long transaction). A heartbeat younger
than `ALIVE_STALE_S` says an instance runs wherever the landing zone is shared. Removed on a clean
release; after a kill it goes stale. With ZooKeeper the leader's znode says the same and this file
is not read.

Each beat carries `seq` (counting up) besides `at` (the writer's clock): every beat changes the file's
content, so a reader on another host can tell a live writer from a dead one by watching the content
change on its own clock, whatever the writer's clock says (`capture.coordination.local.heartbeat`).
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from capture.landing.files import write_json_atomic
from capture.log import get_logger

log = get_logger(__name__)

ALIVE_FILE = "capture.alive"
ALIVE_EVERY_S = 2.0
ALIVE_STALE_S = 5 * ALIVE_EVERY_S  # no heartbeat for this long: the instance is gone


def alive_path(root: Path) -> Path:
    return root / ALIVE_FILE


def parse_alive(text: str) -> dict[str, Any] | None:
    """A heartbeat's content (`at` as written, `age_s` by this host's clock, `pid`, `host`, `seq`), or
    None where it cannot be read: a heartbeat that cannot be read says nothing."""
    try:
        data = json.loads(text)
        at = datetime.fromisoformat(data["at"])
        age_s = round(datetime.now(UTC).timestamp() - at.timestamp(), 1)
    except (ValueError, KeyError, TypeError):
        return None
    return {**data, "age_s": age_s} if isinstance(data, dict) else None


def read_alive(root: Path) -> dict[str, Any] | None:
    """The last heartbeat (`parse_alive`), or None where there is none or it cannot be read."""
    try:
        return parse_alive(alive_path(root).read_text())
    except OSError:
        return None


class AliveBeat:
    """Writes the heartbeat file until `stop` (then removes it): started when the lock is taken."""

    def __init__(
        self, root: Path, every_s: float = ALIVE_EVERY_S, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self.path = alive_path(root)
        self.every_s = every_s
        self.clock = clock  # what stamps `at` (tests skew it: another host's clock)
        self.seq = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="capture-alive", daemon=True)

    def start(self) -> None:
        self._beat()  # before returning: a check right after the lock is taken sees it
        self._thread.start()

    def _beat(self) -> None:
        self.seq += 1
        data = {"at": self.clock().isoformat(), "seq": self.seq, "pid": os.getpid(), "host": socket.gethostname()}
        write_json_atomic({**data, "every_s": self.every_s}, self.path, durable=False)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self._beat()
            except OSError as exc:  # a full or unmounted disk: capture itself says so at its next commit
                log.warning("capture.heartbeat_failed", path=str(self.path), error=str(exc))

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.path.unlink(missing_ok=True)
