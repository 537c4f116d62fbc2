"""Builds the merge steps of the Airflow DAGs.

`logtide_merge` (on demand with params, and on the config's `merge.schedule`), for each source of
the configuration:

    plan_<source>  ->  merge_<source> (LogtideMergeOperator: spark-submit of capture/merge/__main__.py)

`plan_<source>` fails the run on a conf key that is no param, skips unless the run's `source`
param is null (every source) or names its source, and checks the `tables` param against the
landing zone (a table with nothing landed is refused with the tables that are there); empty
`tables`: every table that landed. A source with nothing landed at all fails the run when it is
named (is capture running?), and is skipped with that warning when every source is merged.

The dump DAGs (`dag_factory.build_dump_dag`) end with, per source:

    dump_<source>  ->  landed_<source>  ->  merge_<source>

`landed_<source>` waits (up to `merge.landed_timeout_s`) until capture has committed the HIGH
watermark of the last chunk of every dumped table, then the merge runs for just those tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import DAG, Param, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from capture.errors import LogtideError
from capture.landing import LandingZone
from capture.log import get_logger
from logtide_airflow.conf import refuse_unknown_conf
from logtide_airflow.merge import (
    LogtideMergeOperator,
    capture_stopped,
    check_tables,
    merge_config,
    wait_for_high_watermarks,
)

log = get_logger(__name__)


def merge_params(sources: Sequence[str]) -> dict[str, Param]:
    """The trigger form of `logtide_merge`; scheduled runs take the defaults (every source, every table)."""
    return {
        "source": Param(
            None,
            type=["null", "string"],
            enum=[None, *sources],
            description="Logtide source to merge (a name under `sources:`); null: every source",
        ),
        "tables": Param(
            [],
            type=["null", "array"],
            items={"type": "string", "pattern": r"^[^.\s]+\.[^.\s]+$"},
            uniqueItems=True,
            description="Tables as 'database.table' (needs a source); empty: every table that landed",
        ),
    }


def build_merge_dag(dag_id: str, sources: Sequence[str], *, schedule: str | None = None) -> DAG:
    sources = list(sources)
    params = merge_params(sources)
    with DAG(
        dag_id=dag_id,
        description="Logtide: merge the landing zone (log events, dump chunks) into Apache Iceberg with Spark",
        schedule=schedule,
        start_date=datetime(2024, 1, 1, tzinfo=UTC),
        catchup=False,
        max_active_runs=1,  # two merges of one source at once would both append to its changelog
        params=params,
        default_args={"retries": 1, "retry_delay": timedelta(seconds=60)},
        tags=["logtide"],
        doc_md=__doc__,
    ) as dag:
        for source in sources:
            planned = _plan_task(dag_id, list(params), source, len(sources))()
            LogtideMergeOperator(task_id=f"merge_{source}", source=source, tables=planned)
    return dag


def _plan_task(dag_id: str, known: list[str], source: str, source_count: int) -> Any:
    @task(task_id=f"plan_{source}")
    def plan_merge(params: dict[str, Any] | None = None, dag_run: Any = None) -> list[str]:
        assert params is not None
        refuse_unknown_conf(dag_id, dag_run.conf if dag_run is not None else None, known)
        chosen, tables = params["source"], list(params["tables"] or [])
        if chosen is not None and chosen != source:
            raise AirflowSkipException(f"this run merges source {chosen!r}")
        try:
            if tables and chosen is None and source_count > 1:
                raise LogtideError("tables need a source: set the param source to the tables' source")
            _, config = merge_config()
            zone = LandingZone(config.landing.path, source)
            names = check_tables(zone, tables)
            nothing = (
                f"nothing of source {source} has landed in {zone.root} yet: is `logtide capture --source {source}` "
                "running, and has a captured table changed since it started?"
            )
            if not names and chosen is not None:  # asked for this source: a run that merges nothing is no success
                raise LogtideError(f"{nothing} (nothing was merged)")
        except LogtideError as exc:
            log.error("merge.refused", source=source, error=str(exc))
            raise AirflowFailException(str(exc)) from exc
        if not names:  # every source (a scheduled run): the others may have landed
            log.warning("merge.nothing_landed", source=source, reason=nothing)
            raise AirflowSkipException(nothing)
        log.info("merge.planned", source=source, tables=",".join(names))
        return names

    return plan_merge


def add_dump_merge(source: str, planned: Any, dump: Any) -> Any:
    """`landed_<source>` (after `dump`) and `merge_<source>` for the tables `planned` handed to the dump."""

    @task(task_id=f"landed_{source}")
    def landed(planned: list[dict[str, Any]], params: dict[str, Any] | None = None) -> list[str]:
        assert params is not None
        if not params.get("merge", True):
            raise AirflowSkipException("this run does not merge (param merge is false)")
        tables = list(dict.fromkeys(p["table"] for p in planned))
        if not tables:
            raise AirflowSkipException("the dump had no tables")
        dump_id = planned[0]["dump_id"]
        try:
            _, config = merge_config()
            zone = LandingZone(config.landing.path, source)
            timeout = config.merge.landed_timeout_s
            wait_for_high_watermarks(zone, dump_id, tables, timeout, stopped=lambda: capture_stopped(config, zone))
        except LogtideError as exc:
            log.error("merge.not_landed", source=source, dump_id=dump_id, error=str(exc))
            raise AirflowFailException(str(exc)) from exc
        return tables

    waited = landed(planned)
    dump >> waited
    return LogtideMergeOperator(task_id=f"merge_{source}", source=source, tables=waited)
