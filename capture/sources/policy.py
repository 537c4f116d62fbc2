"""The one shape of a `refuse|accept` setting (config `Policy`): foreign_key_cascades,
partition_changes, table_renames, column_rewrites, clamped_keys.

Each guards a change the log cannot carry (rows changed without row events; clamped_keys: key
values the landing zone holds only as another value). With `refuse` the
check raises its named error (capture/errors.py), whose message says what diverges and the ways
out; with `accept` it logs a `capture.*_accepted` warning with a reason and an action, and
capture goes on.
"""

from __future__ import annotations

from typing import Any

from capture.config import Policy
from capture.log import EventLogger


def refuse_or_warn(policy: Policy, error: Exception, log: EventLogger, event: str, **fields: Any) -> None:
    """Raise `error` when `policy` is `refuse`; otherwise log warning `event` with `fields` on the
    caller's logger `log` (so the line names the check's module)."""
    if policy == "refuse":
        raise error
    log.warning(event, **fields)
