"""Structured logging: one line per event, `event key=value ...` (logfmt).

Events are named (``checkpoint.advanced``, ``capture.started``) so tests, people and
log shippers can match them. The fields are part of the message, so any formatter (Airflow's
task log too) shows them. Row contents and passwords are never passed here.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any


def _format_value(value: Any) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' ="'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


class LogfmtFormatter(logging.Formatter):
    """Renders ``ts=... level=... logger=... event=... k=v`` lines."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line = (
            f"ts={ts}.{int(record.msecs):03d}Z level={record.levelname.lower()} logger={record.name} "
            f"event={record.getMessage()}"
        )
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


class EventLogger:
    """A logger whose calls take an event name and keyword fields."""

    def __init__(self, name: str) -> None:
        self._logger = logging.getLogger(name)

    def _log(self, level: int, event: str, exc_info: bool, fields: dict[str, Any]) -> None:
        if self._logger.isEnabledFor(level):
            text = " ".join([event, *(f"{k}={_format_value(v)}" for k, v in fields.items())])
            # the event and its fields also travel as attributes, for handlers that match on them
            self._logger.log(level, "%s", text, exc_info=exc_info, extra={"event": event, "fields": fields})

    def debug(self, event: str, exc_info: bool = False, **fields: Any) -> None:
        self._log(logging.DEBUG, event, exc_info, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._log(logging.INFO, event, False, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._log(logging.WARNING, event, False, fields)

    def error(self, event: str, exc_info: bool = False, **fields: Any) -> None:
        self._log(logging.ERROR, event, exc_info, fields)


def get_logger(name: str) -> EventLogger:
    return EventLogger(name)
