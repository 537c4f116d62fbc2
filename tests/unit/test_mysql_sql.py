"""Chunk SQL for MySQL/MariaDB: exact text for composite keys, quoting, bounds (and PostgreSQL's
duplicate-key check beside MySQL's)."""

from __future__ import annotations

import pytest

from capture.sources.mysql.sql import chunk_select, keys_select, quote
from capture.sources.mysql.sql import duplicate_select as mysql_duplicate
from capture.sources.postgres.sql import duplicate_select as postgres_duplicate

pytestmark = pytest.mark.unit


def test_identifiers_are_quoted_and_backticks_doubled():
    assert quote("order") == "`order`" and quote("we`ird") == "`we``ird`"


def test_first_chunk_of_a_whole_table():
    sql, params = chunk_select("shop", "orders", ["id", "v"], ["id"], None, None, None, 100)
    assert sql == "SELECT `id`, `v` FROM `shop`.`orders` ORDER BY `id` LIMIT %s"
    assert params == [100]


def test_next_chunk_with_a_composite_key_is_exclusive_and_expanded():
    sql, params = chunk_select("s", "t", ["a", "b", "c"], ["a", "b"], [1, "x"], None, None, 10)
    assert sql == (
        "SELECT `a`, `b`, `c` FROM `s`.`t` WHERE ((`a` > %s) OR (`a` = %s AND `b` > %s)) ORDER BY `a`, `b` LIMIT %s"
    )
    assert params == [1, 1, "x", 10]


def test_a_key_range_starts_inclusive_and_stops_inclusive():
    sql, params = chunk_select("s", "t", ["a", "b"], ["a", "b"], None, [1, 2], [5, 6], 10)
    assert "WHERE ((`a` > %s) OR (`a` = %s AND `b` >= %s)) AND ((`a` < %s) OR (`a` = %s AND `b` <= %s))" in sql
    assert params == [1, 1, 2, 5, 5, 6, 10]


def test_enum_key_numbers_follow_the_columns():
    sql, _ = chunk_select("s", "t", ["e", "v"], ["e"], None, None, None, 10, numbers=["e"])
    assert sql == "SELECT `e`, `v`, `e` + 0 FROM `s`.`t` ORDER BY `e` LIMIT %s"


def test_an_enum_error_value_is_read_as_a_space():
    """The error value (number 0) reads back as '', as a real '' member does: it is read as ' '."""
    sql, _ = chunk_select("s", "t", ["e", "v"], ["e"], None, None, None, 10, numbers=["e"], enums=["e"])
    assert sql == "SELECT IF(`e` = 0, ' ', `e`), `v`, `e` + 0 FROM `s`.`t` ORDER BY `e` LIMIT %s"
    sql, _ = keys_select("s", "t", ["e", "v"], ["e"], [(0,)], enums=["e"])
    assert sql == "SELECT IF(`e` = 0, ' ', `e`), `v` FROM `s`.`t` WHERE (`e` = %s) ORDER BY `e`"


def test_a_set_with_an_empty_member_is_read_with_its_comma():
    """The server leaves a '' member's ',' out where no member before it is in the value: such a value
    is read with a ',' first ({'',b} as ',b', {''} as ','), by the '' member's bit and those before it."""
    sql, _ = chunk_select("s", "t", ["s", "v"], ["s"], None, None, None, 10, numbers=["s"], sets={"s": 2})
    assert sql == (
        "SELECT IF((`s` & 2) <> 0 AND (`s` & 1) = 0, CONCAT(',', `s`), `s`), `v`, `s` + 0 FROM `s`.`t`"
        " ORDER BY `s` LIMIT %s"
    )
    sql, _ = keys_select("s", "t", ["s", "v"], ["s"], [(",a",)], sets={"s": 1})  # a key list: as it lands
    read = "IF((`s` & 1) <> 0, CONCAT(',', `s`), `s`)"
    assert sql == f"SELECT {read}, `v` FROM `s`.`t` WHERE ({read} = %s) ORDER BY `s`"


def test_keys_select_binds_every_value():
    sql, params = keys_select("s", "t", ["a", "b"], ["a", "b"], [(1, "x"), (2, "y")])
    assert (
        sql == "SELECT `a`, `b` FROM `s`.`t` WHERE (`a` = %s AND `b` = %s) OR (`a` = %s AND `b` = %s) ORDER BY `a`, `b`"
    )
    assert params == [1, "x", 2, "y"]


def test_duplicate_key_check_groups_by_the_key_within_the_range():
    """A key named in the configuration: one value two rows share, compared by the database."""
    sql, params = mysql_duplicate("s", "t", ["a", "b"], None, None)
    assert sql == "SELECT `a`, `b` FROM `s`.`t` GROUP BY `a`, `b` HAVING COUNT(*) > 1 LIMIT 1" and params == []
    sql, params = postgres_duplicate("s", "t", ["a"], [1], [9])
    assert sql == 'SELECT "a"::text FROM "s"."t" WHERE "a" >= %s AND "a" <= %s GROUP BY "a" HAVING count(*) > 1 LIMIT 1'
    assert params == [1, 9]
