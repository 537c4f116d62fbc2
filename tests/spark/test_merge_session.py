"""The merge's Spark session where a SparkContext already runs in the process (a test run, a notebook):
a second build_session reads and writes its own configured warehouse, and stopping it leaves the first
session running (getOrCreate handed back the first session, with the first session's catalogs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from capture.config import MergeConfig
from capture.merge.session import build_session, session_conf, stop_session
from tests.conftest import JARS

pytestmark = pytest.mark.spark


def test_a_second_session_in_the_process_uses_its_own_catalog(spark, catalogs, tmp_path):
    other = MergeConfig(catalog_name="logtide", warehouse=str(tmp_path / "other"), jars_dir=JARS)
    second = build_session(session_conf(other), "local[1]", "logtide-second")
    try:
        second.sql("CREATE TABLE logtide.second_ns.t (id INT) USING iceberg")
        second.sql("INSERT INTO logtide.second_ns.t VALUES (1), (2)")
        assert sorted(r.id for r in second.table("logtide.second_ns.t").collect()) == [1, 2]
    finally:
        stop_session(second)
    assert (tmp_path / "other" / "second_ns" / "t" / "metadata").is_dir()  # the second warehouse got it
    assert not (Path(catalogs["hadoop"].warehouse) / "second_ns").exists()  # the first's did not
    assert spark.sql("SELECT 41 + 1 AS n").collect()[0].n == 42  # the first session still runs
