"""Where a Spark application's time went, from its event log (`spark.eventLog.enabled`), without
the history server: the JVM's start to the first job, then every job with its start, duration,
stage count and the line of the merge that ran it (AQE runs each query stage as a job of its own,
without one).

    .venv/bin/python -m benchmarks.merge_end_to_end --event-log var/events
    .venv/bin/python -m benchmarks.spark_event_log var/events/local-...     # one application
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def summary(path: Path) -> list[str]:
    started, ended = 0, 0
    jobs: dict[int, list] = {}
    for line in path.read_text().splitlines():
        event = json.loads(line)
        kind = event["Event"]
        if kind == "SparkListenerApplicationStart":
            started = event["Timestamp"]
        elif kind == "SparkListenerApplicationEnd":
            ended = event["Timestamp"]
        elif kind == "SparkListenerJobStart":
            site = event.get("Properties", {}).get("callSite.short", "")
            jobs[event["Job ID"]] = [event["Submission Time"], event["Submission Time"], len(event["Stage IDs"]), site]
        elif kind == "SparkListenerJobEnd":
            jobs[event["Job ID"]][1] = event["Completion Time"]
    first = min((j[0] for j in jobs.values()), default=ended)
    lines = [f"{path.name}: session up to first job {(first - started) / 1000:.1f} s, {len(jobs)} jobs"]
    for number, (begin, end, stages, site) in sorted(jobs.items()):
        at, took = (begin - started) / 1000, (end - begin) / 1000
        lines.append(f"  job {number:3d} at {at:6.1f} s  {took:6.2f} s  {stages} stage(s)  {site}")
    if ended:
        lines.append(f"  application ended at {(ended - started) / 1000:.1f} s")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("logs", nargs="+", type=Path, help="event log files (or folders of them)")
    args = parser.parse_args(argv)
    for given in args.logs:
        for path in sorted(given.iterdir()) if given.is_dir() else [given]:
            print("\n".join(summary(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
