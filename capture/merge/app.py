"""The merge of a source's tables (`run_merge`) and its command line (`main`), which spark-submit
runs through capture/merge/__main__.py (`logtide merge`, the Airflow DAGs; see table.py for the
algorithm):

    spark-submit --jars <var/jars/*.jar> <site-packages>/capture/merge/__main__.py --config F --source S
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from capture.config import LogtideConfig, load_config
from capture.errors import LogtideError, MergeError, UnusableTableError
from capture.events import lsn_text
from capture.landing import LandingZone
from capture.landing.reader import Watermarks, merge_tables
from capture.log import get_logger, setup_logging
from capture.merge.failures import error_line
from capture.merge.session import (
    build_session,
    cache_jvm_functions,
    cache_jvm_lookups,
    session_conf,
    skip_local_checksums,
)
from capture.merge.table import Context, TableMerge

log = get_logger("logtide.merge")


def run_merge(
    spark: Any, config: LogtideConfig, source: str, tables: list[str] | None = None, frontier: int | None = None
) -> dict[str, Any]:
    """Merge what the source's landing zone holds up to its committed frontier (or up to an
    earlier `frontier`, as a merge that ran then would have) into Iceberg.

    Up to merge.parallel_tables tables are merged at once, each in a thread of its own whose
    Spark jobs share the one session. The first table merges alone while it is small (at most
    WARM_ROWS rows read): the JVM's cold start (classes loaded, code interpreted until compiled)
    is then paid by one thread, not by two at once, and the others run warm; a larger first
    table lets them start as soon as it is planned. One table never stops the others: a table the merge cannot
    handle (no key: UnusableTableError) is skipped, a table whose merge fails is reported as
    failed (its own commits stay as they were: each table commits alone), and the rest are
    merged; the summary lists every table in the order asked, and its `skipped` and `failed`
    (`main` exits non-zero when one failed)."""
    config.source(source)
    zone = LandingZone(config.landing.path, source)
    checkpoint = zone.checkpoint()
    began = time.monotonic()
    if checkpoint is None:
        log.info("merge.nothing_landed", source=source, landing=str(zone.root))
        return {"source": source, "frontier": None, "tables": [], "skipped": [], "failed": []}
    committed = checkpoint.frontier.encode()
    if frontier is None or frontier > committed:
        frontier = committed
    known = merge_tables(zone)
    names = tables or known
    for name in names:
        if name.count(".") < 1:
            raise MergeError(f"table {name!r} must be given as database.table")
    cache_jvm_functions()
    cache_jvm_lookups()
    skip_local_checksums(spark)
    ctx = Context(spark, config, source, zone, frontier, Watermarks(zone, frontier), datetime.now(UTC))
    workers = max(1, min(config.merge.parallel_tables, len(names)))
    log.info("merge.started", source=source, frontier=frontier, tables=len(names), parallel=workers)
    with ThreadPoolExecutor(workers, thread_name_prefix="merge") as pool:
        first = [pool.submit(_merge_named, ctx, name, known) for name in names[:1]]
        # the others start once the first is merged, or planned and large (`Context.warm`)
        while workers > 1 and first and not first[0].done() and not ctx.warm.wait(0.05):
            pass
        rest = pool.map(lambda name: _merge_named(ctx, name, known), names[1:])
        reports = [*(f.result() for f in first), *rest]
    seconds = round(time.monotonic() - began, 3)
    skipped = [r for r in reports if "fix" in r]
    failed = [r for r in reports if "failed" in r]
    log.info(
        "merge.finished",
        source=source,
        frontier=frontier,
        tables=len(reports),
        seconds=seconds,
        skipped=",".join(r["table"] for r in skipped) or "none",
        failed=",".join(r["table"] for r in failed) or "none",
    )
    return {
        "source": source,
        "frontier": lsn_text(frontier),
        "seconds": seconds,
        "tables": reports,
        "skipped": [{"table": r["table"], "reason": r["skipped"], "fix": r["fix"]} for r in skipped],
        "failed": [{k: r[k] for k in ("table", "error_type", "failed")} for r in failed],
    }


def _merge_named(ctx: Context, name: str, known: list[str]) -> dict[str, Any]:
    """One table's report, in a thread of the run's pool: its Spark jobs run in a FAIR scheduler
    pool of their own (spark.scheduler.pool, a property of the calling thread), so a large table's
    tasks do not queue every other table's behind them."""
    if name not in known:
        return {"table": name, "skipped": "nothing landed"}
    schema, _, table = name.partition(".")
    ctx.spark.sparkContext.setLocalProperty("spark.scheduler.pool", name)
    try:
        return _merge_table(ctx, schema, table)
    finally:
        ctx.spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)


def _merge_table(ctx: Context, schema: str, table: str) -> dict[str, Any]:
    """One table's report: merged, skipped (with reason and fix) or failed (with the error)."""
    merge = TableMerge(ctx, schema, table)
    try:
        return merge.run()
    except UnusableTableError as exc:
        log.warning("merge.table_skipped", table=exc.table, reason=exc.reason, fix=exc.fix)
        return {"table": merge.name, "skipped": exc.reason, "fix": exc.fix}
    except Exception as exc:  # one table's failure stops none of the others; `main` exits non-zero
        error = str(exc) if isinstance(exc, LogtideError) else error_line(exc)
        log.debug("merge.traceback", table=merge.name, exc_info=True)
        log.error(
            "merge.table_failed",
            table=merge.name,
            error_type=type(exc).__name__,
            error=error,
            action="the other tables are merged; fix the cause and rerun: the table resumes at its applied frontier",
        )
        return {"table": merge.name, "failed": error, "error_type": type(exc).__name__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Logtide: merge landed log events and dump chunks into Iceberg")
    parser.add_argument("--config", help="YAML configuration (default: $LOGTIDE_CONFIG)")
    parser.add_argument("--source", required=True)
    parser.add_argument("--table", action="append", help="database.table; repeat for several; none: all")
    parser.add_argument("--master", help="Spark master (default: spark-submit's, else merge.spark_master)")
    args = parser.parse_args(argv)
    setup_logging()
    try:
        config = load_config(args.config, require_env=False)
        setup_logging(config.log_level)
        debug = config.log_level == "DEBUG"
        if not debug:  # py4j logs the traceback of a failed commit, which `commit_with` raises again
            logging.getLogger("py4j").setLevel(logging.CRITICAL)
        config.source(args.source)
        under_submit = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit already chose the master
        master = args.master or (None if under_submit else config.merge.spark_master)
        spark = build_session(session_conf(config.merge), master, f"logtide-merge-{args.source}")
        try:
            # Spark's own log (a failed task's Java stack traces): only at DEBUG; its reason is in the error line
            spark.sparkContext.setLogLevel("WARN" if debug else "OFF")
            summary = run_merge(spark, config, args.source, args.table)
        except LogtideError:
            raise
        except Exception as exc:  # read Spark's reason while its JVM still runs
            raise MergeError(f"the merge failed: {error_line(exc)}; fix the cause and run it again") from exc
        finally:
            spark.stop()
    except Exception as exc:  # one line that says what failed and what to do; the traceback at DEBUG
        log.debug("merge.traceback", exc_info=True)
        message = str(exc) if isinstance(exc, LogtideError) else f"the merge failed: {error_line(exc)}"
        log.error("merge.failed", error_type=type(exc).__name__, error=message)
        print(f"error: {message}", file=sys.stderr)
        return 2
    # one line: under spark-submit the driver's stderr (our log) and stdout reach the same stream
    print(json.dumps(summary, default=str), flush=True)
    if summary.get("failed"):
        names = ", ".join(r["table"] for r in summary["failed"])
        log.error("merge.failed", source=args.source, failed=names, action="see merge.table_failed above")
        for failed in summary["failed"]:  # one line per table: the table, the step and Spark's reason
            print(f"error: {failed['failed']}", file=sys.stderr)
        return 1
    return 0
