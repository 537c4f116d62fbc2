"""Which tables a statement-logged row change writes (capture/sources/mysql/statements.py): never fewer
than it writes, aliases of a multi-table DELETE resolved, None where the text cannot tell."""

from __future__ import annotations

import pytest

from capture.sources.mysql.statements import called_functions, written_tables

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("statement", "tables"),
    [
        ("INSERT INTO t VALUES (1)", {("db", "t")}),
        ("insert low_priority ignore into `o`.`t ✓` (a) select a from x", {("o", "t ✓")}),
        ("INSERT /*!40000 IGNORE */ INTO x.y VALUES (1)", {("x", "y")}),
        ("REPLACE t SET a = 1", {("db", "t")}),
        ("UPDATE /* c */ `t` SET v = 5 WHERE id = 2", {("db", "t")}),
        ("UPDATE a s JOIN o.b e USING (id) SET s.v = e.v, e.v = 7", {("db", "a"), ("o", "b")}),
        ("UPDATE (a JOIN b) JOIN c ON a.x = c.x SET a.v = 1", {("db", "a"), ("db", "b"), ("db", "c")}),
        ("DELETE FROM t WHERE id = 3", {("db", "t")}),
        ("DELETE FROM a.t AS x WHERE 1", {("a", "t")}),
        ("DELETE s, e FROM a s JOIN o.b e ON s.id = e.id WHERE s.id = 1", {("db", "a"), ("o", "b")}),
        ("DELETE k FROM a s, kept AS k WHERE s.id = k.id", {("db", "kept")}),
        ("DELETE FROM kept.* USING kept JOIN a USING (id)", {("db", "kept")}),
        ("LOAD DATA LOCAL INFILE '/tmp/x' IGNORE INTO TABLE t", {("db", "t")}),
    ],
)
def test_written_tables(statement, tables):
    assert written_tables(statement, "db") == tables


@pytest.mark.parametrize(
    ("statement", "schema"),
    [("SELECT `o`.`put`(2)", "db"), ("CALL p()", "db"), ("INSERT INTO t VALUES (1)", ""), ("DELETE FROM", "db")],
)
def test_what_the_text_cannot_tell(statement, schema):
    assert written_tables(statement, schema) is None


def test_called_functions_are_names_before_a_parenthesis():
    assert called_functions("INSERT INTO t VALUES (o.f(1), NOW(), 'g(')") == {"values", "f", "now"}
