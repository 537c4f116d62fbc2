"""PostgreSQL Relation messages judged against what capture landed per table (schema_change.Relations):
column rewrites and renames onto a captured name stop capture unless accepted; a new relation under
a captured name is emptied (a truncate) before its first change."""

from __future__ import annotations

import pyarrow as pa
import pytest

from capture.config import parse_config
from capture.errors import ColumnRewriteError, TableRenameError
from capture.events import Column, TableSchema
from capture.sources.postgres.schema_change import Relations

PG = {"kind": "postgresql", "user": "cdc", "database": "shop"}


def _config(**settings: str):
    return parse_config({"sources": {"src": {**PG, **settings}}}).source("src")


def _schema(table: str, oid: int, **columns: str) -> TableSchema:
    cols = tuple(Column(n, pa.int32(), t) for n, t in columns.items())
    return TableSchema("public", table, cols, ("id",), relation=oid)


def _landed(table: str, oid: int | None, **columns: str) -> dict:
    return {
        "schema": "public",
        "table": table,
        "relation": oid,
        "columns": [{"name": n, "type": "int32", "source_type": t} for n, t in columns.items()],
    }


def test_column_rewrites_and_table_renames_are_accepted_for_postgresql_too():
    assert _config().column_rewrites == "refuse" and _config().table_renames == "refuse"
    assert _config(column_rewrites="accept", table_renames="accept").column_rewrites == "accept"


def test_a_renamed_column_against_the_landed_schema_stops_unless_accepted():
    landed = [_landed("t", 10, id="integer", note="text")]
    with pytest.raises(ColumnRewriteError, match=r"public\.t.*label replace note.*column_rewrites: accept"):
        Relations(landed).check("src", _config(), None, 10, _schema("t", 10, id="integer", label="text"))
    accepted = Relations(landed)
    empty = accepted.check(
        "src", _config(column_rewrites="accept"), None, 10, _schema("t", 10, id="integer", label="text")
    )
    assert empty == []
    # accepted: what is compared next is the new description
    assert accepted.check("src", _config(), None, 10, _schema("t", 10, id="integer", label="text")) == []


def test_a_retyped_column_stops_and_an_unchanged_or_legacy_record_passes():
    landed = [_landed("t", 10, id="integer", v="integer")]
    with pytest.raises(ColumnRewriteError, match="v integer -> bigint"):
        Relations(landed).check("src", _config(), None, 10, _schema("t", 10, id="integer", v="bigint"))
    assert Relations(landed).check("src", _config(), None, 10, _schema("t", 10, id="integer", v="integer")) == []
    legacy = [_landed("t", None, id="integer", v="integer")]  # landed before OIDs were recorded
    assert Relations(legacy).check("src", _config(), None, 99, _schema("t", 99, id="integer", v="integer")) == []


def test_a_new_relation_under_a_captured_name_is_emptied_once():
    relations = Relations([_landed("t", 10, id="integer")])
    assert relations.check("src", _config(), None, 11, _schema("t", 11, id="integer")) == [("public", "t")]
    assert relations.check("src", _config(), None, 11, _schema("t", 11, id="integer")) == []


def test_a_known_relation_under_another_captured_name_is_a_rename():
    landed = [_landed("a", 10, id="integer"), _landed("b", 20, id="integer")]
    with pytest.raises(TableRenameError, match=r"public\.a was renamed to public\.b.*table_renames: accept"):
        Relations(landed).check("src", _config(), None, 10, _schema("b", 10, id="integer"))
    relations = Relations(landed)
    empty = relations.check("src", _config(table_renames="accept"), None, 10, _schema("b", 10, id="integer"))
    assert empty == [("public", "b"), ("public", "a")]
    assert relations.check("src", _config(), None, 10, _schema("b", 10, id="integer")) == []


def test_a_dropped_relation_is_emptied_once_and_a_new_one_after_it_is_not_emptied_again():
    relations = Relations([_landed("t", 10, id="integer")])
    assert relations.standing() == {10: ("public", "t")}
    assert relations.drop("src", 10, ("public", "t")) is True
    assert relations.drop("src", 10, ("public", "t")) is False  # once
    assert relations.standing() == {}
    assert relations.check("src", _config(), None, 11, _schema("t", 11, id="integer")) == []  # emptied at the drop
    # started again: the drop's landed truncate record says so
    landed = [_landed("t", 10, id="integer"), {"kind": "truncate", "schema": "public", "table": "t", "relation": 10}]
    assert Relations(landed).standing() == {}
    assert Relations(landed).drop("src", 10, ("public", "t")) is False
    # a new table took the name before the reader reached the drop: its own first change emptied it
    relations = Relations([_landed("t", 10, id="integer")])
    assert relations.check("src", _config(), None, 11, _schema("t", 11, id="integer")) == [("public", "t")]
    assert relations.drop("src", 10, ("public", "t")) is False


def test_a_table_only_dumped_is_judged_against_its_chunks_schema():
    def dumped(schema: str, table: str):
        return ({"id": "integer", "note": "text"}, 10) if table == "t" else None

    with pytest.raises(ColumnRewriteError, match=r"public\.t.*label replace note"):
        Relations([], dumped).check("src", _config(), None, 10, _schema("t", 10, id="integer", label="text"))
    assert Relations([], dumped).check("src", _config(), None, 10, _schema("t", 10, id="integer", note="text")) == []
    # dumped from another relation (dropped and created again since): its rows are emptied
    assert Relations([], dumped).check("src", _config(), None, 11, _schema("t", 11, id="integer")) == [("public", "t")]
    # dropped while only dumped: emptied, once
    relations = Relations([], dumped)
    assert relations.drop("src", 10, ("public", "t")) is True
    assert relations.drop("src", 10, ("public", "t")) is False


def test_a_table_only_dumped_dropped_twice_is_not_emptied_again_after_a_restart():
    """Each drop's truncate record names its relation; restarted, the second (relation 11, dumped
    after the first drop, never landed a `table` record) counts as dropped too."""

    def dumped(schema: str, table: str):
        return ({"id": "integer"}, 11) if table == "t" else None

    truncates = [{"kind": "truncate", "schema": "public", "table": "t", "relation": oid} for oid in (10, 11)]
    for landed in (truncates, [_landed("t", 10, id="integer"), *truncates]):
        relations = Relations(landed, dumped)
        assert relations.drop("src", 11, ("public", "t")) is False
        assert relations.drop("src", 10, ("public", "t")) is False
        assert relations.standing() == {}
