"""The Spark merge under Airflow: the operator, the Iceberg Assets it updates, and the wait
that lets a dump's merge see the dump's last chunks.

- `LogtideMergeOperator` is the Spark provider's `SparkSubmitOperator` running
  capture/merge/__main__.py with the application arguments, jars and Spark settings that
  `capture.merge_submit` builds (the same as `logtide merge`). The master is the Airflow
  connection `spark_default` when it exists, else the config's `merge.spark_master`.
- Assets: each target table is the Asset `iceberg://<catalog_name>/<namespace>/<db>__<table>`.
  Which tables a source has is only known when the merge runs (the config holds patterns), so
  the operator's outlet is the AssetAlias `logtide_iceberg_<source>`, through which it emits
  one event per table the merge committed to; a DAG scheduled on the Asset runs after it.
- `wait_for_high_watermarks`: the merge reads only what the landing zone has committed. A chunk
  is reconciled once its HIGH watermark is below the committed frontier, so a merge started the
  moment a dump ends would miss the dump's last chunks until the next merge. The dump DAGs
  therefore wait until capture has landed the HIGH watermark of every table's last chunk (a
  read-only chunk's HIGH is in its HIGH file: until the frontier is past it; README, Read-only
  watermarks).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, AssetAlias, BaseHook
from airflow.sdk.exceptions import AirflowFailException, AirflowNotFoundException, AirflowSkipException

from capture.config import LogtideConfig, MergeConfig, load_config
from capture.errors import LandingTimeoutError, LogtideError
from capture.events import lsn_text
from capture.landing import LandingZone
from capture.landing.chunks import ChunkMeta, read_chunk_meta
from capture.landing.reader import Watermarks, Window, chunk_window, dump_chunk_files, merge_tables
from capture.log import get_logger
from capture.merge.target import target_of
from capture.merge_submit import APPLICATION, build_merge_submit, merge_lock
from capture.status import capture_running, capture_state
from logtide_airflow.hooks import config_path

log = get_logger(__name__)

SPARK_CONNECTION = "spark_default"


def merge_config() -> tuple[str, LogtideConfig]:
    """The config file tasks read, loaded without the sources' secrets: the merge never connects to them."""
    path = config_path()
    return path, load_config(path, require_env=False)


# -- Assets ---------------------------------------------------------------------------------------


def table_asset_uri(merge: MergeConfig, source: str, table: str) -> str:
    """`iceberg://<catalog_name>/<namespace>/<db>__<table>`: the target table `merge` writes for `table`."""
    schema, _, name = table.partition(".")
    target = target_of(merge, source, schema, name)
    return "iceberg://" + "/".join(quote(p, safe="") for p in (target.catalog, target.namespace, target.name))


def table_asset(merge: MergeConfig, source: str, table: str) -> Asset:
    return Asset(table_asset_uri(merge, source, table))


def merge_alias(source: str) -> AssetAlias:
    """The outlet of a source's merge tasks; the Assets of the tables each run merged are attached to it."""
    return AssetAlias(f"logtide_iceberg_{source}")


# -- what the landing zone holds -------------------------------------------------------------------


def last_chunks(zone: LandingZone, dump_id: str, tables: Sequence[str]) -> dict[str, tuple[Path, ChunkMeta]]:
    """The file and metadata of the last chunk of each table of a finished dump."""
    found = {}
    for name in tables:
        schema, _, table = name.partition(".")
        files = dump_chunk_files(zone, dump_id, schema, table)
        if not files:
            raise LandingTimeoutError(f"dump {dump_id} wrote no chunk of {name} in {zone.root / 'chunks'}")
        found[name] = (files[-1], read_chunk_meta(files[-1]))  # named <chunk:08d>.parquet: the last sorts last
    return found


# cheap: /proc/locks and the small heartbeat file (watched for up to two beats only when this host's clock
# and the writer's disagree, or capture has stopped: capture.coordination.local.heartbeat)
CAPTURE_CHECK_EVERY_S = 2.0


def capture_stopped(config: LogtideConfig, zone: LandingZone) -> str | None:
    """Why capture of the zone's source is stopped, or None while it may run (`capture_running`:
    its lease held, or with the local lease its lock visible here or its heartbeat fresh)."""
    running, reason = capture_running(config, zone.source, zone)
    if running is not False:
        return None
    checkpoint = zone.checkpoint()
    at = checkpoint.updated_at.isoformat() if checkpoint else None
    written = f"its last checkpoint was written at {at}" if at else "no checkpoint"
    return f"capture for source {zone.source} is not running ({reason}; {written})"


def log_landing(config: LogtideConfig, zone: LandingZone) -> dict[str, Any]:
    """Log how far the landing zone reaches (what a merge can bring to the targets) and, prominently,
    when capture is not running: such a merge is stale from the last landed commit on."""
    state = capture_state(config, zone.source, zone)
    log.info("merge.landing", **{k: v for k, v in state.items() if k != "reason"}, capture=state["reason"])
    if state["running"] is False:
        log.warning(
            "merge.capture_stopped",
            source=zone.source,
            reason=state["reason"],
            merged_up_to=state["last_commit_at"],
            lag_s=state["since_last_commit_s"],
            action=f"this merge brings the targets only up to the last landed commit; changes made in the source "
            f"since are not merged: start `logtide capture --source {zone.source}`, then merge again",
        )
    return state


def wait_for_high_watermarks(
    zone: LandingZone,
    dump_id: str,
    tables: Sequence[str],
    timeout_s: float,
    poll_s: float = 0.5,
    stopped: Callable[[], str | None] = lambda: None,
) -> dict[str, dict[str, Any]]:
    """Wait until the committed frontier is past the HIGH watermark of each table's last chunk of
    `dump_id`; return per table its last chunk, that watermark's LSN and the frontier seen. Fails
    at once (not after `timeout_s`) when `stopped` gives a reason: capture is not running."""
    chunks = last_chunks(zone, dump_id, tables)
    marks = Watermarks(zone)  # follows the checkpoint; reads each committed file once
    windows: dict[str, Window] = {}
    began = time.monotonic()
    next_check = began
    while True:
        marks.refresh()
        for name, (path, meta) in chunks.items():
            if name not in windows and (window := chunk_window(marks, path, meta)) is not None:
                windows[name] = window
        waiting = [name for name in chunks if name not in windows]
        if not waiting:
            break
        name, now = waiting[0], time.monotonic()
        meta = chunks[name][1]
        missing = f"HIGH watermark {meta.high_id} of {name} (chunk {meta.chunk} of dump {dump_id})"
        clear = (
            f"clear this task with its downstream tasks (in the UI: Clear, Downstream) so that merge_{zone.source} "
            "runs again too; clearing this task alone leaves the merge upstream_failed and the run failed"
        )
        if now >= next_check:
            next_check = now + CAPTURE_CHECK_EVERY_S
            if (reason := stopped()) is not None:
                raise LandingTimeoutError(
                    f"{reason}: {missing} has not landed (committed frontier {marks.frontier}), so the dump "
                    f"cannot be merged and nothing was merged. Start `logtide capture --source {zone.source}`, "
                    f"then {clear}"
                )
        if now - began >= timeout_s:
            raise LandingTimeoutError(
                f"capture for source {zone.source} has not landed {missing} in {timeout_s:.0f} s (committed "
                f"frontier {marks.frontier}): is `logtide capture --source {zone.source}` running? Start it, then "
                f"{clear} (merge.landed_timeout_s sets the wait)"
            )
        time.sleep(poll_s)
    waited = round(time.monotonic() - began, 3)
    result = {
        name: {"chunk": meta.chunk, "high_lsn": lsn_text(windows[name].high), "frontier": lsn_text(marks.frontier)}
        for name, (_, meta) in chunks.items()
    }
    for name, seen in result.items():
        log.info("merge.dump_landed", source=zone.source, dump_id=dump_id, table=name, waited_s=waited, **seen)
    return result


def check_tables(zone: LandingZone, tables: Sequence[str]) -> list[str]:
    """The tables a merge run asks for, checked against the landing zone; none: every table that landed."""
    landed = merge_tables(zone)
    for name in tables:
        if name not in landed:
            raise LogtideError(
                f"table {name} has nothing in the landing zone of source {zone.source} ({zone.root}): it is not "
                f"captured, or nothing of it has landed yet; tables there: {', '.join(landed) or 'none'}"
            )
    return list(dict.fromkeys(tables)) if tables else landed


# -- the operator ------------------------------------------------------------------------------------


def _spark_connection_exists(conn_id: str) -> bool:
    try:
        BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return False
    return True


class LogtideMergeOperator(SparkSubmitOperator):
    """Merge `tables` of `source` into Iceberg: spark-submit of capture/merge/__main__.py.

    `tables` (templated, or an upstream task's output) is a list of `db.table`; None merges
    every table with landed data, an empty list skips. Returns the merge's JSON report and
    emits an Asset event per table it committed to (through the AssetAlias of the source).
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "source", "tables")
    ui_color = "#e8dff5"

    def __init__(self, *, source: str, tables: Any = None, conn_id: str = SPARK_CONNECTION, **kwargs: Any) -> None:
        kwargs.setdefault("name", f"logtide-merge-{source}")
        kwargs.setdefault("outlets", [merge_alias(source)])
        super().__init__(application=str(APPLICATION), conn_id=conn_id, **kwargs)
        self.source = source
        self.tables = tables
        self._fallback_master: str | None = None
        self._lines: list[str] = []

    def execute(self, context: Any) -> dict[str, Any]:
        try:
            path, config = merge_config()
            zone = LandingZone(config.landing.path, str(self.source))
            log_landing(config, zone)
            tables = check_tables(zone, []) if self.tables is None else list(self.tables)
            if not tables:
                raise AirflowSkipException(f"nothing to merge for source {self.source}")
            submit = build_merge_submit(config, str(self.source), tables, config_path=path)
        except LogtideError as exc:
            log.error("merge.refused", source=self.source, error=str(exc))
            raise AirflowFailException(str(exc)) from exc
        self.application = submit.application
        self.application_args = submit.application_args
        self.jars = ",".join(submit.jars) or None
        self.packages = submit.packages
        self.conf = {**submit.conf, **(self.conf or {})}
        # the hook finds spark-submit on PATH: put this Python's (pyspark's) first
        bin_dir = str(Path(sys.executable).parent)
        path_var = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
        self.env_vars = {**submit.env, "PATH": path_var, **(self.env_vars or {})}
        has_connection = _spark_connection_exists(self._conn_id)
        self._fallback_master = None if has_connection else submit.master
        log.info(
            "merge.submit",
            source=self.source,
            tables=",".join(tables),
            master=f"connection {self._conn_id}" if has_connection else f"{submit.master} (merge.spark_master)",
            app=submit.application,
        )
        with merge_lock(config, str(self.source)):
            super().execute(context)
        summary = self._summary()
        self._emit_assets(context, config.merge, tables, summary)
        return summary or {"source": self.source, "tables": [{"table": t} for t in tables], "report_seen": False}

    def _get_hook(self) -> SparkSubmitHook:
        hook = super()._get_hook()
        if self._fallback_master is not None:  # no spark_default connection: the config's master, not yarn
            master = self._fallback_master
            hook._connection["master"] = master
            hook._is_yarn = "yarn" in master
            hook._is_kubernetes = "k8s" in master
            hook._should_track_driver_status = hook._resolve_should_track_driver_status()
        process_log = hook._process_spark_submit_log

        def keep_lines(lines: Iterator[Any]) -> None:
            def tee() -> Iterator[Any]:
                for line in lines:
                    if line.startswith("{"):  # candidates for the report line; the hook logs every line
                        self._lines.append(line.strip())
                    yield line

            process_log(tee())

        hook._process_spark_submit_log = keep_lines  # type: ignore[method-assign]
        return hook

    def _summary(self) -> dict[str, Any] | None:
        """The JSON line the merge (capture/merge/app.py) prints at the end (client mode: the driver's stdout)."""
        for line in reversed(self._lines):
            if line.startswith("{"):
                try:
                    data = json.loads(line)
                except ValueError:
                    continue
                if isinstance(data, dict) and "tables" in data and data.get("source") == self.source:
                    return data
        return None

    def _emit_assets(self, context: Any, merge: MergeConfig, tables: list[str], summary: dict[str, Any] | None) -> None:
        alias = context["outlet_events"][merge_alias(str(self.source))]
        if summary is None:  # e.g. cluster deploy mode: the report stays with the driver
            reports = [{"table": t} for t in tables]
        else:
            reports = [r for r in summary.get("tables", []) if "skipped" not in r]
        for report in reports:
            extra: dict[str, Any] = {"source": str(self.source), "table": report["table"]}
            if report.get("frontier") is not None:
                extra["frontier"] = lsn_text(int(report["frontier"]))  # past 2**64: text, as the report has it
            for key in ("added_records", "deleted_records", "total_records"):
                if key in report:
                    extra[key] = int(report[key])
            uri = table_asset_uri(merge, str(self.source), report["table"])
            alias.add(Asset(uri), extra=extra)
            log.info("merge.asset_event", asset=uri, **extra)
