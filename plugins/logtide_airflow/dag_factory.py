"""Builds the dump DAGs: `logtide_dump` (manual, with params) and `logtide_backfill_<source>`
(scheduled). Both have the same graph, for each source of the configuration:

    plan_<source>  ->  dump_<source> (mapped: one task instance per table, pool logtide_<source>)  ->  summary
                                        dump_<source>  ->  landed_<source>  ->  merge_<source>

- `plan_<source>` first fails the run on a conf key that is no param (`conf.refuse_unknown_conf`),
  then skips unless the run's `source` param names its source. It checks the whole request
  against the source (unknown tables, tables without a usable key, key arity and type, keys for
  more than one table, a key range whose start comes after its end) before any watermark is
  written, names the dump after the DAG run (so a retry or a cleared task resumes it), and
  returns the operator arguments of each table: the checked request, passed on as data (no
  templates, which would turn the string key "100" into a number). With no tables named, the
  captured tables a dump cannot handle (no usable key, ...) are skipped, logged once
  (`dump.table_skipped`, reason and fix) and listed by `summary`; the others are dumped.
- `dump_<source>` runs `LogtideDumpOperator` (`expand_kwargs`), one table per task instance.
- `summary` logs one line with the totals and returns them for XCom.
- Then, unless the param `merge` is false: `landed_<source>` waits until capture has landed the
  HIGH watermark of each dumped table's last chunk, and `merge_<source>` merges those tables into
  Iceberg (`merge_dag.add_dump_merge`).

Why a plan/dump pair per source: an Airflow task's pool is fixed when the DAG file is parsed
(a task instance takes it from its task when it is created), but the source is a param chosen
when the run is triggered. So every source gets its own pair in its own pool
`logtide_<source>`, and only the chosen source's pair runs; the others are skipped. Pools are
shared by all DAGs, so a manual dump and a backfill of the same source together never dump
more tables at once than the pool has slots (the config's `dump.pool_slots`). The pool must
exist before a run: a task in a missing pool is never started.

The DAG files read the configuration at parse time from $LOGTIDE_CONFIG only (a local file:
no database or network at a DAG file's top level); tasks read it again at run time (`hooks`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, TriggerRule, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from capture.config import CONFIG_ENV, LogtideConfig, load_config
from capture.errors import DumpInputError, LogtideError, SourceConnectionError
from capture.log import get_logger
from logtide_airflow.conf import refuse_unknown_conf
from logtide_airflow.control import control_variable
from logtide_airflow.hooks import LogtideHook
from logtide_airflow.merge_dag import add_dump_merge
from logtide_airflow.operators import REQUEST_FIELDS, LogtideDumpOperator, build_request, dump_id_for_run, plan

log = get_logger(__name__)

# A key: a scalar, or a list of scalars for a composite key. Written as one schema with a `type`
# list (not anyOf), because the trigger form picks its input by `type`: a list of several types
# gets a text box that reads JSON (`100`, `[100, "a"]`) and keeps other text as a string.
# Numbers are bounded to what Airflow's task runner can pass on: it encodes the run's conf with
# msgpack, which refuses integers outside [-2**63, 2**64 - 1]; such a key was accepted here and then
# no task of the run could start (an OverflowError in the scheduler's log only). A larger integer
# key is written as a string ("123456789012345678901"), which integer and decimal columns accept.
_BOUNDS = {"minimum": -(2**63), "maximum": 2**64 - 1}
_SCALARS = ["integer", "number", "string"]
_KEY = {"type": [*_SCALARS, "array"], "minItems": 1, **_BOUNDS, "items": {"type": _SCALARS, **_BOUNDS}}


def _key_bound(description: str) -> Param:
    """The `key_from` / `key_to` parameter: a key value, a list of them for a composite key, or none."""
    return Param(
        None, type=["null", *_KEY["type"]], minItems=1, **_BOUNDS, items=_KEY["items"], description=description
    )


def pool_name(source: str) -> str:
    return f"logtide_{source}"


def parse_time_config(dag_file: str) -> LogtideConfig | None:
    """The configuration named by $LOGTIDE_CONFIG, for building DAGs; None (logged) when there is none.

    `${VAR}`s need not be set here: parsing never connects to a database.
    """
    path = os.environ.get(CONFIG_ENV)
    if not path:
        log.warning(
            "airflow.no_config",
            dag_file=dag_file,
            reason=f"{CONFIG_ENV} is not set in the DAG processor's environment",
            action=f"set {CONFIG_ENV} to the Logtide config file; no DAGs are defined until then",
        )
        return None
    if not Path(path).is_file():
        log.warning(
            "airflow.no_config",
            dag_file=dag_file,
            reason=f"{CONFIG_ENV}={path} is not a file",
            action="point it at the Logtide config file; no DAGs are defined until then",
        )
        return None
    return load_config(path, require_env=False)  # an invalid file is an import error, shown in the UI


def dump_params(sources: Sequence[str], source_default: str | None = None, tables: Sequence[str] = ()) -> dict:
    """The trigger form. Types and ranges are checked when a run is triggered. A configuration
    with one source has it preselected; with several the form asks which."""
    sources = list(sources)
    if source_default is None and len(sources) == 1:
        source_default = sources[0]
    source = {"type": "string", "enum": sources, "description": "Logtide source (a name under `sources:`)"}
    return {
        "source": Param(**source) if source_default is None else Param(source_default, **source),
        "tables": Param(
            list(tables),
            type=["null", "array"],
            items={"type": "string", "pattern": r"^[^.\s]+\.[^.\s]+$"},
            uniqueItems=True,
            description="Tables as database.table, one per line; empty: every captured table",
        ),
        "keys": Param(
            None,
            type=["null", "array"],
            minItems=1,
            items=_KEY,
            description='Primary keys to dump, one table only, as a JSON list: [17, 42], ["a1", "b7"], or '
            '[[1, "a"], [2, "b"]] for a composite key; an integer past 64 bits as a string: ["123456789012345678901"]; '
            "keys not found are reported and deleted from the target by the merge",
        ),
        "key_from": _key_bound(
            'Key range start, inclusive (one table only): 100, "abc", or [100, "a"] for a composite key; '
            "JSON, other text is taken as a string"
        ),
        "key_to": _key_bound("Key range end, inclusive, written as key_from; it must not come before key_from"),
        "chunk_size": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            maximum=1_000_000,
            description="Rows per chunk; empty: the source's dump.chunk_size",
        ),
        "delay_s": Param(
            None,
            type=["null", "number"],
            minimum=0,
            maximum=3600,
            description="Seconds to wait between chunks; empty: the source's dump.delay_s",
        ),
        "max_rows_per_s": Param(
            None,
            type=["null", "number"],
            exclusiveMinimum=0,
            description="Rows/s ceiling; empty: the source's dump.max_rows_per_s (none by default)",
        ),
        "merge": Param(
            True,
            type="boolean",
            description="Then merge the dumped tables into Iceberg (once capture has landed the dump's last chunks)",
        ),
    }


def plan_source_dump(source: str, dump_id: str, params: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict]]:
    """The plan task of one source: the tables to dump (each with LogtideDumpOperator's arguments)
    and those skipped. A refusal fails the task for good; a lost connection is retried."""
    try:
        hook = LogtideHook(source)
        request = build_request(
            dump_id=dump_id,
            defaults=hook.dump_defaults(),
            tables=params["tables"],
            **{name: params[name] for name in REQUEST_FIELDS},
        )
        chunk_source = hook.chunk_source()
        try:
            tables, skipped = plan(chunk_source, hook.zone(), request)
        finally:
            chunk_source.close()
    except SourceConnectionError:
        raise  # transient: retried
    except LogtideError as exc:
        action = (
            "nothing was written; correct the params and trigger a new run"
            if isinstance(exc, DumpInputError)
            else "nothing was written; fix the cause and clear this task"
        )
        log.error("dump.refused", dump_id=dump_id, source=source, error=str(exc), action=action)
        raise AirflowFailException(f"{exc} ({action})") from exc
    log.info(
        "dump.planned",
        dump_id=dump_id,
        source=source,
        tables=",".join(tables),
        pool=pool_name(source),
        control=f"Variables {control_variable(source)} / {control_variable(dump_id)}",
        skipped=",".join(s["table"] for s in skipped) or "none",
    )
    handoff = {
        "dump_id": dump_id,
        "keys": params["keys"],
        "key_from": params["key_from"],
        "key_to": params["key_to"],
        **request.settings.model_dump(include={"chunk_size", "delay_s", "max_rows_per_s"}),
    }
    return [{"table": table, **handoff} for table in tables], skipped


def dump_summary(dump_id: str, source: str, results: list[dict], skipped: list[dict]) -> dict[str, Any]:
    """The summary task's report: totals over the dump tasks' results, per table, and the skipped tables."""
    per_table = [t for r in results for t in r["tables"]]
    totals = {
        "dump_id": dump_id,
        "source": source,
        "tables": len(per_table),
        "chunks": sum(t["chunks"] for t in per_table),
        "rows": sum(t["rows"] for t in per_table),
        "missing_keys": sum(t["missing_keys"] for t in per_table),
        "per_table": sorted(per_table, key=lambda t: t["table"]),
        "skipped": skipped,
    }
    for t in totals["per_table"]:
        log.info("dump.table_summary", dump_id=dump_id, **t)
    log.info(
        "dump.summary",
        **{k: v for k, v in totals.items() if k not in ("per_table", "skipped")},
        skipped=",".join(t["table"] for t in skipped) or "none",
    )
    return totals


def build_dump_dag(
    dag_id: str,
    sources: Sequence[str],
    *,
    schedule: str | None = None,
    source_default: str | None = None,
    tables: Sequence[str] = (),
    dump_id_prefix: str = "",
    description: str = "Logtide watermark dump (DBLog)",
) -> DAG:
    """Per source: plan (skipped unless the run's `source` is it) -> the mapped dump tasks (one per
    table, in the source's pool) -> the merge after the dump; then one summary of the run."""
    sources = list(sources)
    dump_task_ids = [f"dump_{s}" for s in sources]
    params = dump_params(sources, source_default, tables)
    known = list(params)

    with DAG(
        dag_id=dag_id,
        description=description,
        schedule=schedule,
        start_date=datetime(2024, 1, 1, tzinfo=UTC),
        catchup=False,
        params=params,
        default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
        tags=["logtide"],
        doc_md=__doc__,
    ) as dag:

        def plan_for(source: str) -> Any:
            @task(task_id=f"plan_{source}")
            def plan_dump(
                params: dict[str, Any] | None = None,
                run_id: str | None = None,
                dag_run: Any = None,
                ti: Any = None,
            ) -> list[dict]:
                assert params is not None and run_id is not None
                refuse_unknown_conf(dag_id, dag_run.conf if dag_run is not None else None, known)
                if params["source"] != source:
                    raise AirflowSkipException(f"this run dumps source {params['source']!r}")
                planned, skipped = plan_source_dump(source, dump_id_for_run(run_id, dump_id_prefix), params)
                ti.xcom_push(key="skipped", value=skipped)  # for the summary
                return planned

            return plan_dump()

        dumps = []
        for source, task_id in zip(sources, dump_task_ids, strict=True):
            planned = plan_for(source)
            dump = LogtideDumpOperator.partial(
                task_id=task_id,
                pool=pool_name(source),
                source=source,
                map_index_template="{{ task.table }}",
                queue_behind=dump_id_prefix or None,  # the backfill DAG: its runs queue, not fail
            ).expand_kwargs(planned)
            dumps.append(dump)
            add_dump_merge(source, planned, dump)

        @task(task_id="summary", trigger_rule=TriggerRule.NONE_FAILED, multiple_outputs=False)
        def summarize(params: dict[str, Any] | None = None, run_id: str | None = None, ti: Any = None) -> dict:
            assert params is not None and run_id is not None
            results = [r for r in ti.xcom_pull(task_ids=dump_task_ids) or [] if r]
            plans = [f"plan_{s}" for s in sources]
            skipped = [t for r in ti.xcom_pull(task_ids=plans, key="skipped") or [] if r for t in r]
            return dump_summary(dump_id_for_run(run_id, dump_id_prefix), params["source"], results, skipped)

        dumps >> summarize()
    return dag
