"""Dump claims: at most one dump of a table at a time, whoever starts it (CLI, Airflow, backfill).

The dump engine takes a claim on every table of a request before it writes anything (all or
nothing), checks it before each chunk, and releases each table's claim when the table is done.
A second dump of a held table is refused at once with `DumpClaimedError` naming the holder
(dump id, host, pid, since). Two dumps of one table would both be correct (watermarks are per
dump), but they double the load on the source and race on the target for no gain.

Where a claim lives:

- always: `<landing>/<source>/dumps/.claims/<db.table>.lock`, an flock held by the dumping
  process, its content the holder record. Every dump writes its chunks into this landing zone,
  so every dump runner can see it; the kernel drops the lock when the process dies (kill -9),
  so a rerun takes it at once.
- with `coordination.kind: zookeeper`, also an ephemeral node
  `<root>/<source>/dumps/<db.table>` holding the same record. It goes when the holder's session
  ends (about the session timeout after a kill -9). A rerun of the *same* dump id (an Airflow
  retry) waits that long for it; any other dump is refused at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from capture.errors import CoordinationError, DumpClaimedError
from capture.landing.zone import table_folder
from capture.log import get_logger

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from capture.config import CoordinationConfig
    from capture.landing import LandingZone

log = get_logger(__name__)

LOCAL_RETRIES = 4  # a status probe holds a shared lock for microseconds: try again before refusing
LOCAL_RETRY_S = 0.05


@dataclass(frozen=True)
class Holder:
    """Who holds a table's claim."""

    dump_id: str
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    since: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    # how to cancel this dump, written by its runner ("by setting the Airflow Variable ..."); empty:
    # the CLI's `logtide dump-control ... cancel`
    cancel: str = ""

    def encode(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def decode(cls, data: bytes | str) -> Holder | None:
        try:
            fields = json.loads(data)
            return cls(
                str(fields["dump_id"]),
                str(fields["host"]),
                int(fields["pid"]),
                str(fields["since"]),
                str(fields.get("cancel") or ""),
            )
        except (ValueError, KeyError, TypeError):
            return None

    def describe(self) -> str:
        return f"dump {self.dump_id} (host {self.host}, pid {self.pid}, since {self.since})"


def _split(table: str) -> tuple[str, str]:
    schema, _, name = table.partition(".")
    return schema, name


def claimed_error(source: str, table: str, holder: Holder | None) -> DumpClaimedError:
    who = holder.describe() if holder else "another dump (its holder record is unreadable)"
    if holder and holder.cancel:
        cancel = holder.cancel
    elif holder:
        cancel = f"with `logtide dump-control --source {source} --dump-id {holder.dump_id} cancel`"
    else:
        cancel = "with `logtide dump-control`"
    return DumpClaimedError(
        f"table {table} is being dumped by {who}; wait for it or cancel it {cancel}. Nothing was written",
        holder.dump_id if holder else None,
    )


class LocalClaims:
    """flock files in the landing zone, one per table."""

    def __init__(self, zone: LandingZone) -> None:
        self.zone = zone
        self.folder = zone.root / "dumps" / ".claims"
        self._held: dict[str, IO[str]] = {}

    def path(self, table: str) -> Path:
        return self.folder / f"{table_folder(*_split(table))}.lock"

    def take(self, table: str, holder: Holder) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        handle = open(self.path(table), "a+")  # noqa: SIM115 - held until release()
        for attempt in range(LOCAL_RETRIES):
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == LOCAL_RETRIES - 1:
                    current = _read_holder(handle)
                    handle.close()
                    raise claimed_error(self.zone.source, table, current) from None
                time.sleep(LOCAL_RETRY_S)
        handle.seek(0)
        handle.truncate()
        handle.write(holder.encode().decode())
        handle.flush()
        self._held[table] = handle

    def release(self, table: str) -> None:
        handle = self._held.pop(table, None)
        if handle is not None:
            handle.close()  # closing the file drops the lock; the stale record stays for `logtide status`

    def probe(self, table: str) -> Holder | None:
        """The holder while some process holds the claim, else None (takes a shared lock for a
        moment). Every running dump holds its lock files, with ZooKeeper too, so this answers
        whether a dump's process is alive (a dead one's ZooKeeper node may outlive it a while)."""
        try:
            handle = open(self.path(table))  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return None
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return _read_holder(handle) or Holder("unknown", "unknown", 0, "unknown")
            return None


def _read_holder(handle: IO[str]) -> Holder | None:
    for _ in range(3):  # the holder writes its record right after locking: give it a moment
        handle.seek(0)
        holder = Holder.decode(handle.read())
        if holder is not None:
            return holder
        time.sleep(LOCAL_RETRY_S)
    return None


class ZooKeeperClaims:
    """Ephemeral nodes under `<root>/<source>/dumps/`, one per table."""

    def __init__(self, config: CoordinationConfig, source: str) -> None:
        assert config.hosts, "validated by CoordinationConfig"
        self.config = config
        self.source = source
        self.base = f"{config.root}/{source}/dumps"
        self._client: KazooClient | None = None
        self._held: set[str] = set()

    def path(self, table: str) -> str:
        return f"{self.base}/{table_folder(*_split(table))}"

    def _connect(self) -> KazooClient:
        if self._client is not None:
            return self._client
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import KazooTimeoutError

        client = KazooClient(hosts=self.config.hosts, timeout=self.config.session_timeout_s)
        try:
            client.start(timeout=max(self.config.session_timeout_s, 3.0))
        except KazooTimeoutError:
            client.close()
            raise CoordinationError(
                f"zookeeper {self.config.hosts} unreachable: a dump needs it to claim its tables "
                "(coordination.kind is zookeeper); nothing was written"
            ) from None
        self._client = client
        return client

    def take(self, table: str, holder: Holder) -> None:
        from kazoo.exceptions import NodeExistsError, NoNodeError

        client = self._connect()
        path = self.path(table)
        # a dead holder's node lives until its session expires: the same dump (a retry) waits that long
        deadline = time.monotonic() + 2 * self.config.session_timeout_s + 2.0
        while True:
            try:
                client.create(path, holder.encode(), ephemeral=True, makepath=True)
                self._held.add(table)
                return
            except NodeExistsError:
                pass
            try:
                current = Holder.decode(client.get(path)[0])
            except NoNodeError:
                continue  # released meanwhile: try again
            if current is None or current.dump_id != holder.dump_id or time.monotonic() > deadline:
                raise claimed_error(self.source, table, current)
            log.info(
                "dump.claim_waiting",
                table=table,
                holder=current.describe(),
                note="the same dump id: waiting for the previous attempt's ZooKeeper session to expire",
            )
            time.sleep(0.25)

    def check(self, table: str) -> None:
        """Still ours? One round trip: the node exists and belongs to this session."""
        client = self._client
        try:
            stat = client.exists(self.path(table)) if client is not None else None
        except Exception as exc:  # connection loss, expired session: the claim may be gone
            raise DumpClaimedError(
                f"the claim on table {table} could not be confirmed ({type(exc).__name__}); "
                "the dump stopped before its next chunk: rerun it with the same dump id to resume"
            ) from None
        if stat is None or client is None or stat.ephemeralOwner != client.client_id[0]:
            raise DumpClaimedError(
                f"the claim on table {table} was lost (ZooKeeper session ended); "
                "the dump stopped before its next chunk: rerun it with the same dump id to resume"
            )

    def release(self, table: str) -> None:
        if table in self._held and self._client is not None:
            self._held.discard(table)
            with contextlib.suppress(Exception):
                self._client.delete(self.path(table))

    def close(self) -> None:
        client, self._client = self._client, None
        self._held.clear()
        if client is not None:
            with contextlib.suppress(Exception):
                client.stop()
                client.close()


class DumpClaims:
    """The claims a dump takes: the landing zone's lock files, plus ZooKeeper nodes when configured."""

    def __init__(self, zone: LandingZone, coordination: CoordinationConfig | None = None) -> None:
        self.local = LocalClaims(zone)
        self.zookeeper = (
            ZooKeeperClaims(coordination, zone.source)
            if coordination is not None and coordination.kind == "zookeeper"
            else None
        )
        self._tables: list[str] = []

    def acquire(self, tables: list[str], dump_id: str, cancel: str = "") -> None:
        """Claim every table or none; DumpClaimedError names the holder of the first one held.
        `cancel`: how to cancel this dump, told to a dump this claim refuses (default: the CLI's)."""
        holder = Holder(dump_id, cancel=cancel)
        try:
            for table in tables:
                self.local.take(table, holder)
                self._tables.append(table)
                if self.zookeeper is not None:
                    self.zookeeper.take(table, holder)
        except BaseException:
            self.close()
            raise
        log.info("dump.claimed", dump_id=dump_id, tables=len(tables), zookeeper=self.zookeeper is not None)

    def check(self, table: str) -> None:
        if self.zookeeper is not None:
            self.zookeeper.check(table)

    def release(self, table: str) -> None:
        if table in self._tables:
            self._tables.remove(table)
            if self.zookeeper is not None:
                self.zookeeper.release(table)
            self.local.release(table)

    def close(self) -> None:
        for table in list(self._tables):
            self.release(table)
        if self.zookeeper is not None:
            self.zookeeper.close()

    def __enter__(self) -> DumpClaims:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
