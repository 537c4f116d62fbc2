"""The dump operator (one table per task instance) and the checks a DAG runs before it.

The operator is thin: it builds a `LogtideHook` inside `execute`, turns its templated fields
into a `DumpRequest` and runs `DumpEngine`, the code `logtide dump` runs. Errors a retry
cannot fix (bad input, configuration, refused grants, a cancel) fail the task at once;
a lost database connection is left to Airflow's retries, and a retry resumes after the last
finished chunk because the dump id comes from the DAG run.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowRescheduleException
from pydantic import ValidationError

from capture.config import DumpConfig
from capture.dump.engine import DumpEngine, DumpRequest
from capture.errors import (
    DumpCancelledError,
    DumpClaimedError,
    DumpInputError,
    DumpStoppedError,
    LogtideError,
    SourceConnectionError,
)
from capture.landing import LandingZone
from capture.log import get_logger
from capture.sources.base import ChunkSource
from logtide_airflow.control import VariableControl
from logtide_airflow.hooks import LogtideHook

log = get_logger(__name__)
_DUMP_ID_MAX = 64
# build_request's keywords that a DAG run's params and the operator's fields pass on unchanged
REQUEST_FIELDS = ("keys", "key_from", "key_to", "chunk_size", "delay_s", "max_rows_per_s")


def dump_id_for_run(run_id: str, prefix: str = "") -> str:
    """A dump id (`[A-Za-z0-9_.-]`, at most 64 characters) that a DAG run always maps to the same
    way, so a retry or a cleared task resumes the run's dump. Too long: cut, plus a hash."""
    text = re.sub(r"[^A-Za-z0-9_.-]", "-", f"{prefix}{run_id}")
    if len(text) > _DUMP_ID_MAX:
        digest = hashlib.sha256(text.encode()).hexdigest()[:10]
        text = f"{text[: _DUMP_ID_MAX - 11]}-{digest}"
    return text


def build_request(
    *,
    dump_id: str,
    defaults: DumpConfig,
    tables: Sequence[str] = (),
    keys: list[Any] | None = None,
    key_from: Any = None,
    key_to: Any = None,
    chunk_size: int | None = None,
    delay_s: float | None = None,
    max_rows_per_s: float | None = None,
) -> DumpRequest:
    """A `DumpRequest` from DAG params; a setting left None takes the source's config default."""
    settings = {
        "chunk_size": defaults.chunk_size if chunk_size is None else chunk_size,
        "delay_s": defaults.delay_s if delay_s is None else delay_s,
        "max_rows_per_s": defaults.max_rows_per_s if max_rows_per_s is None else max_rows_per_s,
    }
    try:
        return DumpRequest(
            dump_id=dump_id,
            tables=list(tables or []),
            keys=keys,
            key_from=key_from,
            key_to=key_to,
            settings={k: v for k, v in settings.items() if v is not None},
        )
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'request'}: {e['msg']}" for e in exc.errors())
        raise DumpInputError(f"invalid dump request: {problems}") from None


def plan(source: ChunkSource, zone: LandingZone, request: DumpRequest) -> tuple[list[str], list[dict[str, str]]]:
    """Check the whole request against the source before anything is written (unknown tables,
    tables without a usable key, key arity and types) and return its tables as `db.table`,
    each once. Empty `request.tables` means every captured table: then the tables it cannot
    dump are skipped (logged once, `dump.table_skipped`) and returned second, with reason and fix."""
    checked = DumpEngine(source, zone).plan(request)
    names = list(dict.fromkeys(p.table.qualified_name for p in checked.tables))
    return names, [exc.as_dict() for exc in checked.skipped]


class LogtideDumpOperator(BaseOperator):
    """Dump ONE table of a Logtide source in watermark-bracketed chunks; returns the summary
    (`{"dump_id", "rows", "tables": [{"table", "chunks", "rows", "seconds", "rows_per_s",
    "missing_keys"}]}`) for XCom.

    `dump_id` defaults to one derived from the DAG run id. Settings left None take the source's
    `dump:` defaults from the config; the Variables of `logtide_airflow.control` override them
    while the dump runs.

    `queue_behind`: a dump id prefix (the backfill DAG's `backfill-`). While the table is held by
    another dump whose id has it, the task is rescheduled every `claim_poke_s` (its pool slot is
    free meanwhile) for up to `claim_wait_s`, instead of failing: an `airflow backfill create`
    starts up to 10 runs at once whatever the DAG's max_active_runs, and they then queue.
    """

    template_fields: Sequence[str] = ("source", "table", "dump_id", *REQUEST_FIELDS)
    ui_color = "#d9ecf2"

    def __init__(
        self,
        *,
        source: str,
        table: str,
        dump_id: str | None = None,
        keys: list[Any] | None = None,
        key_from: Any = None,
        key_to: Any = None,
        chunk_size: int | None = None,
        delay_s: float | None = None,
        max_rows_per_s: float | None = None,
        queue_behind: str | None = None,
        claim_wait_s: float = 6 * 3600,
        claim_poke_s: float = 20,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.queue_behind = queue_behind
        self.claim_wait_s = claim_wait_s
        self.claim_poke_s = claim_poke_s
        self.source = source
        self.table = table
        self.dump_id = dump_id
        self.keys = keys
        self.key_from = key_from
        self.key_to = key_to
        self.chunk_size = chunk_size
        self.delay_s = delay_s
        self.max_rows_per_s = max_rows_per_s
        self._control: VariableControl | None = None

    def on_kill(self) -> None:
        """Airflow terminates the task (SIGTERM, then SIGKILL 5 s later): stop before the next chunk."""
        if self._control is not None:
            self._control.stop("its task was marked failed or cleared, timed out, or its worker is stopping")

    def execute(self, context: Any) -> dict[str, Any]:
        dump_id = str(self.dump_id) if self.dump_id else dump_id_for_run(context["run_id"])
        try:
            hook = LogtideHook(str(self.source))
            request = build_request(
                dump_id=dump_id,
                defaults=hook.dump_defaults(),
                tables=[str(self.table)],
                **{name: getattr(self, name) for name in REQUEST_FIELDS},
            )
            source = hook.chunk_source()
            try:
                self._control = VariableControl(str(self.source), dump_id)
                engine = DumpEngine(source, hook.zone(), self._control, hook.config.coordination)
                return engine.run(request)
            finally:
                source.close()
        except SourceConnectionError:
            raise  # transient: Airflow retries, and the retry resumes after the last finished chunk
        except DumpStoppedError as exc:
            action = (  # a run marked failed has marked summary, landed_ and merge_ skipped: they must rerun too
                "clear this task with its downstream tasks (in the UI: Clear, Downstream; not Only failed) to "
                f"resume after the last finished chunk and run summary, landed_{self.source} and merge_{self.source}"
            )
            log.warning(
                "dump.stopped", dump_id=dump_id, source=self.source, table=self.table, reason=str(exc), action=action
            )
            raise AirflowFailException(f"{exc}; {action}") from exc
        except DumpClaimedError as exc:
            self._queue(context, dump_id, exc)
            log.error("dump.refused", dump_id=dump_id, source=self.source, table=self.table, error=str(exc))
            raise AirflowFailException(
                f"{exc}; this run can dump {self.table} after that: clear this task once it is done"
            ) from exc
        except DumpCancelledError as exc:
            raise AirflowFailException(
                f"{exc}: set the control Variable's state back to 'running' and clear this task to continue"
            ) from exc
        except LogtideError as exc:
            log.error("dump.refused", dump_id=dump_id, source=self.source, table=self.table, error=str(exc))
            raise AirflowFailException(str(exc)) from exc

    def _queue(self, context: Any, dump_id: str, exc: DumpClaimedError) -> None:
        """Reschedule the task while another dump of `queue_behind` holds the table, up to
        `claim_wait_s` after the first refusal; past it (or another holder) return: it fails."""
        prefix, holder = self.queue_behind, exc.holder
        if not prefix or not holder or holder == dump_id or not holder.startswith(prefix):
            return
        now = datetime.now(UTC)
        waited = (now - (context["ti"].get_first_reschedule_date(context) or now)).total_seconds()
        if waited >= self.claim_wait_s:
            raise AirflowFailException(
                f"{exc}; this run waited {waited:.0f} s for dump {holder} (claim_wait_s {self.claim_wait_s:.0f}): "
                f"clear this task once it is done"
            ) from exc
        log.info(
            "dump.claim_queued", dump_id=dump_id, table=self.table, holder=holder, waited_s=round(waited),
            next_try_s=self.claim_poke_s,
        )  # fmt: skip
        raise AirflowRescheduleException(now + timedelta(seconds=self.claim_poke_s)) from exc
