"""A DAG run's conf checked against the DAG's params before anything runs.

Airflow validates the params a DAG declares but passes any other key of a run's conf through
without a word, so a typo (`"chunksize": 5`) would run a full dump at the default chunk size.
The first task of each Logtide DAG calls `refuse_unknown_conf`, which fails the run at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from capture.log import get_logger

log = get_logger(__name__)


def refuse_unknown_conf(dag_id: str, conf: Mapping[str, Any] | None, known: Iterable[str]) -> None:
    """Fail the task (no retries) when the run's conf has a key that is not one of the params."""
    known = list(known)
    unknown = sorted(set(conf or {}) - set(known))
    if unknown:
        message = (
            f"unknown param(s) in the run's conf: {', '.join(unknown)}; the params of {dag_id} are "
            f"{', '.join(known)} (nothing was run)"
        )
        log.error(
            "airflow.conf_refused", dag_id=dag_id, unknown=",".join(unknown), known=",".join(known), error=message
        )
        raise AirflowFailException(message)
