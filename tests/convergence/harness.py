"""One seed of the convergence harness, through the commands a user runs.

    populate -> logtide setup -> logtide capture (SIGKILLed at random moments, restarted)
    -> workload thread (own connection) -> logtide dump --source S (all tables, small chunks)
       paused at a random chunk of a table with text keys until `logtide merge --source S` has
       read its frontier (so that table's chunks are split across merge runs); that merge is
       SIGKILLed after a later table's changelog commit; more merges while the dump runs
    -> writes stop, capture catches up, a last merge (which also reruns the killed one)
    -> check.py: targets, changelog replays, landing zone duplicates

Where an all-tables command fails, the harness says so (a finding) and goes on with the tables it
can still name (`--table`), so that one defect does not hide the others. A run passes when it has
no findings.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from capture.config import SourceConfig
from capture.dump.control import FileControl
from capture.dump.progress import dump_dir
from capture.landing import LandingZone
from capture.landing.chunks import read_chunk_meta
from capture.landing.reader import Watermarks, chunk_window, dump_chunk_files, merge_tables
from capture.landing.zone import table_folder
from tests.conftest import ROOT, CaptureProcess
from tests.convergence import check
from tests.convergence.kit import Kit
from tests.convergence.mariadb import MariaDBKit
from tests.convergence.postgres import PostgresKit
from tests.convergence.schema import Table, tables
from tests.convergence.workload import Workload, populate
from tests.integration.crash_load import kill_repeatedly
from tests.servers import free_port, wait_for


@dataclass(frozen=True)
class Scale:
    rows: int = 300  # rows per table before capture starts (`wide`: a tenth)
    ops_per_s: float = 200.0  # workload statements per second
    chunk_size: int = 23
    dump_s: float = 10.0  # about how long a dump lasts unpaused: the --delay between chunks is chosen for it
    dumps: int = 1
    kill_every_s: tuple[float, float] = (3.0, 8.0)  # capture is SIGKILLed after a random pause in this range
    watermarks: str = "table"  # the source's `watermarks`: table, or readonly (README, Read-only watermarks)
    dump_kills: int = 0  # each dump SIGKILLed this many times at random chunks and rerun with its id (resumed)
    ddl: bool = False  # the workload also alters tables (workload.Workload._ddl): ADD/DROP COLUMN, widenings
    ddl_every_s: tuple[float, float] = (2.0, 5.0)  # with `ddl`: the pause between two ALTERs
    # the text keys' collation: ci (MariaDB utf8mb4_general_ci, ICU und-u-ks-level2), or ai: accent- and
    # case-insensitive (MariaDB utf8mb4_uca1400_ai_ci, ICU und-u-ks-level1), keys respelt across accents
    collation: str = "ci"


CHECK_THREADS = 4  # tables checked at once (check.check_table)

KITS: dict[str, type[Kit]] = {"mariadb": MariaDBKit, "postgres": PostgresKit}
CI = Scale()
SOAK = Scale(rows=10_000, ops_per_s=300.0, chunk_size=97, dump_s=60.0, dumps=2, kill_every_s=(2.0, 10.0))


@dataclass
class Result:
    kind: str
    seed: int
    findings: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    workdir: Path | None = None

    @property
    def passed(self) -> bool:
        return not self.findings

    def summary(self) -> str:
        verdict = "PASS" if self.passed else f"FAIL ({len(self.findings)} findings)"
        facts = " ".join(f"{k}={v}" for k, v in self.facts.items() if not isinstance(v, (dict, list)))
        return f"convergence {self.kind} seed={self.seed}: {verdict}  {facts}"

    def report(self) -> str:
        lines = [self.summary(), *(f"  {f}" for f in self.findings)]
        lines += [f"  {k}: {json.dumps(v, default=str)}" for k, v in self.facts.items() if isinstance(v, (dict, list))]
        if self.workdir is not None:
            lines.append(f"  logs and landing zone: {self.workdir}")
        return "\n".join(lines)


def error_line(output: str) -> str:
    """The line of a command's output that says what failed: Logtide's error, else the first exception
    naming a Spark error class (`[READ_ANCIENT_DATETIME]`), else the last exception line."""
    for pattern in (
        r"event=(?:merge|logtide)\.failed .*",
        r"^error: .*",
        r"^[\w.$]+(?:Exception|Error): \[[A-Z_.]+\].*",
    ):
        found = re.findall(pattern, output, re.MULTILINE)
        if found:
            return found[-1 if pattern.startswith("event") else 0][:400]
    raised = re.findall(r"^\S*(?:Exception|Error)\b.*$", output, re.MULTILINE)
    return (raised[-1] if raised else output.strip().splitlines()[-1] if output.strip() else "no output")[:400]


def _table_reports(output: str) -> dict[str, dict[str, int]]:
    """Per table a merge finished: its counts, from the `merge.table_finished` lines (a killed merge too)."""
    reports = {}
    for line in re.findall(r"event=merge\.table_finished (.*)", output):
        fields = dict(re.findall(r"(\w+)=(\S+)", line))
        reports[fields.pop("table")] = {k: int(v) for k, v in fields.items() if v.isdigit()}
    return reports


class Harness:
    """One seed on one database: `run()` returns the Result."""

    def __init__(
        self, kit: Kit, seed: int, scale: Scale, workdir: Path, spark: Any, warehouse: Path, catalog: str
    ) -> None:
        self.kit, self.seed, self.scale, self.workdir = kit, seed, scale, workdir
        self.spark, self.warehouse, self.catalog = spark, warehouse, catalog
        self.rng = random.Random(seed)
        kit.use_collation(scale.collation)
        self.source = f"conv_{kit.kind}_{seed}"  # also the targets' namespace (merge.namespace's default)
        self.tables = tables(kit.type_kinds)
        self.config_keys = "keys" in SourceConfig.model_fields  # sources.<name>.keys (issue 10)
        self.findings: list[str] = []
        self.facts: dict[str, Any] = {}
        self.broken: set[str] = set()  # tables a merge failed on: later merges name the others
        self.merges: list[dict[str, Any]] = []
        self.killed_merge = False
        self.commands = 0
        self.capture: CaptureProcess | None = None
        self.children: list[subprocess.Popen[bytes]] = []
        self.dumping: str | None = None  # the id of the dump running now (the DDL workload's `rewritable`)

    # -- commands ----------------------------------------------------------------------------------

    def _note(self, text: str) -> None:
        """The harness's own progress, in <workdir>/harness.log."""
        with open(self.workdir / "harness.log", "a") as out:
            out.write(f"{time.strftime('%H:%M:%S')} {text}\n")

    def _start(self, label: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        self.commands += 1
        self._note(f"start {label}: logtide {' '.join(args)}")
        log = self.workdir / "logs" / f"{self.commands:02d}-{label}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "capture.cli", "--config", str(self.config_path), *args]
        with open(log, "wb") as out:  # `logtide merge`: spark-submit sends the driver's output to stdout
            process = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.children.append(process)
        return process, log

    def _run(self, label: str, *args: str, timeout: float = 600) -> tuple[int, str]:
        process, log = self._start(label, *args)
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            code = -9
            self.findings.append(f"{label}: still running after {timeout:.0f} s, killed (log {log})")
        self._note(f"{label} exited {code}")
        return code, log.read_text(errors="replace")

    # -- the run -----------------------------------------------------------------------------------

    def run(self) -> Result:
        began = time.monotonic()
        try:
            self._run_seed()
        except Exception as exc:  # the seed's result says what broke; the soak goes on with the next seed
            self.findings.append(f"harness stopped: {type(exc).__name__}: {exc} (see {self.workdir / 'harness.log'})")
            self._note(traceback.format_exc())
        finally:
            for child in self.children:  # a dump or merge still running when the harness stops
                if child.poll() is None:
                    os.killpg(child.pid, signal.SIGKILL)
                    child.wait()
            if self.capture is not None:
                self.capture.kill()
            self.kit.drop()
        self.facts["seconds"] = round(time.monotonic() - began, 1)
        return Result(self.kit.kind, self.seed, self.findings, self.facts, self.workdir)

    def _run_seed(self) -> None:
        # a seed run again (a soak's kept warehouse) starts from no targets: its landing zone is new,
        # and the merge refuses targets merged from another one
        if (self.warehouse / self.source).is_dir():  # the Hadoop catalog's namespace (listing a new one fails)
            for row in self.spark.sql(f"SHOW TABLES IN {self.catalog}.{self.source}").collect():
                self.spark.sql(f"DROP TABLE {self.catalog}.{self.source}.{row.tableName}")
        self.kit.create(self.tables)
        live, next_n = populate(self.kit, self.tables, self.scale.rows, self.seed)
        self.config_path = self._write_config()
        if self.scale.watermarks == "readonly":
            self.kit.administer(self.tables, self.source)
        code, output = self._run("setup", "setup", "--source", self.source)
        if code != 0:
            self.findings.append(f"logtide setup failed ({code}): {error_line(output)}")
            return
        self.capture = CaptureProcess(self.config_path, self.source, self.workdir)
        self.capture.start()
        self.capture.wait_running(timeout=120)
        ddl_every_s = self.scale.ddl_every_s if self.scale.ddl else None
        workload = Workload(self.kit, self.tables, live, next_n, self.seed * 7919, self.scale.ops_per_s,
                            ddl_every_s, self._rewritable if self.scale.ddl else None)  # fmt: skip
        stop_kills, kills = threading.Event(), []
        args = (self.capture, math.inf, self.seed * 31, self.scale.kill_every_s, stop_kills)
        killer = threading.Thread(target=lambda: kills.append(kill_repeatedly(*args)), name="kills", daemon=True)
        workload.start()
        killer.start()
        self._note("capture, workload and capture kills running")
        merges: list[threading.Thread] = []
        try:
            for number in range(self.scale.dumps):
                merges.append(self._dump_with_merges(f"conv-{number}"))
        finally:  # writes and kills last as long as the dumps
            workload.stop()
            stop_kills.set()
            killer.join()
            for merge in merges:
                merge.join()
        self._note("dumps done, writes stopped")
        self._workload_facts(workload)
        self.facts["capture_kills"] = kills[0] if kills else 0
        if self.capture.process is None or self.capture.process.poll() is not None:
            self.capture.start()
        self.capture.wait_running(timeout=120)
        try:
            self.kit.wait_until_landed(self.capture, timeout=900)
        except TimeoutError:
            self.findings.append(f"capture did not catch up within 900 s: {error_line(self.capture.log())}")
            return
        self._note("capture caught up")
        if not self.killed_merge:  # the merges during the dumps failed or ended before the kill
            self._merge("final-killed", kill_after=self.rng.randint(1, max(1, len(self._keyed()) // 2)))
        self._merge("final")
        self._split_check()
        checking = time.monotonic()
        self._check()
        self._note(f"checked in {time.monotonic() - checking:.1f} s")

    def _write_config(self) -> Path:
        """The default config, except what a test must set: the server, a free metrics port, where the
        landing zone and the warehouse are, and `keys` for the keyless table once Logtide has them."""
        source = {**self.kit.source_config(self.tables), "metrics": {"port": free_port()}}
        if self.scale.watermarks != "table":
            source["watermarks"] = self.scale.watermarks
        if self.scale.ddl:  # the DDL workload's rewrites, each before the running dump reaches its table
            source["column_rewrites"] = "accept"
        if self.config_keys:
            source["keys"] = {f"{self.kit.schema}.{t.name}": list(t.ident) for t in self.tables if t.key == "config"}
        config = {
            "landing": {"path": str(self.workdir / "landing")},
            "sources": {self.source: source},
            "merge": {"catalog_name": self.catalog, "warehouse": str(self.warehouse)},
        }
        path = self.workdir / "logtide.yaml"
        path.write_text(yaml.safe_dump(config, allow_unicode=True))
        return path

    # -- dumps and merges --------------------------------------------------------------------------

    def _keyed(self) -> list[Table]:
        return [t for t in self.tables if t.captured and t.compared_by(self.config_keys)]

    def _expected_chunks(self, table: Table) -> int:
        """Chunks of `table` in a dump if it had kept its first rows."""
        return math.ceil(table.initial_rows(self.scale.rows) / self.scale.chunk_size)

    def _dump_args(self, dump_id: str, names: list[str]) -> list[str]:
        delay = round(self.scale.dump_s / sum(self._expected_chunks(t) for t in self._keyed()), 3)
        tables = [a for name in names for a in ("--table", name)]
        return ["dump", "--source", self.source, *tables, "--dump-id", dump_id,
                "--chunk-size", str(self.scale.chunk_size), "--delay", str(delay)]  # fmt: skip

    def _rewritable(self, name: str) -> bool:
        """Whether an ALTER that gives rows new values without row events may go to table `name` now: a
        dump is running and has no chunk of it yet, and the table spans several chunks, so that a chunk
        of it is read after the ALTER is committed (the dump reads the table again from its start when
        its chunks so far are stale). The dump then repairs every row, as `column_rewrites: accept` asks."""
        dump_id, table = self.dumping, next(t for t in self.tables if t.name == name)
        return dump_id is not None and self._expected_chunks(table) >= 3 and self._chunks_done(dump_id, table) == 0

    def _chunks_done(self, dump_id: str, table: Table | None = None) -> int:
        folder = "*" if table is None else table_folder(self.kit.schema, table.name)
        return len(list((self._zone().root / "chunks" / dump_id).glob(f"{folder}/[0-9]*.parquet")))

    def _chunks_landed(self, dump_id: str, table: Table) -> int:
        """Chunks of `table` in the dump whose HIGH is below capture's committed frontier: what a merge
        starting now takes (a chunk whose HIGH capture has not landed yet waits for a later merge)."""
        marks = Watermarks(self._zone())
        files = dump_chunk_files(self._zone(), dump_id, self.kit.schema, table.name)
        return sum(1 for path in files if chunk_window(marks, path, read_chunk_meta(path)) is not None)

    def _dump_with_merges(self, dump_id: str) -> threading.Thread:
        """The all-tables dump, returned when it ends, and the thread of the merges that ran meanwhile.

        At a random chunk the dump is paused (its control file) until a merge has read its frontier,
        so that merge takes the chunks so far and a later merge the rest, however slow the machine. The
        run's first merge is SIGKILLed after a random changelog commit (the tables before it are merged
        completely, the rest come again with the next merge); more merges follow while the dump lasts."""
        keyed = sorted(self._keyed(), key=lambda t: t.name)  # the order dumps and merges take them
        # the paused table is one with case-insensitive text keys, where the database's order is not Spark's
        split = self.rng.choice([t for t in keyed if any(t.column(c).kind == "text_ci" for c in t.ident)])
        pause_at = self.rng.randint(1, max(1, self._expected_chunks(split) - 1))
        self.facts.setdefault("split", []).append(f"{split.name} at chunk {pause_at}")
        after = keyed.index(split) + 2  # a changelog commit after `split`'s: its target MERGE has committed
        kill_after = self.rng.randint(after, len(keyed)) if after <= len(keyed) and not self.killed_merge else None

        def reached(dump_id: str) -> bool:
            return self._chunks_done(dump_id, split) >= pause_at

        names_run: list[str] = []
        self.dumping = dump_id
        dump, log = self._start(f"dump-{dump_id}", *self._dump_args(dump_id, names_run))
        wait_for(lambda: dump.poll() is not None or reached(dump_id), 900, 0.05, "chunks")
        if dump.poll() not in (None, 0):
            self.findings.append(f"logtide dump --source (all tables) failed ({dump.returncode}): "
                                 f"{error_line(log.read_text(errors='replace'))}")  # fmt: skip
            names_run = sorted(f"{self.kit.schema}.{t.name}" for t in self._keyed())
            dump_id += "-by-table"
            self.dumping = dump_id
            dump, log = self._start(f"dump-{dump_id}", *self._dump_args(dump_id, names_run))
            wait_for(lambda: dump.poll() is not None or reached(dump_id), 900, 0.05, "chunks")
        # through the dump's control file, as `logtide dump-control` writes it, but at once: a CLI start
        # takes a second or two, in which a PostgreSQL dump finishes a small table
        control = FileControl(dump_dir(self._zone(), dump_id) / "control.json")
        paused = dump.poll() is None
        if paused:
            control.update(state="paused")
            # capture, SIGKILLed and restarted meanwhile, may not have landed those chunks' HIGHs yet (at load
            # 20 on 2 cores it had none of 24 when the merge read its frontier): the first merge then took none
            wait_for(lambda: self._chunks_landed(dump_id, split) >= pause_at, 600, 0.2, "the paused chunks to land")

        def resume() -> None:
            if paused:
                self.facts.setdefault("merge_started_at_chunk", []).append(self._chunks_done(dump_id))
                control.update(state="running")

        ended = threading.Event()  # the dump's last run exited (a killed one is rerun)

        def merges() -> None:
            self._merge("during-dump", kill_after=kill_after, started=resume, after_table=split.name)
            while not ended.is_set():
                time.sleep(self.rng.uniform(0.5, 3.0))
                if not ended.is_set():
                    self._merge("during-dump")

        merging = threading.Thread(target=merges, name="merges", daemon=True)
        merging.start()
        for kill in range(self.scale.dump_kills):
            done = self._chunks_done(dump_id)
            # a few chunks after the last start, so that every rerun resumes with chunks behind it
            target = done + self.rng.randint(1, max(1, self._expected_chunks(split) // 2))
            running = dump

            def progressed(running: subprocess.Popen[bytes] = running, target: int = target) -> bool:
                return running.poll() is not None or self._chunks_done(dump_id) >= target

            wait_for(progressed, 900, 0.02, "chunks")
            if dump.poll() is not None:
                break
            time.sleep(self.rng.uniform(0.0, 0.3))  # anywhere between two chunks, or inside one
            os.killpg(dump.pid, signal.SIGKILL)
            dump.wait()
            self.facts["dump_kills"] = self.facts.get("dump_kills", 0) + 1
            self._note(f"dump {dump_id} killed after {self._chunks_done(dump_id)} chunks, resumed")
            dump, log = self._start(f"dump-{dump_id}-resumed-{kill + 1}", *self._dump_args(dump_id, names_run))
        dump.wait()
        self.dumping = None
        ended.set()
        if dump.returncode != 0:
            self.findings.append(f"logtide dump {dump_id} failed ({dump.returncode}): "
                                 f"{error_line(log.read_text(errors='replace'))}")  # fmt: skip
        self._note(f"dump {dump_id} exited {dump.returncode}")
        self.facts.setdefault("dumped_chunks", []).append(self._chunks_done(dump_id))
        return merging

    def _zone(self) -> LandingZone:
        return LandingZone(self.workdir / "landing", self.source)

    def _merge_tables(self) -> list[str]:
        return [t for t in merge_tables(self._zone()) if t not in self.broken]

    def _merge(
        self,
        label: str,
        kill_after: int | None = None,
        started: Callable[[], None] | None = None,
        after_table: str | None = None,
    ) -> None:
        """`logtide merge --source S` (SIGKILLed after `kill_after` changelog commits, and not before table
        `after_table` finished); after a failure the harness names the tables left (`--table`)."""
        names: list[str] | None = None if not self.broken else self._merge_tables()
        while True:
            args = ["merge", "--source", self.source, *(a for n in names or [] for a in ("--table", n))]
            code, output = self._merge_once(label, args, started, kill_after, after_table)
            started, kill_after, after_table = None, None, None
            self.merges.append(_table_reports(output))
            if code == -signal.SIGKILL:
                return  # the next merge reruns it
            finished = list(self.merges[-1])
            if code == 0:
                return
            order = names if names is not None else self._merge_tables()
            failed = next((n for n in order if n not in finished), None)
            where = f"table {failed}" if failed else "before any table"
            finding = f"logtide merge ({label}, {'all tables' if names is None else 'named tables'}) failed on {where}"
            self.findings.append(f"{finding} ({code}): {error_line(output)}")
            if failed is None:
                return
            self.broken.add(failed)
            names = [n for n in order if n not in finished and n != failed and n not in self.broken]
            if not names:
                return

    def _merge_once(
        self,
        label: str,
        args: list[str],
        started: Callable[[], None] | None,
        kill_after_commits: int | None,
        after_table: str | None = None,
    ) -> tuple[int, str]:
        """One `logtide merge`: `started` is called once it has read its frontier; with `kill_after_commits`
        it is SIGKILLed (spark-submit and all) a moment after that many changelog commits and, with
        `after_table`, once that table finished (tables merge in parallel, in no fixed order: the count
        alone can fall between its changelog commit and its target's)."""
        finished = (
            None
            if after_table is None
            else re.compile(rf"event=merge\.table_finished table=\S+\.{re.escape(after_table)} ")
        )
        process, log = self._start(f"merge-{label}", *args)
        deadline = time.monotonic() + 900
        while process.poll() is None and time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            if started is not None and ("event=merge.started" in text or "event=merge.failed" in text):
                started()
                started = None
            done = finished is None or finished.search(text) is not None
            if kill_after_commits and done and text.count("event=merge.changelog_committed") >= kill_after_commits:
                time.sleep(self.rng.uniform(0.0, 1.0))
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
                    self.killed_merge = True
                    self.facts["merge_killed_after_commits"] = kill_after_commits
                    self._note(f"merge-{label} killed after {kill_after_commits} changelog commits")
                    return -signal.SIGKILL, log.read_text(errors="replace")
            time.sleep(0.1)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            self.findings.append(f"logtide merge ({label}) still running after 900 s, killed (log {log})")
        if started is not None:
            started()
        self._note(f"merge-{label} exited {process.returncode}")
        return process.returncode, log.read_text(errors="replace")

    def _split_check(self) -> None:
        """The run means what it says only if a dump's chunks went to more than one merge."""
        chunks = [sum(r.get("chunks", 0) for r in merge.values()) for merge in self.merges]
        self.facts["chunks_per_merge"] = chunks
        self.facts["repair_deletes"] = sum(r.get("repair_deletes", 0) for m in self.merges for r in m.values())
        self.facts["dropped_by_window"] = sum(r.get("dropped_by_window", 0) for m in self.merges for r in m.values())
        if sum(1 for c in chunks if c) < 2:
            self.findings.append(f"harness: the dump's chunks were not split across merges ({chunks}); "
                                 "raise Scale.dump_s so that the dump outlasts a merge's start")  # fmt: skip
        if not self.killed_merge:
            self.findings.append("harness: no merge was killed mid-run (each ended before the chosen commit)")

    # -- the verdict -------------------------------------------------------------------------------

    def _workload_facts(self, workload: Workload) -> None:
        self.facts["statements"] = workload.counts.get("statements", 0)  # on the PASS line too
        self.facts["workload"] = dict(workload.counts)
        if workload.ddl_done:
            self.facts["ddl"] = len(workload.ddl_done)
            self.facts["ddl_statements"] = workload.ddl_done
        if workload.failure is not None:
            self.findings.append(f"workload stopped: {type(workload.failure).__name__}: {workload.failure}")
        for error, count in workload.errors.items():
            self.findings.append(f"workload: the database refused an application write {count} times: {error}")

    def _check(self) -> None:
        errors = Counter(re.sub(r"^ts=\S+ ", "", line)[:300] for line in self.capture.log().splitlines()
                         if "level=error" in line)  # fmt: skip
        self.findings += [f"capture logged {n}x: {line}" for line, n in errors.items()]
        self.findings += check.landing_duplicates(self._zone())

        def check_one(table: Table) -> list[str]:
            key = table.compared_by(self.config_keys)
            assert key is not None
            target = ".".join(f"`{p}`" for p in (self.catalog, self.source, f"{self.kit.schema}__{table.name}"))
            changelog = target[:-1] + "__changelog`"
            return check.check_table(self.kit, self.spark, table, key, target, changelog)

        # the tables' checks at once (each with its own connection, Spark jobs from threads): most of a
        # check is waiting for Spark's planning and the Iceberg metadata, not for the cores; findings in
        # table order
        with ThreadPoolExecutor(max_workers=CHECK_THREADS, thread_name_prefix="check") as pool:
            for findings in pool.map(check_one, self._keyed()):
                self.findings += findings
