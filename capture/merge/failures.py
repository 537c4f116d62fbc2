"""A failed merge as one line a user can act on: Spark's errors reach Python wrapped by py4j."""

from __future__ import annotations

import sys


def error_line(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message; for Spark's (a Java
    exception, through py4j), those of its root cause, where Spark says what went wrong."""
    name, text = _spark_root_cause(exc) or (type(exc).__name__, str(exc))
    first = next((line.strip() for line in text.splitlines() if line.strip()), "").rstrip(":")
    return f"{name}: {first}" if first else name


def _spark_root_cause(exc: BaseException) -> tuple[str, str] | None:
    """(type, message) of the innermost cause of a Spark error; None for any other exception."""
    if "pyspark" not in sys.modules:  # Spark's exceptions exist only once pyspark is imported
        return None
    from py4j.protocol import Py4JJavaError
    from pyspark.errors.exceptions.captured import CapturedException

    if isinstance(exc, CapturedException):
        root = exc
        while root.cause is not None:
            root = root.cause
        return type(root).__name__, root.desc or ""
    if isinstance(exc, Py4JJavaError):
        cause = exc.java_exception
        while cause.getCause() is not None:
            cause = cause.getCause()
        return str(cause.getClass().getSimpleName()), str(cause.getMessage() or "")
    return None
