"""Which tables a row change logged as its statement writes (a session with binlog_format
STATEMENT or MIXED): the reader passes over such a statement when it writes no captured table,
and stops capture when it does or when it cannot tell.

`written_tables` reads INSERT, REPLACE, UPDATE, DELETE and LOAD DATA; it over-approximates
(every table a multi-table UPDATE names; a multi-table DELETE's targets through the aliases its
table references give), never the reverse. Anything else (a SELECT calling a stored function,
CALL, an unqualified name with no default database) gives None: capture cannot tell. What a
statement hides - a trigger on the table, a view, a stored function it calls - the reader asks
the catalog about (`hidden_writes`).
"""

from __future__ import annotations

import re

import pymysql

from capture.sources.mysql.connection import query

# `--` starts a comment when a space or a control character follows (a carriage return too)
_SKIP = r"(?P<skip>\s+|--(?:[\x00-\x09\x0b-\x20\x7f][^\n]*)?(?:\n|$)|\#[^\n]*(?:\n|$)|/\*M?!\d*|\*/|/\*.*?\*/)"
_QUOTED = r"(?P<quoted>`(?:[^`]|``)*`)"
_WORD = r"(?P<word>[A-Za-z0-9_$\u0080-\U0010FFFF]+)|(?P<other>.)"
_SINGLE = {True: r"(?P<string>'(?:[^'\\]|\\.|'')*')", False: r"(?P<string>'(?:[^']|'')*')"}
_DOUBLE = {True: r'(?P<dquoted>"(?:[^"\\]|\\.|"")*")', False: r'(?P<dquoted>"(?:[^"]|"")*")'}
# how quotes read: a backslash escapes in both ('' and ""), in neither (sql_mode NO_BACKSLASH_ESCAPES),
# in '' only (ANSI_QUOTES: "" quote an identifier); the event's sql_mode is not read, so a statement
# with a backslash is read every way and the tables any reading names are taken
_TOKENS = {
    (single, double): re.compile("|".join((_SKIP, _QUOTED, _SINGLE[single], _DOUBLE[double], _WORD)), re.DOTALL)
    for single, double in ((True, True), (False, False), (True, False))
}
# words after which a table name follows (in an UPDATE's or DELETE's table references)
_TABLE_BEFORE = {"FROM", "USING", "JOIN", "STRAIGHT_JOIN"}
_NOT_A_TABLE = {"SELECT", "WITH", "VALUES", "LATERAL", "TABLE", "ONLY"}
_DELETE_END = {"WHERE", "ORDER", "LIMIT", "RETURNING"}

Table = tuple[str, str]


class _Token(str):
    """A token: its text (unquoted for an identifier) and whether it can name something."""

    name: bool
    quoted: bool


def _tokens(statement: str, escapes: tuple[bool, bool] = (True, True)) -> list[_Token]:
    tokens: list[_Token] = []
    for match in _TOKENS[escapes].finditer(statement):
        kind = match.lastgroup
        text = match.group()
        if kind == "skip":
            continue
        if kind == "quoted":
            text = text[1:-1].replace("``", "`")
        elif kind == "dquoted":  # an identifier under sql_mode ANSI_QUOTES
            text = text[1:-1].replace('""', '"')
        token = _Token(text)
        token.name = kind in ("quoted", "dquoted", "word")
        token.quoted = kind != "word"
        tokens.append(token)
    return tokens


def without_comments(statement: str) -> str:
    """The statement with each comment a space (an executable comment's text kept), the rest as written."""
    parts = []
    for match in _TOKENS[True, True].finditer(statement):
        text = match.group()
        parts.append(" " if match.lastgroup == "skip" and not text.isspace() else text)
    return "".join(parts)


def _upper(token: _Token) -> str:
    """A word as a keyword to compare; a quoted name is never one (`SET`, `values`: "")."""
    if token.name:
        return "" if token.quoted else token.upper()
    return token


def _name(tokens: list[_Token], i: int, schema: str) -> tuple[Table | None, int]:
    """The table named at `i` (`t`, `db.t`, `t.*`, `db.t.*`) and the index after it."""
    if i >= len(tokens) or not tokens[i].name:
        return None, i
    parts = [tokens[i]]
    i += 1
    while i + 1 < len(tokens) and tokens[i] == "." and (tokens[i + 1].name or tokens[i + 1] == "*"):
        parts.append(tokens[i + 1])
        i += 2
    if parts[-1] == "*":
        parts.pop()
    if len(parts) == 1:
        return ((schema, str(parts[0])) if schema else ("", str(parts[0]))), i
    return (str(parts[-2]), str(parts[-1])), i


_ALTER_SKIP = {"ONLINE", "IGNORE", "OFFLINE"}


def parse_alter(statement: str, schema: str) -> tuple[list[_Token], list[str], Table | None, int]:
    """An ALTER TABLE statement's tokens, their keywords (`_upper`), the table it names and the index
    of its first clause (see `alter_table_name`)."""
    tokens = _tokens(statement)
    words = [_upper(t) for t in tokens]
    return (tokens, words, *alter_table_name(tokens, words, schema))


def alter_table_name(tokens: list[_Token], words: list[str], schema: str) -> tuple[Table | None, int]:
    """The table an `ALTER [ONLINE | OFFLINE] [IGNORE] TABLE [IF EXISTS] t ...` statement names
    (`words`: `_upper` of `tokens`) and the index of its first clause; None when it is none."""
    if not words or words[0] != "ALTER":
        return None, 0
    i = 1
    while i < len(words) and words[i] in _ALTER_SKIP:
        i += 1
    if i >= len(words) or words[i] != "TABLE":
        return None, i
    i += 1
    if words[i : i + 2] == ["IF", "EXISTS"]:
        i += 2
    return _name(tokens, i, schema)


def _skip(tokens: list[_Token], i: int, words: set[str]) -> int:
    while i < len(tokens) and _upper(tokens[i]) in words:
        i += 1
    return i


_NOT_AN_ALIAS = {
    "JOIN", "INNER", "LEFT", "RIGHT", "CROSS", "NATURAL", "STRAIGHT_JOIN", "FULL", "OUTER", "ON", "USING", "WHERE",
    "SET", "PARTITION", "USE", "FORCE", "IGNORE", "ORDER", "LIMIT", "RETURNING", "FOR", "FROM",
}  # fmt: skip


def _references(tokens: list[_Token], schema: str, end: set[str]) -> tuple[set[Table], dict[str, Table]]:
    """Every table named where a table may stand, up to a word of `end` outside parentheses, and
    the aliases given them."""
    tables: set[Table] = set()
    aliases: dict[str, Table] = {}
    expect, joined, depth, i = True, False, 0, 0
    while i < len(tokens):
        token, word = tokens[i], _upper(tokens[i])
        if depth == 0 and word in end:
            break
        if joined and word == "USING" and i + 1 < len(tokens) and tokens[i + 1] == "(":
            i = tokens.index(_Token(")"), i) + 1 if ")" in tokens[i:] else len(tokens)  # a join's column list
            expect = False
            continue
        joined = joined or word in ("JOIN", "STRAIGHT_JOIN")
        if token == "(":
            depth += 1
            i += 1  # a nested join's parenthesis stands where a table does: `expect` holds
            continue
        if token == ")":
            depth -= 1
        elif token == "," or word in _TABLE_BEFORE:
            expect = True
        elif expect and token.name and word not in _NOT_A_TABLE:
            table, i = _name(tokens, i, schema)
            if table is not None:
                tables.add(table)
                if i < len(tokens) and _upper(tokens[i]) == "AS":
                    i += 1
                if i < len(tokens) and tokens[i].name and _upper(tokens[i]) not in _NOT_AN_ALIAS | end:
                    aliases[str(tokens[i])] = table
                    i += 1
            expect = False
            continue
        else:
            expect = False
        i += 1
    return tables, aliases


def _targets(tokens: list[_Token], i: int, schema: str) -> tuple[list[Table | str], int]:
    """A multi-table DELETE's list of tables to delete from (`t`, `t.*`, `db.t`): an unqualified
    name as a str (it may be an alias), and the index after the list."""
    names: list[Table | str] = []
    while True:
        if i < len(tokens) and tokens[i].name and (i + 1 == len(tokens) or tokens[i + 1] != "."):
            names.append(str(tokens[i]))
            i += 1
        elif i + 3 < len(tokens) and tokens[i + 1] == "." and tokens[i + 2] == "*" and tokens[i].name:
            names.append(str(tokens[i]))
            i += 3
        else:
            table, i = _name(tokens, i, schema)
            if table is None:
                return names, i
            names.append(table)
        if i >= len(tokens) or tokens[i] != ",":
            return names, i
        i += 1


def _delete(tokens: list[_Token], i: int, schema: str) -> set[Table] | None:
    """DELETE FROM t ... | DELETE t1, t2 FROM refs ... | DELETE FROM t1, t2 USING refs ..."""
    after_from = i < len(tokens) and _upper(tokens[i]) == "FROM"
    targets, i = _targets(tokens, i + after_from, schema)
    if not targets:
        return None
    word = _upper(tokens[i]) if i < len(tokens) else ""
    if after_from and word != "USING":  # one table
        if len(targets) != 1:
            return None
        return {targets[0] if isinstance(targets[0], tuple) else (schema, targets[0])}
    if word != ("USING" if after_from else "FROM"):
        return None
    aliases = _references(tokens[i + 1 :], schema, _DELETE_END)[1]
    # a target is an alias the references give, else a table of that name (which they name too);
    # or an alias in other case, where the server compares them without case (lower_case_table_names=1):
    # both taken, as capture does not know the setting here
    folded = {alias.lower(): table for alias, table in aliases.items()}
    tables: set[Table] = set()
    for t in targets:
        if isinstance(t, tuple):
            tables.add(t)
        elif t in aliases:
            tables.add(aliases[t])
        else:
            tables.add((schema, t))
            if t.lower() in folded:
                tables.add(folded[t.lower()])
    return tables


def written_tables(statement: str, schema: str) -> set[Table] | None:
    """The tables a DML statement may write ((schema, table); `schema`: the event's default
    database), or None when it cannot tell."""
    if "\\" not in statement:
        return _written(_tokens(statement), schema)
    found: set[Table] = set()
    for escapes in _TOKENS:
        tables = _written(_tokens(statement, escapes), schema)
        if tables is None:
            return None
        found |= tables
    return found


def _written(tokens: list[_Token], schema: str) -> set[Table] | None:
    if not tokens:
        return None
    verb, i = _upper(tokens[0]), 1
    tables: set[Table] | None = None
    if verb in ("INSERT", "REPLACE"):
        i = _skip(tokens, i, {"LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "IGNORE", "INTO"})
        table, _ = _name(tokens, i, schema)
        tables = None if table is None else {table}
    elif verb == "UPDATE":
        i = _skip(tokens, i, {"LOW_PRIORITY", "IGNORE"})
        if any(_upper(t) == "SET" for t in tokens[i:]):
            tables = _references(tokens[i:], schema, {"SET"})[0]
    elif verb == "DELETE":
        tables = _delete(tokens, _skip(tokens, i, {"LOW_PRIORITY", "QUICK", "IGNORE"}), schema)
    elif verb == "LOAD":
        words = [_upper(t) for t in tokens]
        for n in range(len(tokens) - 2):
            if words[n] == "INTO" and words[n + 1] == "TABLE":
                table, _ = _name(tokens, n + 2, schema)
                tables = None if table is None else {table}
                break
    if not tables or any(not s for s, _ in tables):
        return None
    return tables


def truncated_table(schema: str, statement: str) -> Table | None:
    """(db, table) a logged TRUNCATE statement empties (`schema` for an unqualified name): TRUNCATE
    [TABLE] [db.]t [WAIT n | NOWAIT] [;], comments anywhere; None for any other statement."""
    tokens = _tokens(statement)
    if not tokens or _upper(tokens[0]) != "TRUNCATE":
        return None
    i = 1 + (len(tokens) > 2 and _upper(tokens[1]) == "TABLE" and tokens[2].name)
    table, i = _name(tokens, i, schema)
    if table is None:
        return None
    rest = [_upper(t) for t in tokens[i:]]
    if rest and rest[-1] == ";":
        rest.pop()
    if rest in ([], ["NOWAIT"]) or (len(rest) == 2 and rest[0] == "WAIT" and rest[1].isdigit()):
        return table
    return None


def created_by_select(schema: str, statement: str) -> Table | None:
    """The table a CREATE TABLE ... SELECT (as logged in a session with binlog_format STATEMENT or
    MIXED: in row format the log holds a plain CREATE TABLE and the rows) creates and fills;
    None for any other statement (a temporary table's too)."""
    tokens = _tokens(statement)
    words = [_upper(t) for t in tokens]
    if not words or words[0] != "CREATE" or "SELECT" not in words:
        return None
    i = _skip(tokens, 1, {"OR", "REPLACE"})
    if i >= len(tokens) or words[i] != "TABLE":
        return None
    table, _ = _name(tokens, _skip(tokens, i + 1, {"IF", "NOT", "EXISTS"}), schema)
    return table


def called_functions(statement: str) -> set[str]:
    """Names the statement calls as functions (`name(`): built-ins among them."""
    names: set[str] = set()
    for escapes in _TOKENS if "\\" in statement else [(True, True)]:
        tokens = _tokens(statement, escapes)
        names |= {str(tokens[n]).lower() for n in range(len(tokens) - 1) if tokens[n].name and tokens[n + 1] == "("}
    return names


HIDDEN_SQL = (
    "SELECT CONCAT('a trigger on ', EVENT_OBJECT_SCHEMA, '.', EVENT_OBJECT_TABLE) FROM information_schema.TRIGGERS"
    " WHERE {triggers}"
    " UNION ALL SELECT CONCAT('the view ', TABLE_SCHEMA, '.', TABLE_NAME) FROM information_schema.VIEWS WHERE {views}"
    " UNION ALL SELECT CONCAT('the stored function ', ROUTINE_SCHEMA, '.', ROUTINE_NAME)"
    " FROM information_schema.ROUTINES WHERE ROUTINE_TYPE = 'FUNCTION' AND LOWER(ROUTINE_NAME) IN ({functions})"
)


def hidden_writes(conn: pymysql.connections.Connection, tables: set[Table], functions: set[str]) -> list[str]:
    """What may write other tables than those the statement names, as the catalog shows it now:
    triggers on `tables`, `tables` that are views, stored functions of the names called."""
    pairs = sorted(tables)
    names = sorted(functions) or [""]
    # one equality a table: information_schema reads only the tables named, not every table's triggers
    triggers = " OR ".join(["(EVENT_OBJECT_SCHEMA = %s AND EVENT_OBJECT_TABLE = %s)"] * len(pairs))
    views = " OR ".join(["(TABLE_SCHEMA = %s AND TABLE_NAME = %s)"] * len(pairs))
    sql = HIDDEN_SQL.format(triggers=triggers, views=views, functions=", ".join(["%s"] * len(names)))
    flat = [part for pair in pairs for part in pair]
    return [row[0] for row in query(conn, sql, (*flat, *flat, *names))]
