"""The harness's own rules, without servers: how values compare, what a finding says, how the
changelog replays, which line of a failed command is shown, how keys are respelt."""

from __future__ import annotations

import random
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal

import pytest

from tests.convergence.check import canonical, differences, replay
from tests.convergence.harness import error_line
from tests.convergence.schema import KEY_TAILS, tables, variant
from tests.convergence.workload import KeySet

pytestmark = pytest.mark.unit


def test_values_compare_by_the_source_columns_type():
    assert canonical("float32", float("nan")) == canonical("float32", float("nan"))
    assert canonical("float64", -0.0) != canonical("float64", 0.0)
    # a PostgreSQL real's shortest text and the float32 Spark holds are the same float32
    assert canonical("float32", 3.4028235e38) == canonical("float32", 3.4028234663852886e38)
    assert canonical("float32", 919735.0) != canonical("float32", 919735.1875)
    assert canonical("decimal", Decimal("1.50")) == canonical("decimal", Decimal("1.5"))
    assert canonical("int", Decimal("18446744073709551615")) == 2**64 - 1
    assert canonical("date", "0000-00-00") is None  # MariaDB's zero date, as it lands
    moment = datetime(1, 1, 1, tzinfo=UTC)
    assert canonical("datetime", moment) == datetime(1, 1, 1)
    assert canonical("micros", timedelta(hours=-838, minutes=-59, seconds=-59)) == canonical("micros", -3020399000000)
    assert canonical("micros", time(23, 59, 59, 999999)) == 86_399_999_999
    assert canonical("bytes", bytearray(b"\x00")) == b"\x00"
    assert canonical("text", "Abc") != canonical("text", "abc")


def test_a_difference_names_table_key_column_and_both_values():
    want = {("a",): {"k": "a", "v": 1}, ("b",): {"k": "b", "v": 2}}
    got = {("a",): {"k": "a", "v": 9}, ("c",): {"k": "c", "v": 3}}
    lines = differences("shop.t", want, got, "target")
    assert lines[0].startswith("shop.t: target differs from the source: 1 rows missing, 1 rows too many, 1 rows")
    assert "  shop.t key ('b',): missing from the target" in lines
    assert "  shop.t key ('c',): in the target but not in the source" in lines
    assert "  shop.t key ('a',) column v: source 1, target 9" in lines
    assert differences("shop.t", want, dict(want), "target") == []


def test_the_changelog_replays_in_order_keeping_missing_columns():
    events = [
        {"_op": "c", "k": 1, "v": 1, "body": "long"},
        {"_op": "u", "k": 1, "v": 2, "body": None, "_missing": ["body"]},  # TOAST: not carried
        {"_op": "c", "k": 2, "v": 5, "body": "x"},
        {"_op": "d", "k": 2, "v": None, "body": None},
    ]
    assert replay(events, ("k",), ["k", "v", "body"]) == [{"k": 1, "v": 2, "body": "long"}]


def test_the_line_shown_for_a_failed_command():
    spark = "Traceback ...\npy4j.protocol.Py4JJavaError: An error occurred\norg.apache.spark.SparkUpgradeException: " \
            "[INCONSISTENT_BEHAVIOR_CROSS_VERSION.READ_ANCIENT_DATETIME] You may get\n\tat x\n"  # fmt: skip
    assert "READ_ANCIENT_DATETIME" in error_line(spark)
    logtide = 'ts=1 level=error logger=logtide event=logtide.failed error="no key"\nerror: no key\n'
    assert error_line(logtide).startswith("event=logtide.failed")


def test_respelt_keys_keep_word_and_counter_and_the_key_set_follows_changes():
    table = next(t for t in tables(["int"]) if t.name == "ci_keys")
    rng = random.Random(3)
    spellings = {s for base, others in KEY_TAILS.items() for s in (base, *others)}
    for key in (("apple-7-x",), ("Émile-12-é",), ("zulu-3-ǆ",)):
        respelt = variant(key, table, rng)[0]
        assert respelt != key[0] and respelt.rpartition("-")[0] == key[0].rpartition("-")[0]
        assert respelt.rpartition("-")[2] in spellings
    keys = KeySet()
    assert keys.add(("a",)) and keys.add(("b",)) and not keys.add(("a",))
    assert keys.remove(("a",)) and not keys.remove(("a",))
    assert len(keys) == 1 and keys.choice(rng) == ("b",)
