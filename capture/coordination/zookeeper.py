"""The ZooKeeper lease (kazoo): one leader per source, standbys queued behind it.

Layout under `coordination.root` (default /logtide)::

    <root>/<source>/leader/<uuid>__lock__<seq>   ephemeral sequential, data = "host:pid" (kazoo Lock)
    <root>/<source>/epoch                        the last epoch handed out, as decimal text

The lowest sequence number leads. When its session ends (process killed, host gone, pause past
the session timeout) ZooKeeper deletes its node and the next standby's watch fires: takeover
takes about the session timeout. The new leader bumps the epoch in one transaction that also
checks its own lock node still exists, so an epoch is only ever issued to a live leader.

The leader stops on SUSPENDED as well as LOST (a suspended session may already have expired
on the server): the connection listener sets `lost`, the capture loop stops before its next
commit, and the instance queues again as a standby with a new session. Between listener
events, `is_held()` re-confirms the session with a round trip once a third of the session
timeout has passed since the last confirmation, so a process that was frozen (SIGSTOP) and
wakes up cannot commit before it has learnt its fate.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import CancelledError, KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.lock import Lock

from capture.config import CoordinationConfig
from capture.errors import LeaseLostError
from capture.log import get_logger

log = get_logger(__name__)

RETRY_S = 1.0


class ZooKeeperLease:
    kind = "zookeeper"
    waits = True

    def __init__(self, config: CoordinationConfig, source: str, floor: Callable[[], int] = lambda: 0) -> None:
        assert config.hosts, "validated by CoordinationConfig"
        self.hosts = config.hosts
        self.session_timeout = config.session_timeout_s
        self.source = source
        self.base = f"{config.root}/{source}"
        self.lock_path = f"{self.base}/leader"
        self.epoch_path = f"{self.base}/epoch"
        self.identity = f"{socket.gethostname()}:{os.getpid()}"
        self.lost = threading.Event()
        self._floor = floor  # lowest acceptable epoch minus one: the landing zone's highest epoch
        self._client: KazooClient | None = None
        self._lock: Lock | None = None
        self._epoch: int | None = None
        self._held = False
        self._confirmed_at = 0.0
        self._confirm_every = self.session_timeout / 3

    # -- Lease --------------------------------------------------------------------------------

    def acquire(self, stop: threading.Event) -> bool:
        while not stop.is_set():
            try:
                if self._try_acquire(stop):
                    return True
            except CancelledError:
                pass
            except (KazooException, KazooTimeoutError, LeaseLostError) as exc:
                log.warning(
                    "lease.retry",
                    source=self.source,
                    hosts=self.hosts,
                    error=f"{type(exc).__name__}: {exc}",
                    retry_in_s=RETRY_S,
                )
                self._close()
                stop.wait(RETRY_S)
            else:
                self._close()
        self._close()
        return False

    def is_held(self) -> bool:
        if not self._held or self.lost.is_set():
            return False
        started = time.monotonic()
        if started - self._confirmed_at < self._confirm_every:
            return True
        # our session may have expired while we could not hear about it (a paused process):
        # a round trip answers for the session as it is now
        assert self._client is not None and self._lock is not None
        try:
            stat = self._client.exists_async(self._node_path()).get(timeout=self._confirm_every)
        except Exception as exc:  # timeout, connection loss, session expired: all mean not held
            self._mark_lost(f"session not confirmed: {type(exc).__name__}")
            return False
        if stat is None or stat.ephemeralOwner != self._client.client_id[0]:
            self._mark_lost("lock node is gone")
            return False
        if self._held and not self.lost.is_set():
            self._confirmed_at = started
            return True
        return False

    @property
    def epoch(self) -> int | None:
        return self._epoch

    def release(self) -> None:
        self._held = False
        self._close()

    # -- internals ----------------------------------------------------------------------------

    def _node_path(self) -> str:
        assert self._lock is not None and self._lock.node is not None
        return f"{self.lock_path}/{self._lock.node}"

    def _connect(self, stop: threading.Event) -> KazooClient | None:
        """A connected client, retrying while ZooKeeper is unreachable; None once `stop` is set."""
        while not stop.is_set():
            client = KazooClient(
                hosts=self.hosts,
                timeout=self.session_timeout,
                connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 1.5, "max_delay": 1.0},
                command_retry={"max_tries": 3, "delay": 0.1, "backoff": 2, "max_delay": 1.0},
            )
            connected = client.start_async()
            deadline = time.monotonic() + max(self.session_timeout, 2.0)
            while not connected.wait(0.1) and not stop.is_set() and time.monotonic() < deadline:
                pass
            if client.connected:
                return client
            client.stop()
            client.close()
            if not stop.is_set():
                log.warning("lease.zookeeper_unreachable", source=self.source, hosts=self.hosts, retry_in_s=RETRY_S)
                stop.wait(RETRY_S)
        return None

    def _try_acquire(self, stop: threading.Event) -> bool:
        self.lost.clear()
        client = self._connect(stop)
        if client is None:
            return False
        self._client = client
        self._lock = lock = client.Lock(self.lock_path, self.identity)
        done = threading.Event()

        def cancel_on_stop() -> None:
            while not done.wait(0.1):
                if stop.is_set():
                    lock.cancel()
                    return

        threading.Thread(target=cancel_on_stop, name="lease-cancel", daemon=True).start()
        try:
            holder = self._holder(lock)
            log.info("capture.standby", source=self.source, identity=self.identity, leader=holder or "none")
            if not lock.acquire():
                return False
        finally:
            done.set()
        client.add_listener(self._on_state)
        confirmed = time.monotonic()
        if client.state != KazooState.CONNECTED:
            raise LeaseLostError(f"connection {client.state} right after acquiring the lock")
        self._epoch = self._bump_epoch(client, lock)
        self._confirmed_at = confirmed
        self._held = True
        return True

    def _holder(self, lock: Lock) -> str | None:
        try:
            contenders = lock.contenders()
        except KazooException:
            return None
        return contenders[0] if contenders else None

    def _bump_epoch(self, client: KazooClient, lock: Lock) -> int:
        """The next epoch, issued only while our lock node exists (one transaction)."""
        try:
            data, stat = client.get(self.epoch_path)
        except NoNodeError:
            with contextlib.suppress(NodeExistsError):
                client.create(self.epoch_path, b"0", makepath=True)
            data, stat = client.get(self.epoch_path)
        current = int(data.decode() or 0)
        epoch = max(current, self._floor()) + 1
        transaction = client.transaction()
        transaction.check(f"{self.lock_path}/{lock.node}", 0)
        transaction.set_data(self.epoch_path, str(epoch).encode(), stat.version)
        results = transaction.commit()
        failures = [r for r in results if isinstance(r, Exception)]
        if failures:
            raise LeaseLostError(f"could not record epoch {epoch}: {failures[0]!r}")
        return epoch

    def _on_state(self, state: str) -> bool:
        """kazoo's connection listener (its own thread: no blocking calls here)."""
        if state != KazooState.CONNECTED:
            self._mark_lost(f"zookeeper session {state}")
            return True  # remove this listener: the lease is over whatever happens next
        return False

    def _mark_lost(self, reason: str) -> None:
        if self._held and not self.lost.is_set():
            self._held = False
            self.lost.set()
            log.warning("capture.lease_lost", source=self.source, epoch=self._epoch, reason=reason)
        else:
            self._held = False
            self.lost.set()

    def _close(self) -> None:
        client, self._client = self._client, None
        lock, self._lock = self._lock, None
        if client is None:
            return
        if lock is not None and lock.node is not None:
            # a suspended session may come back (ZooKeeper restarted, a short network cut): then
            # delete our node so the next standby need not wait for the old session to expire
            deadline = time.monotonic() + self.session_timeout
            while client.state == KazooState.SUSPENDED and time.monotonic() < deadline:
                time.sleep(0.05)
            if client.state == KazooState.CONNECTED:
                with contextlib.suppress(KazooException):
                    client.delete(f"{self.lock_path}/{lock.node}")
        try:
            client.stop()
            client.close()
        except Exception as exc:  # closing is best effort: the session ends on the server anyway
            log.debug("lease.close_failed", error=str(exc))


def leader_status(config: CoordinationConfig, source: str, timeout: float = 3.0) -> dict[str, object]:
    """The current leader ("host:pid") and last epoch of a source, read from ZooKeeper."""
    client = KazooClient(hosts=config.hosts, timeout=max(config.session_timeout_s, 1.0))
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError:
        client.close()
        return {"leader": None, "standbys": [], "epoch": None, "error": f"zookeeper {config.hosts} unreachable"}
    try:
        base = f"{config.root}/{source}"
        try:
            contenders = Lock(client, f"{base}/leader").contenders()
        except NoNodeError:
            contenders = []
        try:
            epoch = int(client.get(f"{base}/epoch")[0].decode() or 0)
        except NoNodeError:
            epoch = None
        return {"leader": contenders[0] if contenders else None, "standbys": contenders[1:], "epoch": epoch}
    finally:
        client.stop()
        client.close()
