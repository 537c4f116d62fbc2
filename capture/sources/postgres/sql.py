"""SQL text for PostgreSQL chunk reads, built by pure functions (tested against expected strings).

Identifiers come from the catalog and are quoted with double quotes (a quote inside a name is
doubled); every value is a bound parameter. Composite keys use a row comparison
`("a", "b") > (%s, %s)`, which PostgreSQL turns into one index range scan.
"""

from __future__ import annotations

from collections.abc import Sequence

from capture.sources.keyset import chunk_bounds, key_comparison, select_where


def quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def qualified(schema: str, table: str) -> str:
    return f"{quote(schema)}.{quote(table)}"


def _columns(columns: Sequence[str], as_text: Sequence[bool] | None) -> str:
    """The select list; `as_text[i]` casts column i to text (its output function's text)."""
    if as_text is None:
        return ", ".join(quote(c) for c in columns)
    return ", ".join(f"{quote(c)}::text" if cast else quote(c) for c, cast in zip(columns, as_text, strict=True))


def _order(schema: str, table: str, key: Sequence[str]) -> str:
    """ORDER BY the table's key columns, qualified: a bare name would mean the select list's
    `"id"::text` output column and sort as text."""
    return ", ".join(f"{qualified(schema, table)}.{quote(k)}" for k in key)


def _row(key: Sequence[str]) -> str:
    return quote(key[0]) if len(key) == 1 else "(" + ", ".join(quote(k) for k in key) + ")"


def _params(key: Sequence[str]) -> str:
    return "%s" if len(key) == 1 else "(" + ", ".join(["%s"] * len(key)) + ")"


def _typed(key: Sequence[str], types: Sequence[str]) -> str:
    """Bound text cast to each key column's type (format_type's spelling, `%` doubled for the
    driver's placeholders): `(%s::numeric(10,2), %s::integer)`."""
    casts = [f"%s::{t.replace('%', '%%')}" for t in types]
    return casts[0] if len(key) == 1 else "(" + ", ".join(casts) + ")"


def chunk_select(
    schema: str,
    table: str,
    columns: Sequence[str],
    key: Sequence[str],
    after: Sequence[object] | None,
    start: Sequence[object] | None,
    stop: Sequence[object] | None,
    limit: int,
    as_text: Sequence[bool] | None = None,
    key_types: Sequence[str] | None = None,
    after_source: Sequence[str] | None = None,
) -> tuple[str, list[object]]:
    """Next chunk in key order: key > after (exclusive), or key >= start on the first chunk
    of a range; key <= stop (inclusive) when the range has an end. With `key_types` (each key
    column's type) the select list ends with the key columns' text, and `after_source`, such
    text, is the bound in place of `after`, cast to the key's types: the next chunk goes on after
    the row's own value, which its landed value may not be (NaN lands as NULL, -infinity as
    0001-01-01)."""
    row, placeholders = _row(key), _params(key)
    typed = after_source is not None and key_types is not None
    where, params = chunk_bounds(
        None if typed else after,
        None if typed else start,
        stop,
        lambda op, values: (f"{row} {op} {placeholders}", list(values)),
    )
    select = _columns(columns, as_text)
    if key_types is not None:
        select += ", " + ", ".join(f"{quote(k)}::text" for k in key)
    if typed:
        where, params = [f"{row} > {_typed(key, key_types)}", *where], [*after_source, *params]
    sql = select_where(select, qualified(schema, table), where)
    sql += f" ORDER BY {_order(schema, table, key)} LIMIT %s"
    return sql, [*params, limit]


def key_after_select(schema: str, table: str, key: Sequence[str]) -> str:
    """`SELECT a > b` for two keys as the table orders its key (keyset.key_comparison): an untyped
    literal resolves to the column's type, and the column's collation wins over the default one."""
    return key_comparison(qualified(schema, table), [quote(k) for k in key], row="ROW")


def keys_select(
    schema: str,
    table: str,
    columns: Sequence[str],
    key: Sequence[str],
    keys: Sequence[Sequence[object]],
    as_text: Sequence[bool] | None = None,
    key_text: bool = False,
    casts: Sequence[str | None] | None = None,
) -> tuple[str, list[object]]:
    """Rows of the given keys, in key order; with `key_text` the select list ends with the key
    columns' text (as `chunk_select`'s); `casts[i]`: key column i's values are bound as text cast
    to that type (arrays: their text)."""
    one = _params(key)
    if casts is not None and any(casts):
        parts = ["%s" if t is None else f"%s::{t.replace('%', '%%')}" for t in casts]
        one = parts[0] if len(key) == 1 else "(" + ", ".join(parts) + ")"
    values = ", ".join([one] * len(keys))
    select = _columns(columns, as_text) + ("".join(f", {quote(k)}::text" for k in key) if key_text else "")
    sql = (
        f"SELECT {select} FROM {qualified(schema, table)}"
        f" WHERE {_row(key)} IN ({values}) ORDER BY {_order(schema, table, key)}"
    )
    return sql, [v for k in keys for v in k]


def duplicate_select(
    schema: str, table: str, key: Sequence[str], start: Sequence[object] | None, stop: Sequence[object] | None
) -> tuple[str, list[object]]:
    """One key value (as text) that several rows with keys in [start, stop] share (GROUP BY compares
    as the database does, collations included); no row: the key is unique there."""
    row, placeholders = _row(key), _params(key)
    where, params = chunk_bounds(None, start, stop, lambda op, values: (f"{row} {op} {placeholders}", list(values)))
    sql = select_where(", ".join(f"{quote(k)}::text" for k in key), qualified(schema, table), where)
    return sql + f" GROUP BY {', '.join(quote(k) for k in key)} HAVING count(*) > 1 LIMIT 1", params
