"""ALTER TABLE clauses that give existing rows new values without row events in the binlog.

MariaDB/MySQL log `ALTER TABLE` as its statement only. Most of it changes no value a row shows,
but some clauses do, for every row at once: `ADD COLUMN c INT NOT NULL DEFAULT 5` (every existing
row now shows 5; a NOT NULL column without DEFAULT its type's zero, a generated column its
expression, an AUTO_INCREMENT column numbers), `RENAME COLUMN a TO b` and `CHANGE a b ...` (every
row's value now shows under `b`), and `MODIFY` / `CHANGE` to a generated column (recomputed). The
merge adds a new column to the target as NULL in the rows no later event or dump carries, and
keeps a renamed column's values under the old name: those rows diverge silently. So capture stops
at such a statement on a captured table (nothing of it lands; a restart stops there again),
unless the source sets `column_rewrites: accept` (then it warns, names the table, and goes on; a
dump of the table repairs it). Clauses that leave every shown value as it is pass: ADD COLUMN of a
nullable column without a default (NULL everywhere, as the target shows it), DROP COLUMN, indexes,
defaults for future rows (ALTER COLUMN SET DEFAULT), MODIFY of a type (a change the merge cannot
follow is refused there).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from capture.config import SourceConfig
from capture.errors import ColumnRewriteError
from capture.log import get_logger
from capture.sources.mysql.column_types import (
    Collations,
    ColumnType,
    charset_name,
    collation_charset,
    converted,
    from_definition,
    from_source_type,
    lossy,
    parse_definition,
)
from capture.sources.mysql.statements import parse_alter
from capture.sources.policy import refuse_or_warn

log = get_logger(__name__)

Table = tuple[str, str]

# ADD followed by these adds no column
_NOT_A_COLUMN = {
    "INDEX", "KEY", "CONSTRAINT", "PRIMARY", "UNIQUE", "FOREIGN", "FULLTEXT", "SPATIAL", "PARTITION", "PERIOD",
    "SYSTEM", "CHECK", "VECTOR",
}  # fmt: skip


@dataclass(frozen=True)
class ColumnRewrite:
    """An ALTER TABLE of `table` whose `clauses` (as described for the message) rewrite rows."""

    table: Table
    clauses: tuple[str, ...]


Columns = dict[str, ColumnType]  # a table's columns by lowercased name


def column_rewrite(
    statement: str,
    schema: str,
    thread_specific: bool = False,
    columns: Callable[[Table], Columns | None] | None = None,
    default_charset: Callable[[Table], str | None] = lambda table: None,
    collations: Collations | None = None,
) -> ColumnRewrite | None:
    """What an ALTER TABLE statement does to the values existing rows show (`schema`: the event's
    default database); None when nothing (or no ALTER TABLE, or a temporary table's: MariaDB flags
    those LOG_EVENT_THREAD_SPECIFIC_F). `columns`: the table's column types before the statement
    (`column_types`; an empty dict when capture cannot tell them, None when no landed row can
    change), which judges MODIFY / CHANGE of a type and CONVERT TO CHARACTER SET; without it those
    pass. `default_charset`: the table's, for a string column whose new definition names none;
    `collations`: the server's, for the charset a COLLATE names (`column_types.Collations`)."""
    if thread_specific or "alter" not in statement[:40].lower():
        return None
    tokens, words, table, i = parse_alter(statement, schema)
    if table is None:
        return None
    before = None if columns is None else columns(table)
    found: list[str] = []
    charset = _charset_of(statement, schema, table, default_charset, collations)
    for clause in _split(tokens[i:], words[i:]):
        found += _clause(*clause)
        if before is not None:
            found += _type_change(*clause, before, charset, collations)
    return ColumnRewrite(table, tuple(found)) if found else None


# a definition starting with these is a string type: it takes the table's charset unless it names one
_STRING_TYPES = {
    "CHAR", "CHARACTER", "VARCHAR", "VARCHAR2", "TINYTEXT", "TEXT", "MEDIUMTEXT", "LONGTEXT", "LONG", "ENUM", "SET",
}  # fmt: skip


def _new_type(
    tokens: list, words: list[str], charset: Callable[[], str | None], collations: Collations | None
) -> ColumnType | None:
    return parse_definition(tokens, words, charset() if words and words[0] in _STRING_TYPES else None, collations)


def _modified(tokens: list, words: list[str]) -> tuple[str, str, int] | None:
    """MODIFY [COLUMN] [IF EXISTS] c def | CHANGE [COLUMN] [IF EXISTS] old new def: the old and the
    new name and where the definition starts."""
    if words[0] not in ("MODIFY", "CHANGE"):
        return None
    i = 1 + (len(words) > 1 and words[1] == "COLUMN")
    if words[i : i + 2] == ["IF", "EXISTS"]:
        i += 2
    if i >= len(tokens):
        return None
    if words[0] == "MODIFY":
        return str(tokens[i]), str(tokens[i]), i + 1
    return (str(tokens[i]), str(tokens[i + 1]), i + 2) if i + 1 < len(tokens) else None


def _converted_to(tokens: list, words: list[str], charset: Callable[[], str | None]) -> str | None:
    """CONVERT TO {CHARACTER SET | CHARSET} cs [COLLATE c]: cs (DEFAULT: the table's, as the catalog
    shows it); None for any other clause."""
    if words[:2] != ["CONVERT", "TO"] or len(words) < 4:
        return None
    at = 4 if words[2:4] == ["CHARACTER", "SET"] else 3
    if at >= len(tokens):
        return None
    name = str(tokens[at]).strip("'")
    return (charset() or "") if name.upper() == "DEFAULT" else name


def _type_change(
    tokens: list, words: list[str], before: Columns, charset: Callable[[], str | None], collations: Collations | None
) -> list[str]:
    """A MODIFY / CHANGE of a column's type, or a CONVERT TO CHARACTER SET, that may give existing
    rows other values (`column_types.lossy`), as clauses for the message."""
    unknown = "capture has read no row of the table since it started, so it cannot tell the type before"
    modified = _modified(tokens, words)
    if modified is not None:
        old_name, _, at = modified
        new = _new_type(tokens[at:], words[at:], charset, collations)
        old = before.get(old_name.lower())
        if new is None:
            return [f"{words[0]} {old_name} to a type capture cannot judge ({' '.join(tokens[at : at + 3])} ...)"]
        if old is None:
            return [f"{words[0]} {old_name} to {new.describe()} ({unknown})"]
        why = lossy(old, new)
        return [] if why is None else [f"{words[0]} {old_name} from {why} (existing values are converted)"]
    target = _converted_to(tokens, words, charset)
    if target is None:
        return []
    if not before:
        return [f"CONVERT TO CHARACTER SET {target} ({unknown})"]
    found = []
    for name, old in before.items():
        why = lossy(old, converted(old, target))
        if why is not None:
            found.append(f"CONVERT TO CHARACTER SET {target}: {name} from {why} (existing values are converted)")
    return found


def columns_after(
    statement: str,
    schema: str,
    before: Columns,
    default_charset: Callable[[Table], str | None],
    collations: Collations | None = None,
) -> Columns:
    """The column types after an ALTER TABLE statement of the table `before` describes: its
    MODIFY, CHANGE, ADD, DROP, RENAME COLUMN and CONVERT TO CHARACTER SET applied (a type capture
    cannot parse: not known)."""
    tokens, words, table, i = parse_alter(statement, schema)
    if table is None:
        return before
    after = dict(before)
    charset = _charset_of(statement, schema, table, default_charset, collations)
    for t, w in _split(tokens[i:], words[i:]):
        modified = _modified(t, w)
        if modified is not None:
            old, new, at = modified
            after.pop(old.lower(), None)
            found = _new_type(t[at:], w[at:], charset, collations)
            if found is not None:
                after[new.lower()] = found
        elif w[0] == "ADD":
            n = 1 + (len(w) > 1 and w[1] == "COLUMN")
            n += 3 if w[n : n + 3] == ["IF", "NOT", "EXISTS"] else 0
            if n >= len(w) or w[n] in _NOT_A_COLUMN:
                continue
            parts = _split(t[n + 1 : -1], w[n + 1 : -1]) if w[n] == "(" else [(t[n:], w[n:])]
            for pt, pw in parts:
                found = _new_type(pt[1:], pw[1:], charset, collations) if len(pt) > 1 else None
                if found is not None:
                    after[str(pt[0]).lower()] = found
        elif w[0] == "DROP" and len(w) > 1 and w[1] not in _NOT_A_COLUMN:
            n = 1 + (w[1] == "COLUMN")
            n += 2 if w[n : n + 2] == ["IF", "EXISTS"] else 0
            if n < len(t):
                after.pop(str(t[n]).lower(), None)
        elif w[:2] == ["RENAME", "COLUMN"] and len(t) > 4:
            moved = after.pop(str(t[2]).lower(), None)
            if moved is not None:
                after[str(t[4]).lower()] = moved
        else:
            target = _converted_to(t, w, charset)
            if target is not None:
                after = {name: converted(col, target) for name, col in after.items()}
    return after


# a clause starting with these sets table options (the default charset among them), not a column
_TABLE_OPTIONS = {"DEFAULT", "CHARACTER", "CHARSET", "COLLATE", "CONVERT"}


def table_charset(statement: str, schema: str, collations: Collations | None = None) -> tuple[Table, str | None] | None:
    """The table an ALTER TABLE statement gives a default charset (`[DEFAULT] CHARACTER SET [=] cs`,
    `[DEFAULT] COLLATE [=] c`, `CONVERT TO CHARACTER SET cs`) and that charset (None where the text
    does not name it: `DEFAULT`); None for a statement that sets none, or only a collation that
    names no charset (`collations`: the server's; MariaDB 11's `uca1400_ai_ci` keeps the table's)."""
    if "alter" not in statement[:40].lower():
        return None
    tokens, words, table, i = parse_alter(statement, schema)
    if table is None:
        return None
    found: tuple[Table, str | None] | None = None
    for t, w in _split(tokens[i:], words[i:]):
        if w[0] not in _TABLE_OPTIONS or w[:2] == ["DEFAULT", "("]:
            continue
        named = collated = None
        for n, word in enumerate(w):
            if word in ("CHARSET", "SET") and (word == "CHARSET" or w[n - 1 : n] == ["CHARACTER"]):
                at = n + 1 + (w[n + 1 : n + 2] == ["="])
                named = str(t[at]).strip("'").lower() if at < len(t) else "default"
            elif word == "COLLATE":
                at = n + 1 + (w[n + 1 : n + 2] == ["="])
                collated = str(t[at]).strip("'").lower() if at < len(t) else "default"
        if named is None and collated is not None:
            named = collated if collated == "default" else collation_charset(collated, collations)
        if named is not None:
            found = (table, None if named == "default" else charset_name(named))
    return found


def _charset_of(
    statement: str,
    schema: str,
    table: Table,
    default_charset: Callable[[Table], str | None],
    collations: Collations | None,
) -> Callable[[], str | None]:
    """The default charset a column the statement defines takes: the one the statement itself gives
    the table (its table options apply to its column definitions), else the table's before it."""
    stated = table_charset(statement, schema, collations)
    if stated is not None:
        return lambda: stated[1]
    return lambda: default_charset(table)


def _split(tokens: list, words: list[str]) -> list[tuple[list, list[str]]]:
    """The comma-separated clauses at parenthesis depth 0."""
    clauses: list[tuple[list, list[str]]] = []
    start, depth = 0, 0
    for n, word in enumerate(words):
        depth += word == "("
        depth -= word == ")"
        if depth == 0 and word == ",":
            clauses.append((tokens[start:n], words[start:n]))
            start = n + 1
    clauses.append((tokens[start:], words[start:]))
    return [c for c in clauses if c[1]]


def _clause(tokens: list, words: list[str]) -> list[str]:
    head = words[0]
    if head == "ADD":
        i = 1 + (len(words) > 1 and words[1] == "COLUMN")
        if words[i : i + 3] == ["IF", "NOT", "EXISTS"]:
            i += 3
        if i >= len(words) or words[i] in _NOT_A_COLUMN:
            return []
        if words[i] == "(":  # ADD (c1 def, c2 def)
            inner = _split(tokens[i + 1 : -1], words[i + 1 : -1])
            return [found for t, w in inner for found in _added(t, w)]
        return _added(tokens[i:], words[i:])
    if head == "RENAME" and len(words) > 1 and words[1] == "COLUMN":
        return [f"RENAME COLUMN {tokens[2]} TO {tokens[4]}" if len(tokens) > 4 else "RENAME COLUMN"]
    if head == "CHANGE":
        i = 1 + (len(words) > 1 and words[1] == "COLUMN")
        if words[i : i + 2] == ["IF", "EXISTS"]:
            i += 2
        if i + 1 >= len(tokens):
            return []
        old, new = str(tokens[i]), str(tokens[i + 1])
        if old.lower() != new.lower():
            return [f"CHANGE {old} {new} (a rename: the values show under {new})"]
        return [f"CHANGE {old} to a generated column (recomputed)"] if _generated(words[i + 2 :]) else []
    if head == "MODIFY":
        i = 1 + (len(words) > 1 and words[1] == "COLUMN")
        if words[i : i + 2] == ["IF", "EXISTS"]:
            i += 2
        if i < len(tokens) and _generated(words[i + 1 :]):
            return [f"MODIFY {tokens[i]} to a generated column (recomputed)"]
    return []


def _generated(words: list[str]) -> bool:
    """A column definition's words declare a generated column (not a system-versioning period column)."""
    for n, word in enumerate(words):
        if word == "GENERATED" or (word == "AS" and n + 1 < len(words) and words[n + 1] == "("):
            return True
    return False


def _added(tokens: list, words: list[str]) -> list[str]:
    """An added column whose existing rows show a value other than NULL: a DEFAULT other than NULL,
    NOT NULL (its type's zero), generated, AUTO_INCREMENT, or a TIMESTAMP not declared NULL (NOT NULL
    under explicit_defaults_for_timestamp=OFF, MariaDB's default)."""
    if len(tokens) < 2:
        return []
    name, definition = str(tokens[0]), words[1:]
    if "ROW" in definition and ("START" in definition or "END" in definition):
        return []  # a system-versioning period column: not landed
    why = None
    for n, word in enumerate(definition):
        following = definition[n + 1] if n + 1 < len(definition) else ""
        if word == "DEFAULT" and following != "NULL":
            why = "a DEFAULT"
        elif word == "NOT" and following == "NULL":
            why = why or "NOT NULL"
        elif word == "AUTO_INCREMENT" or word == "SERIAL":  # SERIAL, or SERIAL DEFAULT VALUE: numbered
            why = "AUTO_INCREMENT"
    if why is None and _generated(definition):
        why = "generated"
    if why is None and definition[0] == "TIMESTAMP" and "NULL" not in definition:
        why = "a TIMESTAMP not declared NULL"
    return [] if why is None else [f"ADD {name} ({why}: existing rows show a value, not NULL)"]


def message(source: str, change: ColumnRewrite, statement: str, where: str) -> str:
    name = f"{change.table[0]}.{change.table[1]}"
    return (
        f"source {source!r}: ALTER TABLE at {where} ({statement[:120]!r}) gives the existing rows of captured table "
        f"{name} new values without row events: {'; '.join(change.clauses)}. MariaDB/MySQL log only the statement, "
        "so the target would show NULL (or a renamed column's values under the old name) in every row no later "
        "change or dump carries. Nothing of this statement has landed. Ways out: (1) set `column_rewrites: accept` on "
        f"the source and restart: capture warns, lands the statement as DDL and goes on; then dump {name} to repair "
        "the target (`logtide dump`); (2) leave the table out of capture (exclude). Restarted with "
        "`column_rewrites: refuse`, capture stops here again"
    )


def check_column_rewrite(source: str, config: SourceConfig, change: ColumnRewrite, statement: str, where: str) -> None:
    """Stop capture (ColumnRewriteError) at an ALTER TABLE that rewrites a captured table's rows, or
    with `column_rewrites: accept` log a warning naming it."""
    name = f"{change.table[0]}.{change.table[1]}"
    refuse_or_warn(
        config.column_rewrites,
        ColumnRewriteError(message(source, change, statement, where)),
        log,
        "capture.column_rewrite_accepted",
        source=source,
        table=name,
        statement=statement[:200],
        at=where,
        reason="column_rewrites: accept. " + "; ".join(change.clauses),
        action=f"dump {name} to repair it (as of the dump)",
    )


def landed_column_types(
    history: list[dict[str, Any]],
    default_charset: Callable[[Table], str | None],
    collations: Collations | None = None,
) -> tuple[dict[Table, Columns], set[Table]]:
    """Each table's column types as the landed schema history shows them last (`history`: its
    records in LSN order, `kind`, `schema`, `table`, `statement`, `columns`): its last `table`
    record's, with the ALTER TABLE statements of it since applied (`columns_after`); none once
    another DDL statement that may change it names the table (or drops a database of its name).
    Statements that change no column keep them (`keeps_types`: `CREATE INDEX ... ON t`, OPTIMIZE,
    a trigger or view; an ALTER of another table that renames none). A record's column types are
    its columns' `definition`s (the whole type as the table map gave it: `column_types.definition`);
    a record landed before those were recorded has none, and its types are what `from_source_type`
    reads (a string type, the nullability: not known). Also returned: the tables whose types come
    from such a record."""
    found: dict[Table, Columns] = {}
    partial: set[Table] = set()
    charsets = _HistoryCharsets(history, default_charset, collations)
    for at, record in enumerate(history):
        charsets.at = at
        if record["kind"] == "table":
            columns, table = {}, (record["schema"], record["table"])
            whole = bool(record["columns"])
            for column in record["columns"] or []:
                text = column.get("definition")
                known = from_definition(text) if text else None
                if known is None:
                    whole = False
                    known = from_source_type(column["source_type"] or "")
                if known is not None:
                    columns[column["name"].lower()] = known
            found[table] = columns
            if whole:
                partial.discard(table)
            else:
                partial.add(table)
        elif record["kind"] == "ddl" and found:
            statement, schema = record["statement"] or "", record["schema"] or ""
            tokens, keywords, altered, _ = parse_alter(statement, schema)
            words = {str(t).lower() for t in tokens}
            dropped = "drop" in words and ("database" in words or "schema" in words)
            # an ALTER of another table keeps this one's columns unless it renames a table to its name
            keeps = keeps_types(keywords) or (altered is not None and "RENAME" not in keywords)
            for table in list(found):
                if altered is not None and altered == table:
                    found[table] = columns_after(statement, schema, found[table], charsets, collations)
                elif keeps:
                    continue
                elif table[1].lower() in words or (dropped and table[0].lower() in words):
                    del found[table]
                    partial.discard(table)
    return found, partial


class _HistoryCharsets:
    """Each table's default charset at a record of the landed schema history (`at`): the one the
    last ALTER before it set (`table_charset`); else, when no ALTER after it sets one, the one
    `default_charset` gives (the table's at the end of the history); else not known (None)."""

    def __init__(
        self,
        history: list[dict[str, Any]],
        default_charset: Callable[[Table], str | None],
        collations: Collations | None,
    ) -> None:
        self.at = 0
        self._default = default_charset
        self._set: list[tuple[int, Table, str | None]] = []
        for n, record in enumerate(history):
            if record["kind"] == "ddl":
                stated = table_charset(record["statement"] or "", record["schema"] or "", collations)
                if stated is not None:
                    self._set.append((n, *stated))

    def __call__(self, table: Table) -> str | None:
        before = [charset for n, named, charset in self._set if named == table and n < self.at]
        if before:
            return before[-1]
        if any(named == table and n > self.at for n, named, _ in self._set):
            return None
        return self._default(table)


# statements that may name a table but leave its columns as they are (or, TRUNCATE, empty it)
_KEEPING = {"ANALYZE", "OPTIMIZE", "REPAIR", "CHECK", "GRANT", "REVOKE", "TRUNCATE"}
# CREATE / DROP of these objects: none changes a table's columns (CREATE INDEX ... ON t)
_KEEPING_OBJECTS = {"INDEX", "TRIGGER", "VIEW", "PROCEDURE", "FUNCTION", "EVENT"}
_OTHER_OBJECTS = {"TABLE", "DATABASE", "SCHEMA", "SEQUENCE", "SERVER", "USER", "ROLE", "PACKAGE", "TABLESPACE"}


def keeps_types(words: list[str]) -> bool:
    """A DDL statement (`words`: its keywords) that changes no column of any table."""
    if not words:
        return False
    if words[0] in _KEEPING:
        return True
    if words[0] in ("CREATE", "DROP"):
        for word in words[1:20]:  # past OR REPLACE, UNIQUE, DEFINER = `u`@`h`, ALGORITHM = ..., SQL SECURITY
            if word in _KEEPING_OBJECTS:
                return True
            if word in _OTHER_OBJECTS or word == "(":
                return False
    return False
