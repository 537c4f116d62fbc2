"""SQL text for chunk reads, built by pure functions (tested against expected strings).

Identifiers come from the catalog and are quoted with backticks (a backtick inside a name
is doubled, MySQL's rule); every value is a bound parameter. Composite keys use the expanded
form `(a > %s) OR (a = %s AND b > %s)`, which MySQL optimises into a range scan, unlike row
constructors.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from capture.sources.keyset import chunk_bounds, key_comparison, select_where
from capture.sources.mysql.types import ENUM_ERROR_VALUE


def quote(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"


def qualified(schema: str, table: str) -> str:
    return f"{quote(schema)}.{quote(table)}"


def _number(column: str, wide: Collection[str]) -> str:
    """A key column as compared with a bound: a SET of 64 members (`wide`) by its number read unsigned.
    The server compares such a column with a number as signed (its 64th member makes it negative)
    while ORDER BY sorts it unsigned, so `s > 2` left out every value with the 64th member. (A SET key
    is scanned from the index's start for any such comparison anyway: the CAST costs no index use.)"""
    return f"CAST({quote(column)} AS UNSIGNED)" if column in wide else quote(column)


def _compare(key: Sequence[str], op: str, wide: Collection[str] = ()) -> str:
    """Lexicographic `key op (params)` for op in >, >=, <, <= as OR of AND terms (`wide`: `_number`)."""
    strict, inclusive = op[0], len(op) == 2
    terms = []
    for i, column in enumerate(key):
        equal = [f"{_number(k, wide)} = %s" for k in key[:i]]
        last = i == len(key) - 1
        cmp = op if (last and inclusive) else strict
        terms.append(" AND ".join([*equal, f"{_number(column, wide)} {cmp} %s"]))
    return " OR ".join(f"({t})" for t in terms)


def _params(key_values: Sequence[object]) -> list[object]:
    """Parameters for `_compare`: term i uses values[0..i]."""
    params: list[object] = []
    for i in range(len(key_values)):
        params.extend(key_values[: i + 1])
    return params


def _set_text(column: str, position: int) -> str:
    """A SET column whose member at 1-based `position` is '' as `types.SET_EMPTY_MEMBER_ALONE` spells it:
    the server leaves that member's ',' out where no member before it is in the value ({'', b} reads
    'b', {''} reads ''), so there a ',' goes first ({''} as ',')."""
    bit, before = 1 << (position - 1), (1 << (position - 1)) - 1
    test = f"({quote(column)} & {bit}) <> 0" + (f" AND ({quote(column)} & {before}) = 0" if before else "")
    return f"IF({test}, CONCAT(',', {quote(column)}), {quote(column)})"


def select_list(
    columns: Sequence[str], floats: Collection[str] = (), enums: Collection[str] = (), sets: Mapping[str, int] = {}
) -> str:
    """The SELECT's columns; a FLOAT as DOUBLE: the text protocol prints a FLOAT with six significant
    digits (887753.375 as 887753), a DOUBLE with all it needs to be read back exactly; an ENUM's
    error value (number 0, shown as '' like a real '' member) as `types.ENUM_ERROR_VALUE`; `sets`: the
    SET columns with a '' member, by that member's position (`_set_text`)."""

    def one(c: str) -> str:
        if c in floats:
            return f"CAST({quote(c)} AS DOUBLE)"
        if c in enums:
            return f"IF({quote(c)} = 0, '{ENUM_ERROR_VALUE}', {quote(c)})"
        if c in sets:
            return _set_text(c, sets[c])
        return quote(c)

    return ", ".join(one(c) for c in columns)


def chunk_select(
    schema: str,
    table: str,
    columns: Sequence[str],
    key: Sequence[str],
    after: Sequence[object] | None,
    start: Sequence[object] | None,
    stop: Sequence[object] | None,
    limit: int,
    floats: Collection[str] = (),
    numbers: Sequence[str] = (),
    enums: Collection[str] = (),
    sets: Mapping[str, int] = {},
    wide: Collection[str] = (),
) -> tuple[str, list[object]]:
    """Next chunk in key order: key > after (exclusive), or key >= start on the first chunk
    of a range; key <= stop (inclusive) when the range has an end. `floats`: the FLOAT columns;
    `numbers`: ENUM / SET key columns whose numbers follow the columns (`member_keys`); `enums`: the
    ENUM columns, `sets` the SET columns with a '' member (`select_list`); `wide`: the SET key columns
    of 64 members (`_number`), their numbers read unsigned."""
    compare = lambda op, values: (f"({_compare(key, op, wide)})", _params(values))  # noqa: E731
    where, params = chunk_bounds(after, start, stop, compare)
    listed = select_list(columns, floats, enums, sets) + "".join(
        f", CAST({quote(n)} AS UNSIGNED)" if n in wide else f", {quote(n)} + 0" for n in numbers
    )
    sql = select_where(listed, qualified(schema, table), where)
    sql += f" ORDER BY {', '.join(quote(k) for k in key)} LIMIT %s"
    return sql, [*params, limit]


def key_after_select(schema: str, table: str, key: Sequence[str], numbered: Collection[int] = ()) -> str:
    """`SELECT a > b` for two keys as the table orders its key (keyset.key_comparison): a column's
    collation wins over a literal's. `numbered`: the ENUM / SET key columns (by position), compared
    by member number as the server orders them, with the keys' values bound as numbers (`member_keys`)."""
    selected = [f"{quote(k)} + 0 AS {quote(k)}" if at in numbered else quote(k) for at, k in enumerate(key)]
    return key_comparison(qualified(schema, table), [quote(k) for k in key], selected=selected)


def keys_select(
    schema: str,
    table: str,
    columns: Sequence[str],
    key: Sequence[str],
    keys: Sequence[Sequence[object]],
    floats: Collection[str] = (),
    enums: Collection[str] = (),
    sets: Mapping[str, int] = {},
) -> tuple[str, list[object]]:
    """Rows of the given keys, in key order (`enums`, `sets`: `select_list`; a key's ENUM error value
    is bound as its number, 0, `member_keys`). A key column of `sets` is compared as it lands
    (`_set_text`): by the server's text, 'b' would find both {b} and {'',b} and ',b' neither; by its
    number, a member with a character beyond the BMP could not be named (the catalog shows it as '?')."""
    one = "(" + " AND ".join(f"{_set_text(k, sets[k]) if k in sets else quote(k)} = %s" for k in key) + ")"
    sql = (
        f"SELECT {select_list(columns, floats, enums, sets)} FROM {qualified(schema, table)}"
        f" WHERE {' OR '.join([one] * len(keys))} ORDER BY {', '.join(quote(k) for k in key)}"
    )
    return sql, [v for k in keys for v in k]


def duplicate_select(
    schema: str,
    table: str,
    key: Sequence[str],
    start: Sequence[object] | None,
    stop: Sequence[object] | None,
    wide: Collection[str] = (),
) -> tuple[str, list[object]]:
    """One key value that several rows with keys in [start, stop] share (GROUP BY compares as the
    database does, collations included); no row: the key is unique there (`wide`: `_number`)."""
    compare = lambda op, values: (f"({_compare(key, op, wide)})", _params(values))  # noqa: E731
    where, params = chunk_bounds(None, start, stop, compare)
    columns = ", ".join(quote(k) for k in key)
    sql = select_where(columns, qualified(schema, table), where)
    return sql + f" GROUP BY {columns} HAVING COUNT(*) > 1 LIMIT 1", params
