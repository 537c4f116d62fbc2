"""The key bounds of a chunk SELECT and the SQL around them, written once: each source only
spells its quoting and one comparison of the key with a tuple of bound values in its own SQL."""

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


def select_where(columns: str, table: str, where: Sequence[str]) -> str:
    """`SELECT columns FROM table`, with the conditions ANDed in a WHERE when there are any."""
    sql = f"SELECT {columns} FROM {table}"
    return sql + " WHERE " + " AND ".join(where) if where else sql


def key_comparison(table: str, key: Sequence[str], row: str = "", selected: Sequence[str] = ()) -> str:
    """`SELECT a > b` for two keys (parameters: a's values, then b's) as the table orders its key:
    each key goes through a UNION with the key columns, whose impossible WHERE reads no row, so its
    values take the columns' types and collations; the row comparison is then lexicographic, as
    ORDER BY is. `table` and `key` come quoted; `row`: the dialect's row constructor keyword;
    `selected`: what the UNION selects in place of each key column, named as it (default: the column)."""
    columns = ", ".join(selected or key)
    typed = f"(SELECT {columns} FROM {table} WHERE FALSE UNION ALL SELECT {', '.join(['%s'] * len(key))})"

    def values(alias: str) -> str:
        return f"{row}(" + ", ".join(f"{alias}.{k}" for k in key) + ")"

    return f"SELECT {values('a')} > {values('b')} FROM {typed} AS a, {typed} AS b"
