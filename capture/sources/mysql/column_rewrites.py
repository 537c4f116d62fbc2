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

from dataclasses import dataclass

from capture.config import SourceConfig
from capture.errors import ColumnRewriteError
from capture.log import get_logger
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


def column_rewrite(statement: str, schema: str, thread_specific: bool = False) -> ColumnRewrite | None:
    """What an ALTER TABLE statement does to the values existing rows show (`schema`: the event's
    default database); None when nothing (or no ALTER TABLE, or a temporary table's: MariaDB flags
    those LOG_EVENT_THREAD_SPECIFIC_F)."""
    if thread_specific or "alter" not in statement[:40].lower():
        return None
    tokens, words, table, i = parse_alter(statement, schema)
    if table is None:
        return None
    found: list[str] = []
    for clause in _split(tokens[i:], words[i:]):
        found += _clause(*clause)
    return ColumnRewrite(table, tuple(found)) if found else None


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
