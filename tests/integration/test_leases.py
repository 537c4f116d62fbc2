"""High availability with a real ZooKeeper: capture processes of one source compete for its
lease under a steady write load. After the leader is killed, frozen past its session timeout,
or ZooKeeper itself restarts, a standby takes over within the session timeout plus a little,
the old leader commits nothing more, and the landing zone holds every change exactly once
(checked against an independent read of the binlog)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from capture.config import CoordinationConfig
from capture.coordination.zookeeper import ZooKeeperLease, leader_status
from tests.conftest import CaptureProcess
from tests.integration.binlog_check import Workload, assert_landed_exactly_once, binlog_end, create_tables
from tests.servers import free_port, wait_for

pytestmark = pytest.mark.integration

SESSION_S = 2.0
TAKEOVER_LIMIT_S = SESSION_S + 2.0  # session timeout, then claim + connect + preflight on a loaded machine
TAKEOVERS_FILE = os.environ.get("LOGTIDE_TAKEOVERS")  # append measured takeover times (JSON lines) here


class CheckpointWatch(threading.Thread):
    """Reads checkpoint.json every 10 ms: epochs and frontiers must never go backwards."""

    def __init__(self, zone) -> None:
        super().__init__(daemon=True)
        self.zone = zone
        self.seen: list[tuple[float, int | None, int]] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(0.01):
            checkpoint = self.zone.checkpoint()
            if checkpoint is None:
                continue
            entry = (checkpoint.epoch, checkpoint.frontier.encode())
            if not self.seen or self.seen[-1][1:] != entry:
                self.seen.append((time.monotonic(), *entry))

    def epoch(self) -> int:
        return self.seen[-1][1] if self.seen else 0

    def wait_epoch_above(self, epoch: int, since: float, timeout: float = 30) -> float:
        """Seconds from `since` until a checkpoint of a newer epoch was seen."""
        wait_for(lambda: self.epoch() > epoch, timeout, interval=0.01, what=f"a checkpoint of an epoch above {epoch}")
        return next(t for t, e, _ in self.seen if e > epoch) - since

    def check(self) -> None:
        self.stop_event.set()
        self.join()
        epochs = [e for _, e, _ in self.seen]
        frontiers = [f for _, _, f in self.seen]
        assert epochs == sorted(epochs), f"a checkpoint of an older epoch was written after a newer one: {epochs}"
        assert frontiers == sorted(frontiers), "the committed frontier went backwards"


class Cluster:
    """N `logtide capture` processes for one source, one landing zone, one ZooKeeper."""

    def __init__(self, mariadb, zookeeper, database: str, tmp_path: Path, root: str, size: int = 3) -> None:
        self.coordination = {
            "kind": "zookeeper",
            "hosts": zookeeper.hosts,
            "session_timeout_s": SESSION_S,
            "root": root,
        }
        self.processes: list[CaptureProcess] = []
        for i in range(size):
            config = {
                "landing": {"path": str(tmp_path / "landing"), "flush_interval_s": 0.05, "max_buffer_rows": 300},
                "coordination": self.coordination,
                "sources": {
                    "src": {
                        "kind": "mariadb",
                        "port": mariadb.port,
                        "user": "root",
                        "password": "${TEST_DB_PASSWORD:-}",
                        "server_id": 4242,  # one config for all instances, as in a deployment
                        "include": [f"{database}.*"],
                        "heartbeat_s": 0.2,
                        "metrics": {"port": free_port()},
                    }
                },
            }
            path = tmp_path / f"logtide-{i}.yaml"
            path.write_text(yaml.safe_dump(config))
            workdir = tmp_path / f"instance-{i}"
            workdir.mkdir()
            self.processes.append(CaptureProcess(path, "src", workdir))
        self.zone = self.processes[0].zone
        self.watch = CheckpointWatch(self.zone)

    def start(self) -> None:
        first, *others = self.processes
        first.start().wait_running()
        for process in others:
            process.start()
            wait_for(lambda p=process: "capture.standby" in p.log(), 30, what="a standby")
        self.watch.start()

    def start_under_load(self, mariadb, database: str, seed: int) -> tuple[str, Workload]:
        """Start the instances, then a writer; the GTID the checkpoint resumes from (where `finish`
        checks exactly once from) and the writer."""
        self.start()
        start_gtid = self.zone.checkpoint().resume["gtid"]
        writer = Workload(mariadb, database, seed=seed, max_pause_s=0.01)
        writer.start()
        return start_gtid, writer

    def before_fault(self) -> tuple[CaptureProcess, int, float]:
        """After 1.5 s more of writes: the leader, its epoch, and the time a takeover is measured from."""
        time.sleep(1.5)
        return self.leader(), self.watch.epoch(), time.monotonic()

    def leader(self) -> CaptureProcess:
        def find() -> CaptureProcess | None:
            holder = leader_status(CoordinationConfig(**self.coordination), "src")["leader"]
            pid = int(str(holder).rpartition(":")[2]) if holder else None
            return next((p for p in self.processes if p.process and p.process.pid == pid), None)

        return wait_for(find, 30, interval=0.1, what="a leader")

    def metric(self, process: CaptureProcess, name: str) -> float | None:
        import urllib.request

        port = process.config.source("src").metrics.port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            for line in response.read().decode().splitlines():
                if line.startswith(name + "{"):
                    return float(line.rpartition(" ")[2])
        return None

    def health(self, process: CaptureProcess) -> tuple[int, str]:
        import urllib.error
        import urllib.request

        port = process.config.source("src").metrics.port
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
                return response.status, json.loads(response.read())["state"]
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())["state"]

    def finish(self, writer: Workload, mariadb, database: str, start_gtid: str) -> tuple[int, int]:
        transactions = writer.finish()
        end = binlog_end(mariadb)
        wait_for(lambda: self.zone.checkpoint().frontier >= end, 60, interval=0.1, what="the new leader to catch up")
        self.watch.check()
        changes = assert_landed_exactly_once(mariadb, database, self.zone, start_gtid, end)
        leader = self.leader()
        for process in [p for p in self.processes if p is not leader] + [leader]:  # no takeover on the way out
            if process.process is not None and process.process.poll() is None:
                assert process.stop() == 0, process.log()
        return transactions, changes

    def kill_all(self) -> None:
        for process in self.processes:
            if process.process is not None and process.process.poll() is None:
                process.process.send_signal(signal.SIGCONT)
            process.kill()


def record(scenario: str, seconds: float) -> None:
    if TAKEOVERS_FILE:
        with open(TAKEOVERS_FILE, "a") as out:
            entry = {"scenario": scenario, "takeover_s": round(seconds, 3), "session_s": SESSION_S}
            out.write(json.dumps(entry) + "\n")
    print(f"takeover after {scenario}: {seconds:.3f} s (session timeout {SESSION_S} s)")


@pytest.fixture
def cluster(mariadb, zookeeper, database, tmp_path, request):
    create_tables(mariadb, database)
    group = Cluster(mariadb, zookeeper, database, tmp_path, root=f"/logtide-{request.node.name}")
    yield group
    group.kill_all()


def test_kill9_of_the_leader_twice(mariadb, database, cluster):
    start_gtid, writer = cluster.start_under_load(mariadb, database, seed=21)
    killed = []
    for _ in range(2):
        leader, epoch, since = cluster.before_fault()
        leader.kill()
        killed.append(leader)
        takeover = cluster.watch.wait_epoch_above(epoch, since)
        record("kill -9 of the leader", takeover)
        assert takeover <= TAKEOVER_LIMIT_S
        assert cluster.leader() not in killed
    time.sleep(1.5)
    survivor = cluster.leader()
    assert cluster.metric(survivor, "logtide_capture_leader") == 1.0
    assert cluster.metric(survivor, "logtide_capture_epoch") == cluster.watch.epoch()
    status = subprocess.run(
        [sys.executable, "-m", "capture.cli", "--config", str(survivor.config_path), "status", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    [entry] = json.loads(status.stdout)
    assert entry["lease"]["leader"].endswith(f":{survivor.process.pid}") and entry["lease"]["standbys"] == []
    assert entry["lease"]["epoch"] == entry["epoch"] == cluster.watch.epoch() == 3
    transactions, changes = cluster.finish(writer, mariadb, database, start_gtid)
    assert transactions > 100 and changes > 500


def test_leader_frozen_past_its_session_commits_nothing_after_waking(mariadb, database, cluster):
    start_gtid, writer = cluster.start_under_load(mariadb, database, seed=22)
    frozen, epoch, since = cluster.before_fault()
    frozen.process.send_signal(signal.SIGSTOP)
    try:
        takeover = cluster.watch.wait_epoch_above(epoch, since)
        record("SIGSTOP of the leader", takeover)
        assert takeover <= TAKEOVER_LIMIT_S
        time.sleep(1.0)  # the new leader commits while the old one is frozen mid-stream
    finally:
        frozen.process.send_signal(signal.SIGCONT)
    woke = time.monotonic()
    wait_for(lambda: "capture.lease_lost" in frozen.log(), 10, what="the woken leader to notice")
    # it becomes a standby again (or exits): never a second leader
    wait_for(
        lambda: (
            frozen.process.poll() is not None
            or frozen.log().rfind("capture.standby") > frozen.log().rfind("capture.lease_lost")
        ),
        15,
        what="the old leader to stand by",
    )
    time.sleep(1.0)
    assert cluster.leader() is not frozen
    if frozen.process.poll() is None:
        assert cluster.metric(frozen, "logtide_capture_leader") == 0.0
        assert cluster.health(frozen) == (200, "standby")
    # nothing the old epoch wrote after waking: every checkpoint since carries a newer epoch
    assert all(e > epoch for t, e, _ in cluster.watch.seen if t >= woke)
    cluster.finish(writer, mariadb, database, start_gtid)


def test_zookeeper_restart(mariadb, database, zookeeper, cluster):
    start_gtid, writer = cluster.start_under_load(mariadb, database, seed=23)
    old, epoch, since = cluster.before_fault()
    zookeeper.stop()
    time.sleep(0.5)
    zookeeper.start()
    back = time.monotonic()
    takeover = cluster.watch.wait_epoch_above(epoch, since)
    record("ZooKeeper restart (from the stop)", takeover)
    record("ZooKeeper restart (from the server being back)", takeover - (back - since))
    assert takeover - (back - since) <= TAKEOVER_LIMIT_S
    wait_for(lambda: "capture.lease_lost" in old.log(), 10, what="the old leader to give up")
    time.sleep(1.5)
    cluster.leader()
    cluster.finish(writer, mariadb, database, start_gtid)


def test_zookeeper_lease_in_process(zookeeper):
    """One holder at a time; epochs only grow and respect the landing zone's floor; a waiting
    acquire returns when stopped."""
    config = CoordinationConfig(
        kind="zookeeper", hosts=zookeeper.hosts, session_timeout_s=SESSION_S, root="/lease-unit"
    )
    first = ZooKeeperLease(config, "s")
    never = threading.Event()
    assert first.acquire(never) and first.is_held() and first.epoch == 1

    second = ZooKeeperLease(config, "s", floor=lambda: 41)
    got = threading.Event()
    waiter = threading.Thread(target=lambda: second.acquire(never) and got.set(), daemon=True)
    waiter.start()
    time.sleep(0.5)
    assert not got.is_set(), "a second holder while the first holds the lease"
    assert leader_status(config, "s")["leader"] == first.identity
    first.release()
    assert not first.is_held()
    assert got.wait(5) and second.is_held() and second.epoch == 42

    third = ZooKeeperLease(config, "s")
    stop = threading.Event()
    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(third.acquire(stop)), daemon=True)
    waiter.start()
    time.sleep(0.3)
    stop.set()
    waiter.join(3)
    assert result == [False]
    assert leader_status(config, "s") == {"leader": second.identity, "standbys": [], "epoch": 42}
    second.release()


def test_an_unreachable_zookeeper_keeps_an_instance_waiting_until_stopped():
    config = CoordinationConfig(kind="zookeeper", hosts=f"127.0.0.1:{free_port()}", session_timeout_s=SESSION_S)
    lease = ZooKeeperLease(config, "s")
    stop = threading.Event()
    threading.Timer(1.5, stop.set).start()
    started = time.monotonic()
    assert lease.acquire(stop) is False
    assert time.monotonic() - started < 1.5 + 0.5 and not lease.is_held()
    assert leader_status(config, "s", timeout=0.5)["error"].endswith("unreachable")


def test_a_session_expired_behind_the_leaders_back_ends_the_lease(zookeeper):
    """ZooKeeper ends the leader's session (here: another client closes it with the session's
    credentials, as ZooKeeper does on expiry): the lease reports it lost and the next leader
    gets a higher epoch at once."""
    from kazoo.client import KazooClient

    config = CoordinationConfig(kind="zookeeper", hosts=zookeeper.hosts, session_timeout_s=SESSION_S, root="/expiry")
    never = threading.Event()
    lease = ZooKeeperLease(config, "s")
    assert lease.acquire(never)
    thief = KazooClient(hosts=zookeeper.hosts, client_id=lease._client.client_id)
    thief.start(timeout=5)
    thief.stop()  # closes the leader's session on the server
    thief.close()
    wait_for(lambda: not lease.is_held(), SESSION_S + 1, what="the lease to notice")
    assert lease.lost.is_set()
    successor = ZooKeeperLease(config, "s")
    assert successor.acquire(never) and successor.epoch == lease.epoch + 1
    lease.release()
    successor.release()
