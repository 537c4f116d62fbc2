"""Leases and fencing without servers: the coordination config, epochs in checkpoints, the
local lease, and that a fenced-off writer can neither write, commit nor delete."""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from capture.config import parse_config
from capture.coordination import local, open_lease
from capture.coordination.fencing import CommitGuard, claim, landed_epoch
from capture.coordination.local import LocalLease
from capture.errors import ConfigError, FencedError, LeaseLostError, LockHeldError
from capture.events import Change, ChangeBatch, Column, Lsn, Op, TableSchema, TransactionEnd
from capture.landing import Checkpoint, LandingZone
from capture.landing.alive import ALIVE_STALE_S, AliveBeat, alive_path
from capture.landing.checkpoint import read_checkpoint
from capture.landing.files import segment_name, write_parquet_atomic
from capture.landing.log_writer import LogWriter
from capture.status import capture_running

pytestmark = pytest.mark.unit

SOURCE = {"s": {"kind": "mariadb", "user": "u", "server_id": 1}}
T = TableSchema("shop", "orders", (Column("id", pa.int64(), "bigint"),), ("id",))
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _config(coordination: dict | None = None):
    data = {"sources": SOURCE}
    if coordination is not None:
        data["coordination"] = coordination
    return parse_config(data)


def test_coordination_defaults_to_local_and_validates_zookeeper():
    config = _config()
    assert config.coordination.kind == "local" and config.coordination.hosts is None
    zk = _config({"kind": "zookeeper", "hosts": "zk1:2181, zk2:2182", "session_timeout_s": 2, "root": "/lt"})
    assert zk.coordination.hosts == "zk1:2181,zk2:2182" and zk.coordination.session_timeout_s == 2
    for bad, message in [
        ({"kind": "zookeeper"}, "coordination: Value error, kind 'zookeeper' needs hosts"),
        ({"kind": "zookeeper", "hosts": "zk1"}, "coordination.hosts: Value error, 'zk1' is not host:port"),
        ({"kind": "zookeeper", "hosts": "zk1:99999"}, "'zk1:99999' is not host:port"),
        ({"kind": "zookeeper", "hosts": "zk1:2181", "root": "logtide/"}, "coordination.root: Value error"),
        ({"kind": "zookeeper", "hosts": "zk1:2181", "session_timeout_s": 0}, "coordination.session_timeout_s"),
        ({"kind": "etcd"}, "coordination.kind: Input should be 'local' or 'zookeeper'"),
        ({"kind": "local", "ttl": 3}, "coordination.ttl: Extra inputs are not permitted"),
    ]:
        with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
            _config(bad)


def test_checkpoint_epoch_is_optional_and_round_trips(tmp_path):
    old = {"version": 1, "frontier": Lsn(7).encode(), "resume": {"pos": 7}, "updated_at": NOW.isoformat()}
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert read_checkpoint(tmp_path / "old.json").epoch is None
    zone = LandingZone(tmp_path, "src")
    zone.write_checkpoint(Checkpoint(Lsn(9), {"pos": 9}, epoch=4))
    assert zone.checkpoint().epoch == 4 and json.loads(zone.checkpoint_path.read_text())["epoch"] == 4
    assert "epoch" not in Checkpoint(Lsn(9), {}).to_json()


def test_local_lease_refuses_a_second_instance_and_counts_epochs(tmp_path):
    zone = LandingZone(tmp_path, "src")
    lease = open_lease(_config(), "s", zone)
    assert isinstance(lease, LocalLease) and not lease.waits
    never = threading.Event()
    assert lease.acquire(never) and lease.is_held() and lease.epoch == 1
    with pytest.raises(LockHeldError, match=r"another capture instance .* is running for source 'src'"):
        LocalLease(LandingZone(tmp_path, "src")).acquire(never)
    claim(zone, 1)
    zone.write_checkpoint(Checkpoint(Lsn(1), {}, epoch=1))
    lease.release()
    assert not lease.is_held()
    assert lease.acquire(never) and lease.epoch == 2  # under the lock: the landing zone's highest epoch + 1
    lease.release()
    stop = threading.Event()
    stop.set()
    assert not lease.acquire(stop)


def test_the_heartbeat_says_capture_runs_where_its_lock_is_not_visible(tmp_path):
    """Another container's /proc/locks does not list capture's lock (an empty table here): the
    heartbeat alone decides, fresh = running, a killed capture's stale one or none = stopped."""
    config, zone = _config(), LandingZone(tmp_path, "src")
    elsewhere = tmp_path / "locks"
    elsewhere.write_text("")
    lease = open_lease(config, "s", zone)
    assert lease.acquire(threading.Event())
    assert capture_running(config, "s", zone) == (True, f"a process holds {zone.root / 'capture.lock'}")
    running, reason = capture_running(config, "s", zone, elsewhere)
    assert running is True and reason.startswith(f"capture (pid {os.getpid()} on "), reason
    lease.release()  # a clean stop removes the heartbeat
    assert not alive_path(zone.root).exists()
    assert capture_running(config, "s", zone, elsewhere)[1].endswith("here and no heartbeat")
    for age, expected in ((ALIVE_STALE_S - 2, True), (ALIVE_STALE_S + 1, False)):  # a killed capture's
        at = datetime.now(UTC).timestamp() - age
        beat = {"at": datetime.fromtimestamp(at, UTC).isoformat(), "pid": 7, "host": "capture-1", "every_s": 0.2}
        alive_path(zone.root).write_text(json.dumps(beat))
        local._seen.clear()  # read by a new process (a merge task's)
        running, reason = capture_running(config, "s", zone, elsewhere)
        assert running is expected, reason
    assert reason.endswith(
        f"its last heartbeat is {ALIVE_STALE_S + 1:.1f} s old by this host's clock and unchanged for 0.4 s"
        f" (stale after {ALIVE_STALE_S:g} s)"
    )


def _kill(beat: AliveBeat) -> None:
    """What a SIGKILL leaves: the heartbeat thread gone, its last file in place."""
    beat._stop.set()
    beat._thread.join()


@pytest.mark.parametrize("hours", [-3, 3])
def test_the_heartbeat_is_judged_on_the_readers_clock_whatever_the_writers_says(tmp_path, hours):
    """Capture and Airflow on two hosts (docker-compose.yml) whose clocks are `hours` apart. On main the
    writer's `at` was compared with the reader's clock: a capture 3 h behind looked stopped while it ran
    (`landed_` failed at once), one 3 h ahead looked running for 3 h after it was killed. Now a new reader
    (each Airflow task, `logtide status`) and one that keeps looking (the wait in `landed_`) both tell
    running from stopped, the latter within ALIVE_STALE_S of the last beat."""
    config, zone = _config(), LandingZone(tmp_path, "src")
    elsewhere = tmp_path / "locks"
    elsewhere.write_text("")  # another container: the lock is not visible
    zone.root.mkdir(parents=True)
    beat = AliveBeat(zone.root, every_s=0.2, clock=lambda: datetime.now(UTC) + timedelta(hours=hours))
    beat.start()
    try:
        for _ in range(3):
            local._seen.clear()  # a new reader
            running, reason = capture_running(config, "s", zone, elsewhere)
            assert running is True, reason
            assert reason.startswith(f"capture (pid {os.getpid()} on "), reason
        for _ in range(5):  # the same reader, looking again
            time.sleep(0.3)
            assert capture_running(config, "s", zone, elsewhere)[0] is True
    finally:
        _kill(beat)
    killed = time.monotonic()
    assert alive_path(zone.root).exists()
    fresh = LandingZone(tmp_path, "src")
    saved = dict(local._seen)
    local._seen.clear()
    running, reason = capture_running(config, "s", fresh, elsewhere)  # a new reader after the kill
    assert running is False and "unchanged for 0.4 s" in reason, reason
    local._seen.clear()
    local._seen.update(saved)  # the reader that kept looking
    while (running := capture_running(config, "s", zone, elsewhere)[0]) is not False:
        assert time.monotonic() - killed < ALIVE_STALE_S + 1, "still running after ALIVE_STALE_S"
        time.sleep(0.2)


def _commit_one(writer: LogWriter, major: int) -> None:
    writer.add(ChangeBatch(T, f"0-1-{major}", NOW, False, [Change(Lsn(major), Op.CREATE, None, (major,))]))
    writer.end_transaction(TransactionEnd(Lsn(major + 1), {"pos": major + 1}, NOW))
    writer.commit()


def test_a_fenced_writer_cannot_write_commit_or_delete(tmp_path):
    old = LandingZone(tmp_path, "src")
    claim(old, 1)
    start = Checkpoint(Lsn(1), {"pos": 1}, epoch=1)
    old.write_checkpoint(start)
    writer = LogWriter(old, start, 60, 1000, epoch=1)
    _commit_one(writer, 10)
    assert old.checkpoint().epoch == 1 and old.checkpoint().frontier == Lsn(11)
    assert not list(old.staging.iterdir()), "temp files are renamed out of the staging folder"
    spilled = old.folder("shop.orders") / segment_name(Lsn(50).encode(), Lsn(50).encode())
    spilled.write_bytes(b"past the frontier")

    new = LandingZone(tmp_path, "src")
    assert landed_epoch(new) == 1
    claim(new, 2)  # the new leader fences epoch 1 off
    assert not old.staging.exists() and landed_epoch(new) == 2

    with pytest.raises(FencedError, match="removed by a newer capture leader"):
        _commit_one(writer, 20)
    with pytest.raises(FencedError):
        old.write_checkpoint(Checkpoint(Lsn(99), {}, epoch=1))
    with pytest.raises(FencedError):
        write_parquet_atomic(pa.table({"x": [1]}), tmp_path / "x.parquet", old.staging)
    with pytest.raises(FencedError):
        old.discard_uncommitted(Lsn(11))
    assert spilled.exists(), "a fenced writer deletes nothing"
    assert old.checkpoint().frontier == Lsn(11) and old.checkpoint().epoch == 1
    assert [r["id"] for r in new.read_table("shop", "orders")["after"].to_pylist()] == [10]
    with pytest.raises(FencedError, match="epoch 2 has already claimed"):
        claim(LandingZone(tmp_path, "src"), 1)
    new.discard_uncommitted(Lsn(11))  # the new leader may
    assert not spilled.exists()


def test_commit_guard_refuses_after_the_lease_is_lost_or_a_newer_epoch_committed(tmp_path):
    zone = LandingZone(tmp_path, "src")
    lease = LocalLease(zone)
    lease.acquire(threading.Event())
    claim(zone, lease.epoch)
    start = Checkpoint(Lsn(1), {"pos": 1}, epoch=lease.epoch)
    zone.write_checkpoint(start)
    guard = CommitGuard(lease, zone, lease.epoch)
    writer = LogWriter(zone, start, 60, 1000, epoch=lease.epoch, guard=guard)
    _commit_one(writer, 10)

    LandingZone(tmp_path, "src").write_checkpoint(Checkpoint(Lsn(11), {"pos": 11}, epoch=lease.epoch + 1))
    with pytest.raises(FencedError, match="written by epoch 2, newer than this instance's 1"):
        _commit_one(writer, 20)
    assert zone.read_table("shop", "orders").num_rows == 1, "nothing written before the refusal"

    zone.write_checkpoint(Checkpoint(Lsn(11), {"pos": 11}, epoch=lease.epoch))
    lease.release()
    with pytest.raises(LeaseLostError, match="no longer held"):
        guard()
