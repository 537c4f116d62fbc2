"""The key of a captured table, decided one way for the log, the dump and the merge.

A table's own key is its primary key, else its first UNIQUE index whose columns are all NOT
NULL (no prefixes, expressions or predicates). A table with neither takes the key the
configuration names for it (`sources.<name>.keys: {db.table: [column, ...]}`, as Debezium's
`message.key.columns`); with none named it has no usable key: capture lands its events without
one, and dumps and merges over all tables skip it, saying why and what to do (`no_key`).

A named key must be what a primary key is: NULL-free and unique. The dump reads in keyset order
(`WHERE key > last ORDER BY key LIMIT n`), which never returns a row whose key is NULL and skips
rows that share the last key of a chunk, and the merge keeps one row per key. NOT NULL is
checked against the catalog at startup (capture, dump, setup: `check_named_keys`) and whenever
a dump describes the table; uniqueness cannot be checked cheaply, so each dump of such a table
asks the database once, before it writes anything, for a key value two rows share
(`duplicate_key_error`; the source's `check_dumpable`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from capture.config import SourceConfig
from capture.errors import ConfigError, UnusableTableError
from capture.log import get_logger

log = get_logger(__name__)


@dataclass(frozen=True)
class TableKeys:
    """What the catalog says about one table's keys."""

    not_null: dict[str, bool]  # column -> NOT NULL, in column order
    own: tuple[str, ...]  # the table's own key (primary key, else a usable UNIQUE index); () if none


def named_key_problem(source: str, table: str, named: tuple[str, ...], keys: TableKeys) -> str | None:
    """Why the key `keys` names for `table` cannot be used, or None when it can."""
    where = f"sources.{source}.keys names ({', '.join(named)}) for {table}"
    if keys.own:
        return f"{where}, which has a key of its own ({', '.join(keys.own)}): remove the entry"
    if missing := [c for c in named if c not in keys.not_null]:
        return f"{where}, which has no column {', '.join(missing)} (its columns: {', '.join(keys.not_null)})"
    if nullable := [c for c in named if not keys.not_null[c]]:
        return (
            f"{where}, whose column {', '.join(nullable)} may be NULL: a key must be NULL-free (keyset reads "
            "never return NULL keys); declare it NOT NULL or name other columns"
        )
    return None


def table_key(source: str, table: str, keys: TableKeys, named: tuple[str, ...] | None) -> tuple[str, ...]:
    """The table's own key, else the named one; () when it has neither, UnusableTableError when
    the named one cannot be used (the table changed since startup)."""
    if keys.own or named is None:
        return keys.own
    problem = named_key_problem(source, table, named, keys)
    if problem is not None:
        raise UnusableTableError(table, "cannot use the key the configuration names", problem)
    return named


def log_key(own: tuple[str, ...], named: tuple[str, ...] | None, names: tuple[str, ...]) -> tuple[str, ...]:
    """The key a log event lands with: the table's own key, else the named one, each only when the
    event has its columns (the catalog is read after the event; a later ALTER may have changed it);
    () with neither. Capture never stops for a key: the dump and the merge refuse what is unusable."""
    for key in (own, named or ()):
        if key and all(k in names for k in key):
            return key
    return ()


def no_key(source: str, table: str, detail: str = "", also: str = "") -> UnusableTableError:
    """The error (and skip reason) of a table without a usable key."""
    return UnusableTableError(
        table,
        f"has no primary key and no UNIQUE index on NOT NULL columns{detail}",
        f"add a primary key, or name its key in the configuration (sources.{source}.keys: "
        f"{{{table}: [column, ...]}}, unique NOT NULL columns{also}), or leave the table out (exclude)",
    )


def duplicate_key_error(source: str, table: str, key: tuple[str, ...], value: object) -> UnusableTableError:
    return UnusableTableError(
        table,
        f"has rows that share the key sources.{source}.keys names for it ({', '.join(key)} = {value!r})",
        "a keyset read would skip such rows and the merge would keep one of them: name columns that are "
        "unique (a UNIQUE index makes sure of it), or leave the table out",
    )


def check_named_keys(
    source: str, config: SourceConfig, lookup: Callable[[str, str], TableKeys | None]
) -> dict[str, TableKeys]:
    """ConfigError naming every key in `keys` that cannot be used (table missing or not captured,
    a column missing or nullable, a table keyed already); else the catalog's view of those tables."""
    problems, found = [], {}
    for name, columns in config.keys.items():
        schema, _, table = name.partition(".")
        if not config.captures(schema, table):
            problems.append(f"sources.{source}.keys names {name}, which include/exclude leave out: it is not captured")
            continue
        keys = lookup(schema, table)
        if keys is None:
            problems.append(f"sources.{source}.keys names {name}, which does not exist (or the user may not see it)")
            continue
        problem = named_key_problem(source, name, tuple(columns), keys)
        if problem is not None:
            problems.append(problem)
        found[name] = keys
    if problems:
        raise keys_error(source, problems)
    return found


def keys_error(source: str, problems: list[str]) -> ConfigError:
    return ConfigError(f"source {source!r}: unusable keys in the configuration:\n  - " + "\n  - ".join(problems))


def keyless(config: SourceConfig, tables: dict[str, TableKeys]) -> list[str]:
    """Of `tables` (db.table -> keys), those without a usable key: no own key and none named."""
    return sorted(
        name for name, keys in tables.items() if not keys.own and config.named_key(*name.split(".", 1)) is None
    )


def log_keyless(source: str, config: SourceConfig, tables: dict[str, TableKeys], also: str = "") -> list[str]:
    """Capture's startup line naming the captured tables without a usable key (none: no line)."""
    names = keyless(config, tables)
    if names:
        log.warning(
            "capture.keyless_tables",
            source=source,
            tables=",".join(names),
            reason="no primary key, no UNIQUE index on NOT NULL columns, no key named in the configuration",
            action=f"their events land without a key; dumps and merges over all tables skip them. Add a primary "
            f"key, or name one in sources.{source}.keys (unique NOT NULL columns{also}), or exclude them",
        )
    return names
