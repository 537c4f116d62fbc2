"""CPU of a warm table in one merge driver, per JVM thread (issue 13's six-tables floor).

    python -m benchmarks.merge_end_to_end --skip-big --rounds 1 --keep   # prints the work folder
    python -m benchmarks.merge_warm_tables WORK [--rounds 3]

Runs `run_merge` in this process (`local[2]`, the merge's session settings and driver JVM options)
on the landing zone a kept `merge_end_to_end` run left: `small_0` cold, then `small_1`..`small_6`
round after round, their target folders removed before each. Per round it prints the JVM's CPU
seconds per table by thread group (from /proc: the py4j threads where the driver plans and commits,
the task threads, C1, GC ...), this process's (the Python driver) and the py4j commands sent per
table. The first round is the state of the benchmark's tables 2 to 6 (the JVM warmed by one table);
one variant against another differs here by 0.01 CPU-s per table where the benchmark's spread is
0.1. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import sys
from pathlib import Path

from capture.config import load_config
from capture.merge.app import run_merge
from capture.merge.session import build_session, session_conf
from capture.merge_submit import LOCAL_DRIVER_OPTIONS

SOURCE = "bench"  # merge_end_to_end's
TABLES = [f"public.small_{i}" for i in range(1, 7)]
TICK = os.sysconf("SC_CLK_TCK")


def _threads(pid: int) -> collections.Counter[str]:
    """CPU seconds per thread name (digits folded: `Thread-12` and `Thread-3` are one group), and
    of the processes the JVM waited for (`children`: Hadoop's `chmod`)."""
    out: collections.Counter[str] = collections.Counter()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    out["children"] = (int(fields[13]) + int(fields[14])) / TICK
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            raw = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue  # ended meanwhile
        name = re.sub(r"[0-9]+", "N", raw[raw.index("(") + 1 : raw.rindex(")")])
        fields = raw.rsplit(")", 1)[1].split()
        out[name] += (int(fields[11]) + int(fields[12])) / TICK
    return out


def _count_commands() -> collections.Counter[str]:
    """py4j commands sent by this process, counted by their kind (first line)."""
    from py4j import clientserver

    sent: collections.Counter[str] = collections.Counter()
    original = clientserver.ClientServerConnection.send_command

    def send(self: object, command: str) -> str:
        sent[command.split("\n", 1)[0]] += 1
        return original(self, command)

    clientserver.ClientServerConnection.send_command = send  # type: ignore[method-assign]
    return sent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("work", type=Path, help="the work folder of `merge_end_to_end --keep`")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the six warm tables (3)")
    parser.add_argument("--conf", action="append", default=[], help="a Spark setting KEY=VALUE of a variant")
    parser.add_argument("--java-options", default="", help="driver JVM options of a variant, after the merge's")
    args = parser.parse_args(argv)
    config = load_config(args.work / "logtide.yaml", require_env=False)
    warehouse = Path(config.merge.warehouse) / SOURCE

    def drop(tables: list[str]) -> None:
        for table in tables:
            for suffix in ("", "__changelog"):
                shutil.rmtree(warehouse / f"{table.replace('.', '__')}{suffix}", ignore_errors=True)

    conf = session_conf(config.merge)
    conf.update(kv.split("=", 1) for kv in args.conf)
    conf["spark.driver.extraJavaOptions"] = " ".join(
        [*LOCAL_DRIVER_OPTIONS, conf.get("spark.driver.extraJavaOptions", ""), args.java_options]
    ).strip()
    spark = build_session(conf, "local[2]", "logtide-merge-warm-tables")
    try:
        spark.sparkContext.setLogLevel("OFF")
        pid = spark.sparkContext._gateway.proc.pid
        sent = _count_commands()
        drop(["public.small_0", *TABLES])
        run_merge(spark, config, SOURCE, ["public.small_0"])
        for round_ in range(args.rounds):
            drop(TABLES)
            sent.clear()
            before, python = _threads(pid), os.times()
            summary = run_merge(spark, config, SOURCE, TABLES)
            after, now = _threads(pid), os.times()
            if summary["failed"]:
                raise SystemExit(f"a table failed: {summary['failed']}")
            after.subtract(before)
            n = len(TABLES)
            jvm = sum(after.values())
            py = (now.user + now.system - python.user - python.system) / n
            groups = ", ".join(f"{k} {v / n:.3f}" for k, v in after.most_common(8))
            print(
                f"round {round_ + 1}: per table JVM {jvm / n:.3f} CPU-s ({groups}); Python driver {py:.3f};"
                f" py4j commands {sum(sent.values()) / n:.0f}",
                flush=True,
            )
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
