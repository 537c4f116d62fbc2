"""Run the whole pipeline on local defaults, end to end: capture, a dump through a running Airflow
that ends with the Spark merge into Apache Iceberg, and a check of every target table against its source.

Everything lives under var/quickstart/ (wiped at start): a private MariaDB on a free port
(never the system one), the database `shop`, a capture user `logtide`, the configuration
logtide.yaml, the capture service's log, the landing zone, Airflow's home (api-server, scheduler
with the LocalExecutor and dag-processor, as users run it; the dump is triggered through the REST
API as the UI's trigger form does) and the Iceberg warehouse. Airflow's metadata database is a
private PostgreSQL on another free port (its data in a temporary folder, removed when it stops):
on SQLite, which Airflow's docs keep for development, many runs at once made the scheduler exit
with `database is locked` (tests/airflow/live.py).
The password of `logtide` comes from $LOGTIDE_QUICKSTART_PASSWORD or is generated; it reaches
capture and Airflow only as $LOGTIDE_SHOP_PASSWORD and is never written to a file or printed.
The Airflow UI's admin password is generated and printed (like `airflow standalone` does).

    scripts/quickstart.sh           # set up, run, check, stop; landing zone and tables stay
    scripts/quickstart.sh --keep    # leave MariaDB, capture and Airflow running to look at
    scripts/quickstart.sh --stop    # stop what --keep left running
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pymysql  # noqa: E402

from capture.config import load_config  # noqa: E402
from capture.landing import LandingZone  # noqa: E402
from tests.airflow.live import (  # noqa: E402
    METADATA_DATABASE,
    SUCCESS,
    USER,
    LiveAirflow,
    server_env,
    start_metadata_server,
)
from tests.servers import MariaDB, PostgreSQL, environment_without_secrets, free_port, wait_for  # noqa: E402

WORK = Path("var/quickstart")  # relative to ROOT: the config's landing path is relative too
CONFIG = WORK / "logtide.yaml"
LANDING = WORK / "landing"
CAPTURE_LOG = WORK / "capture.log"
AIRFLOW_HOME = WORK / "airflow"
AIRFLOW_LOG = WORK / "airflow.log"
WAREHOUSE = WORK / "warehouse"
RUNNING = WORK / "running.json"
SOURCE = "shop"
PASSWORD_ENV = "LOGTIDE_SHOP_PASSWORD"
START_TIMEOUT_S = 60.0
LAND_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0
DAG_TIMEOUT_S = 900.0
DAG_ID = "logtide_dump"
TABLE_KEYS = {"customers": "id", "orders": "id", "products": "sku"}

SCHEMA = [
    "CREATE DATABASE shop",
    """CREATE TABLE shop.customers (
         id INT AUTO_INCREMENT PRIMARY KEY,
         name VARCHAR(100),
         email VARCHAR(200),
         created_at TIMESTAMP(6) NULL DEFAULT CURRENT_TIMESTAMP(6)
       )""",
    """CREATE TABLE shop.orders (
         id BIGINT AUTO_INCREMENT PRIMARY KEY,
         customer_id INT,
         amount DECIMAL(12,2),
         status ENUM('new','paid','shipped'),
         note JSON
       )""",
]

# (statement, events it lands per table)
# history from before capture started: only a dump can bring it to the landing zone
HISTORY = [
    "CREATE TABLE shop.products (sku VARCHAR(20) PRIMARY KEY, title VARCHAR(100), price DECIMAL(10,2))",
    "INSERT INTO shop.products SELECT CONCAT('SKU-', LPAD(seq, 4, '0')), CONCAT('Product ', seq), seq * 1.25"
    " FROM seq_1_to_40",
]

WRITES: list[tuple[str, dict[str, int]]] = [
    (
        "INSERT INTO shop.customers (name, email) VALUES ('Ada Lovelace', 'ada@example.com'),"
        " ('Alan Turing', 'alan@example.com'), ('Grace Hopper', 'grace@example.com')",
        {"customers": 3},
    ),
    (
        "INSERT INTO shop.orders (customer_id, amount, status, note) VALUES"
        ' (1, 19.99, \'new\', \'{"gift": true, "items": ["notebook"]}\'),'
        " (1, 5.00, 'new', NULL),"
        " (2, 120.50, 'new', '{\"coupon\": \"WELCOME\"}'),"
        " (3, 42.00, 'paid', NULL)",
        {"orders": 4},
    ),
    ("UPDATE shop.orders SET status = 'paid' WHERE id = 1", {"orders": 1}),
    ("DELETE FROM shop.orders WHERE id = 2", {"orders": 1}),
    # a primary-key change lands as a delete of the old key and a create of the new one
    ("UPDATE shop.customers SET id = 100 WHERE id = 3", {"customers": 2}),
]


class QuickstartError(Exception):
    pass


def say(message: str = "") -> None:
    print(message, flush=True)


def heading(title: str) -> None:
    say(f"\n== {title} " + "=" * max(0, 76 - len(title)))


def capture_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "capture.cli", "--config", str(CONFIG), *args]


def cli_env(password: str) -> dict[str, str]:
    """The environment of logtide commands: no other secret, the source's password by name."""
    return {**environment_without_secrets(), PASSWORD_ENV: password}


def run_cli(password: str, *args: str) -> str:
    result = subprocess.run(
        capture_command(*args), cwd=ROOT, env=cli_env(password), capture_output=True, text=True, timeout=60
    )
    if result.returncode != 0:
        raise QuickstartError(f"`logtide {' '.join(args)}` exited {result.returncode}:\n{result.stderr}")
    return result.stdout


def write_config(metrics_port: int, mariadb_port: int) -> None:
    CONFIG.write_text(f"""\
# Written by scripts/quickstart.py for its private MariaDB; see config/logtide.example.yaml.
# The password is not here: capture reads it from ${PASSWORD_ENV}.
landing:
  path: {ROOT / LANDING}
  flush_interval_s: 0.5
log_level: INFO
merge:
  warehouse: {ROOT / WAREHOUSE}
  jars_dir: {ROOT / "var" / "jars"}
  spark_master: local[2]
  spark_conf:
    spark.sql.shuffle.partitions: "4"
sources:
  {SOURCE}:
    kind: mariadb
    host: 127.0.0.1
    port: {mariadb_port}
    user: logtide
    password: "${{{PASSWORD_ENV}}}"
    server_id: 4001
    include: ["shop.*"]
    heartbeat_s: 0.5
    metrics:
      host: 127.0.0.1
      port: {metrics_port}
""")


def set_up_database(server: MariaDB, password: str) -> None:
    server.execute(*SCHEMA)
    server.execute(*HISTORY, database="shop")
    with server.connect() as conn, conn.cursor() as cursor:
        cursor.execute("CREATE USER 'logtide'@'%%' IDENTIFIED BY %s", (password,))
        cursor.execute("GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'logtide'@'%'")
        cursor.execute("GRANT SELECT ON shop.* TO 'logtide'@'%'")
        cursor.execute("GRANT ALL ON logtide.* TO 'logtide'@'%'")


def start_capture(password: str) -> subprocess.Popen[bytes]:
    log = open(ROOT / CAPTURE_LOG, "ab")  # noqa: SIM115 - owned by the child
    try:
        return subprocess.Popen(
            capture_command("capture", "--source", SOURCE),
            cwd=ROOT,
            env=cli_env(password),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    finally:
        log.close()


def capture_log() -> str:
    path = ROOT / CAPTURE_LOG
    return path.read_text(errors="replace") if path.exists() else ""


def tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])


def wait_capture_started(process: subprocess.Popen[bytes]) -> None:
    def started() -> bool:
        if process.poll() is not None:
            raise QuickstartError(
                f"capture exited with {process.returncode} before starting; {CAPTURE_LOG} ends:\n{tail(capture_log())}"
            )
        return "capture.first_start" in capture_log()

    try:
        wait_for(started, START_TIMEOUT_S, interval=0.1, what="capture.first_start in the capture log")
    except TimeoutError as exc:
        raise QuickstartError(f"{exc}; {CAPTURE_LOG} ends:\n{tail(capture_log())}") from None


def wait_landed(process: subprocess.Popen[bytes], expected: dict[str, int]) -> dict[str, int]:
    zone = LandingZone(ROOT / LANDING, SOURCE)

    def counts() -> dict[str, int]:
        found = {}
        for table in expected:
            data = zone.read_table("shop", table)
            found[table] = 0 if data is None else data.num_rows
        return found

    def landed() -> dict[str, int] | None:
        if process.poll() is not None:
            raise QuickstartError(
                f"capture exited with {process.returncode}; {CAPTURE_LOG} ends:\n{tail(capture_log())}"
            )
        found = counts()
        return found if all(found[t] >= n for t, n in expected.items()) else None

    try:
        return wait_for(landed, LAND_TIMEOUT_S, interval=0.2, what="the writes to land")
    except TimeoutError:
        raise QuickstartError(
            f"after {LAND_TIMEOUT_S:.0f}s the landing zone holds {counts()} of {expected} "
            f"events; {CAPTURE_LOG} ends:\n{tail(capture_log())}"
        ) from None


def fetch_metrics(port: int) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return [line for line in text.splitlines() if line.startswith("logtide_capture_")]


def fetch_health(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as response:
            return f"{response.status} {response.read().decode()}"
    except urllib.error.HTTPError as exc:
        return f"{exc.code} {exc.read().decode()}"


def stop_process(process: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT_S) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise QuickstartError(f"capture did not stop within {timeout:.0f}s of SIGTERM; killed it") from None
    return process.returncode


def airflow_env(password: str, database_url: str) -> dict[str, str]:
    """Airflow in a private home on the metadata database at `database_url`, with Logtide's DAGs and
    plugins and the quickstart's config."""
    home = ROOT / AIRFLOW_HOME
    return {
        **cli_env(password),  # the dump tasks connect to MariaDB with the source's password
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_url,
        "LOGTIDE_CONFIG": str(ROOT / CONFIG),  # what the DAG files and the tasks read
    }


def run_airflow(password: str, database_url: str, *args: str, timeout: float = 300) -> int:
    """`airflow ARGS`, its output appended to AIRFLOW_LOG; returns the exit code."""
    airflow = Path(sys.executable).with_name("airflow")
    with open(ROOT / AIRFLOW_LOG, "ab") as log:
        log.write(f"\n$ airflow {' '.join(args)}\n".encode())
        log.flush()
        try:
            return subprocess.run(
                [str(airflow), *args],
                cwd=ROOT,
                env=airflow_env(password, database_url),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                timeout=timeout,
            ).returncode
        except subprocess.TimeoutExpired:
            command = " ".join(args)
            raise QuickstartError(f"`airflow {command}` did not finish in {timeout:.0f}s; see {AIRFLOW_LOG}") from None


def airflow_log() -> str:
    path = ROOT / AIRFLOW_LOG
    return path.read_text(errors="replace") if path.exists() else ""


def set_up_airflow(password: str, database_url: str) -> None:
    (ROOT / AIRFLOW_HOME).mkdir(parents=True, exist_ok=True)
    for args in (["db", "migrate"], ["pools", "set", f"logtide_{SOURCE}", "2", f"Logtide dumps of {SOURCE}"]):
        if run_airflow(password, database_url, *args) != 0:
            raise QuickstartError(f"`airflow {' '.join(args)}` failed; {AIRFLOW_LOG} ends:\n{tail(airflow_log())}")


def start_airflow(password: str, database_url: str) -> LiveAirflow:
    """api-server, scheduler and dag-processor on the migrated home, logged in through the REST API."""
    home = ROOT / AIRFLOW_HOME
    ui_password = secrets.token_urlsafe(12)
    port = free_port()
    env = server_env(home, port, ui_password, airflow_env(password, database_url), database_url, base=cli_env(password))
    airflow = LiveAirflow(home, env, port, ui_password)
    airflow.start()
    try:
        airflow.login()
        airflow.wait_dag(DAG_ID)
    except (RuntimeError, TimeoutError) as exc:
        airflow.stop()
        raise QuickstartError(f"Airflow did not come up: {exc}; logs: {AIRFLOW_HOME}/*.log") from None
    return airflow


class BackgroundAirflow(threading.Thread):
    """`start_metadata_server`, `set_up_airflow` and `start_airflow` beside the rest of the quickstart (a
    minute saved). Whoever made `metadb` stops it."""

    def __init__(self, password: str, metadb: PostgreSQL) -> None:
        super().__init__(daemon=True)
        self.password = password
        self.metadb = metadb
        self.airflow: LiveAirflow | None = None
        self.error: BaseException | None = None
        self.abandoned = False

    def run(self) -> None:
        try:
            database_url = start_metadata_server(self.metadb)
            set_up_airflow(self.password, database_url)
            self.airflow = start_airflow(self.password, database_url)
            if self.abandoned:
                self.airflow.stop()
        except BaseException as exc:
            self.error = exc

    def result(self) -> LiveAirflow:
        self.join()
        if self.error is not None:
            raise self.error
        assert self.airflow is not None
        return self.airflow

    def abandon(self) -> None:
        """The quickstart failed: stop Airflow once (or if) it is up."""
        self.abandoned = True
        self.join(timeout=STOP_TIMEOUT_S)
        if self.airflow is not None:
            self.airflow.stop()


def dump_through_airflow(airflow: LiveAirflow) -> tuple[str, dict[str, Any] | None]:
    """Trigger logtide_dump through the REST API, follow its tasks until it ends; the run id and the merge's report."""
    conf = {"source": SOURCE, "chunk_size": 7}
    began = time.monotonic()
    run_id = airflow.trigger(DAG_ID, conf)
    say(f"POST /api/v2/dags/{DAG_ID}/dagRuns conf={json.dumps(conf)}  ->  run {run_id}")
    say(f"follow it in the UI: {airflow.url}/dags/{DAG_ID}/runs/{run_id}")
    seen: dict[tuple[str, int], str | None] = {}

    def report_tasks() -> None:
        for (task_id, map_index), state in sorted(airflow.task_states(DAG_ID, run_id).items()):
            if state in ("success", "failed", "skipped", "upstream_failed") and seen.get((task_id, map_index)) != state:
                seen[(task_id, map_index)] = state
                name = task_id + ("" if map_index < 0 else f"[{map_index}]")
                say(f"  {time.monotonic() - began:6.1f}s  {name:20s} {state}")

    def finished() -> str | None:
        report_tasks()
        state = airflow.get(airflow.run_url(DAG_ID, run_id))["state"]
        return state if state in ("success", "failed") else None

    try:
        state = wait_for(finished, DAG_TIMEOUT_S, interval=1.0, what=f"the {DAG_ID} run to finish")
    except TimeoutError as exc:
        raise QuickstartError(f"{exc}; see the UI and {AIRFLOW_HOME}/*.log") from None
    report_tasks()
    say(f"run {run_id}: {state} in {time.monotonic() - began:.1f}s")
    if state != SUCCESS:
        raise QuickstartError(f"the {DAG_ID} run {state}: see {airflow.url}/dags/{DAG_ID}/runs/{run_id}")
    return run_id, airflow.xcom(DAG_ID, run_id, f"merge_{SOURCE}")


def naive_utc(value: Any) -> Any:
    """TIMESTAMP columns come back UTC-aware or naive depending on the reader: compare them as naive UTC."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


def check_iceberg(server: MariaDB) -> bool:
    """Per table: the source's rows against the Iceberg target's, value for value. True when all are equal."""
    from capture.merge.session import build_session, session_conf
    from capture.merge.spark_types import quote

    config = load_config(ROOT / CONFIG, require_env=False)
    os.environ["TZ"] = "UTC"  # Spark hands timestamps to Python in the process's time zone
    time.tzset()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a local session: no warning about the host name
    spark = build_session(session_conf(config.merge), "local[2]", "logtide-quickstart-check")
    spark.sparkContext.setLogLevel("ERROR")
    all_equal = True
    try:
        say(f"{'table':16s} {'source rows':>11s} {'target rows':>11s}  equal")
        for table, key in TABLE_KEYS.items():
            name = ".".join(quote(p) for p in (config.merge.catalog_name, SOURCE, f"shop__{table}"))
            target_rows = spark.table(name).drop("_lsn", "_applied_at").collect()
            target = {r[key]: {c: naive_utc(v) for c, v in r.asDict().items()} for r in target_rows}
            with server.connect("shop") as conn, conn.cursor(pymysql.cursors.DictCursor) as cursor:
                cursor.execute("SET time_zone = '+00:00'")
                cursor.execute(f"SELECT * FROM `{table}`")
                source = {row[key]: {c: naive_utc(v) for c, v in row.items()} for row in cursor.fetchall()}
            equal = source == target
            all_equal &= equal
            say(f"shop.{table:11s} {len(source):11d} {len(target):11d}  {'yes' if equal else 'NO'}")
            if not equal:
                differing = sorted(k for k in source.keys() | target.keys() if source.get(k) != target.get(k))
                say(f"  keys that differ: {differing[:10]}")
    finally:
        spark.stop()
    return all_equal


def check_no_secret(password: str) -> None:
    airflow_logs = [p.relative_to(ROOT) for p in (ROOT / AIRFLOW_HOME).glob("*.log")]
    for path in (CONFIG, CAPTURE_LOG, AIRFLOW_LOG, *airflow_logs):
        if (ROOT / path).exists() and password in (ROOT / path).read_text(errors="replace"):
            raise QuickstartError(f"the password appears in {path}: it must only be passed by {PASSWORD_ENV}")


# -- --keep / --stop -----------------------------------------------------------------------------


def metadb_pid(metadb: PostgreSQL) -> int:
    """The postmaster's pid (pg_ctl started it in the background): the first line of postmaster.pid."""
    return int((metadb.datadir / "postmaster.pid").read_text().split()[0])


def _alive(pid: int, marker: str) -> bool:
    """True when `pid` runs and its command line holds `marker` (so a reused pid is left alone)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return marker in cmdline


def _running() -> dict[str, Any] | None:
    path = ROOT / RUNNING
    if not path.exists():
        return None
    state = json.loads(path.read_text())
    alive = {name: entry for name, entry in state.items() if _alive(entry["pid"], entry["marker"])}
    return alive or None


# Airflow, then its metadata database; capture commits, then MariaDB goes
STOP_ORDER = ("api-server", "scheduler", "dag-processor", "airflow-metadb", "capture", "mariadb")


def stop_running() -> int:
    recorded = json.loads((ROOT / RUNNING).read_text()) if (ROOT / RUNNING).exists() else {}
    metadb_base = recorded.get("airflow-metadb", {}).get("base")
    state = _running()
    if state is None:
        say("nothing from a quickstart --keep is running")
        (ROOT / RUNNING).unlink(missing_ok=True)
        if metadb_base:
            shutil.rmtree(metadb_base, ignore_errors=True)
        return 0
    for name in STOP_ORDER:
        entry = state.get(name)
        if entry is None:
            continue
        say(f"stopping {name} (pid {entry['pid']}) with SIGTERM")
        if entry.get("group"):  # an Airflow process leads its own group, with its task processes
            os.killpg(entry["pid"], signal.SIGTERM)
        else:
            os.kill(entry["pid"], signal.SIGTERM)
        try:
            wait_for(
                lambda e=entry: not _alive(e["pid"], e["marker"]),
                STOP_TIMEOUT_S,
                interval=0.2,
                what=f"{name} to stop",
            )
        except TimeoutError as exc:
            raise QuickstartError(f"{exc}; pid {entry['pid']} is still running") from None
    (ROOT / RUNNING).unlink(missing_ok=True)
    shutil.rmtree(ROOT / WORK / "mariadb" / "data", ignore_errors=True)
    if metadb_base:
        shutil.rmtree(metadb_base, ignore_errors=True)
    say(f"stopped; the landing zone stays in {LANDING}")
    return 0


# -- the run -------------------------------------------------------------------------------------


def quickstart(keep: bool) -> int:
    if _running() is not None:
        raise QuickstartError(
            "a quickstart started with --keep is still running; stop it first with `scripts/quickstart.sh --stop`"
        )
    if shutil.which("mariadbd") is None and not Path("/usr/sbin/mariadbd").exists():
        raise QuickstartError("mariadbd is not installed; run scripts/setup.sh (installs mariadb-server)")
    os.environ["PATH"] = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"

    shutil.rmtree(ROOT / WORK, ignore_errors=True)
    (ROOT / WORK).mkdir(parents=True)
    password = os.environ.get("LOGTIDE_QUICKSTART_PASSWORD") or secrets.token_urlsafe(18)
    server = MariaDB(ROOT / WORK / "mariadb")
    # a temporary folder: the server runs as the user postgres, who must reach it (var/ may not be reachable)
    metadb = PostgreSQL(Path(tempfile.mkdtemp(prefix="logtide-quickstart-metadb-")))
    capture: subprocess.Popen[bytes] | None = None
    booting: BackgroundAirflow | None = None
    airflow: LiveAirflow | None = None
    handed_over = False  # --keep: the processes outlive this script
    started = time.monotonic()
    try:
        heading("private MariaDB")
        server.start(timeout=60)
        say(f"mariadbd pid {server.process.pid} on 127.0.0.1:{server.port}, data in {WORK / 'mariadb'}")
        set_up_database(server, password)
        say(
            "database shop (customers, orders); user logtide with REPLICATION SLAVE, BINLOG MONITOR ON *.*, "
            "SELECT ON shop.*, ALL ON logtide.*"
        )

        heading("capture")
        metrics_port = free_port()
        write_config(metrics_port, server.port)
        say(f"config {CONFIG}; password passed only as ${PASSWORD_ENV}")
        booting = BackgroundAirflow(password, metadb)  # starts while capture runs and the writes land
        booting.start()
        capture = start_capture(password)
        wait_capture_started(capture)
        say(f"capture pid {capture.pid} started (capture.first_start), log {CAPTURE_LOG}")

        heading("writes")
        expected: dict[str, int] = {}
        for statement, lands in WRITES:
            server.execute(statement)
            say("  " + " ".join(statement.split())[:100])
            for table, n in lands.items():
                expected[table] = expected.get(table, 0) + n
        landed = wait_landed(capture, expected)
        say(f"landed: {', '.join(f'shop.{t} {n} events' for t, n in landed.items())}")

        heading("logtide status")
        say(run_cli(password, "status").rstrip())
        for table in ("customers", "orders"):
            heading(f"logtide events --source {SOURCE} --table shop.{table}")
            say(run_cli(password, "events", "--source", SOURCE, "--table", f"shop.{table}").rstrip())

        heading(f"metrics http://127.0.0.1:{metrics_port}/metrics (logtide_capture_*)")
        for line in fetch_metrics(metrics_port):
            say(line)
        say(f"/health: {fetch_health(metrics_port)}")
        check_no_secret(password)

        heading("Airflow: api-server, scheduler (LocalExecutor), dag-processor")
        airflow = booting.result()
        booting = None
        say(f"AIRFLOW_HOME {AIRFLOW_HOME}, pool logtide_{SOURCE}, LOGTIDE_CONFIG {CONFIG}")
        say(f"metadata  PostgreSQL 127.0.0.1:{metadb.port}, database {METADATA_DATABASE}, data in {metadb.base}")
        say(f"processes {', '.join(f'{n} pid {p}' for n, p in airflow.pids().items())}; logs {AIRFLOW_HOME}/*.log")
        say(f"UI        {airflow.url}   log in as {USER} / {airflow.password}")

        heading(f"{DAG_ID} through the REST API (every captured table, chunks of 7 rows), then the Spark merge")
        server.execute("UPDATE shop.products SET price = price + 1 WHERE sku = 'SKU-0003'")  # a change the log has
        run_id, report = dump_through_airflow(airflow)
        for table in (report or {}).get("tables", []):
            say(
                f"  merged {table['table']:16s} frontier {table.get('frontier')}  log events {table.get('log_events')}"
                f"  chunks {table.get('chunks')}  chunk rows {table.get('chunk_rows')}"
                f"  dropped by a window {table.get('dropped_by_window')}"
            )
        check_no_secret(password)

        heading(f"check: source tables vs Iceberg tables ({WAREHOUSE})")
        if not check_iceberg(server):
            raise QuickstartError("an Iceberg table differs from its source table (above)")

        if keep:
            state = {
                **{name: {"pid": pid, "marker": "airflow", "group": True} for name, pid in airflow.pids().items()},
                "capture": {"pid": capture.pid, "marker": "capture.cli"},
                "mariadb": {"pid": server.process.pid, "marker": "mariadbd"},
                "airflow-metadb": {"pid": metadb_pid(metadb), "marker": "postgres", "base": str(metadb.base)},
            }
            (ROOT / RUNNING).write_text(json.dumps(state, indent=2) + "\n")
            handed_over = True
            heading("left running")
            say(f"finished in {time.monotonic() - started:.1f}s")
            say(f"Airflow  {airflow.url}   log in as {USER} / {airflow.password}")
            say(f"         the dump run: {airflow.url}/dags/{DAG_ID}/runs/{run_id}")
            say(f"MariaDB  127.0.0.1:{server.port} (pid {server.process.pid}); as root with no password:")
            say(f"         mariadb -h 127.0.0.1 -P {server.port} -u root shop")
            say(f"capture  pid {capture.pid}, log {CAPTURE_LOG}")
            say(f"metrics  http://127.0.0.1:{metrics_port}/metrics and /health")
            say(f"inspect  cd {ROOT} && .venv/bin/logtide --config {CONFIG} status")
            say(f"metadata PostgreSQL 127.0.0.1:{metadb.port} (as postgres, database {METADATA_DATABASE})")
            say("stop     scripts/quickstart.sh --stop   (SIGTERM to Airflow, its database, capture, then MariaDB)")
            return 0

        heading("stop")
        airflow.stop()
        airflow = None
        metadb.destroy()
        say("Airflow stopped (its metadata database too)")
        code = stop_process(capture)
        if code != 0:
            raise QuickstartError(
                f"capture exited with {code} after SIGTERM; {CAPTURE_LOG} ends:\n{tail(capture_log())}"
            )
        say(
            "capture stopped on SIGTERM with exit code 0 "
            f"({'capture.stopped' if 'capture.stopped' in capture_log() else 'no capture.stopped line'})"
        )
        capture = None
        server.stop()
        say("MariaDB stopped")

        heading("done")
        say(f"finished in {time.monotonic() - started:.1f}s")
        say(f"landing zone   {LANDING}/{SOURCE}  (left in place: Parquet per table + checkpoint.json)")
        say(f"Iceberg tables {WAREHOUSE}/{SOURCE}/shop__<table> (Hadoop catalog `logtide`)")
        say(f"config         {CONFIG}")
        say(f"capture log    {CAPTURE_LOG}")
        say(f"Airflow        {AIRFLOW_HOME} (task logs under logs/), output {AIRFLOW_LOG}")
        say(f"MariaDB log    {WORK / 'mariadbd.log'}")
        say(
            f"inspect again  cd {ROOT} && .venv/bin/logtide --config {CONFIG} "
            f"events --source {SOURCE} --table shop.orders"
        )
        return 0
    finally:
        if not handed_over:
            if booting is not None:
                booting.abandon()
            if airflow is not None:
                airflow.stop()
            metadb.destroy()
            if capture is not None and capture.poll() is None:
                capture.kill()
                capture.wait()
            server.stop()
            # keep the server's log, drop its (large) data folder
            log = ROOT / WORK / "mariadb" / "mariadbd.log"
            if log.exists():
                shutil.copy(log, ROOT / WORK / "mariadbd.log")
            server.destroy()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave MariaDB, capture and Airflow (its UI) running at the end (stop with --stop)",
    )
    parser.add_argument("--stop", action="store_true", help="stop what --keep left running")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    # a SIGTERM to the quickstart still cleans up its children (the finally blocks)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        return stop_running() if args.stop else quickstart(args.keep)
    except QuickstartError as exc:
        print(f"\nquickstart failed: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        traceback.print_exc()
        print(f"\nquickstart failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nquickstart interrupted; child processes stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
