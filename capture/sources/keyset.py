"""The key bounds of a chunk SELECT, written once: each source only spells one comparison of
the key with a tuple of bound values in its own SQL."""

from __future__ import annotations

from collections.abc import Callable, Sequence

# (operator, key values) -> (SQL condition, its parameters)
Compare = Callable[[str, Sequence[object]], tuple[str, list[object]]]


def chunk_bounds(
    after: Sequence[object] | None,
    start: Sequence[object] | None,
    stop: Sequence[object] | None,
    compare: Compare,
) -> tuple[list[str], list[object]]:
    """key > after (exclusive), or key >= start on the first chunk of a range; key <= stop
    (inclusive) when the range has an end. Returns the conditions to AND and their parameters."""
    where: list[str] = []
    params: list[object] = []
    lower = (">", after) if after is not None else (">=", start)
    for op, values in (lower, ("<=", stop)):
        if values is not None:
            condition, values_params = compare(op, values)
            where.append(condition)
            params += values_params
    return where, params
