"""A fresh one-chunk table whose only chunk holds no row (a full dump of an empty table): the
short path (`_load_fresh_chunk`) leaves the same target and changelog as the general path, and
the target's applied frontier is the run's."""

from __future__ import annotations

import pytest

from capture.merge import iceberg
from capture.merge import table as merge_table
from capture.merge.app import run_merge
from tests.spark.landing import Landing

pytestmark = pytest.mark.spark


def test_a_fresh_table_of_one_empty_chunk_merges_as_the_general_path_does(spark, catalogs, tmp_path, monkeypatch):
    landing = Landing(tmp_path, catalogs, "fresh_empty")
    landing.mark(110, "LOW", "low-1")
    landing.chunk([])
    landing.mark(120, "HIGH", "high-1")

    def config(namespace: str):
        merge = landing.config.merge.model_copy(update={"namespace": namespace})
        return landing.config.model_copy(update={"merge": merge})

    short = run_merge(spark, landing.config, "src")
    with monkeypatch.context() as patch:
        patch.setattr(merge_table.TableMerge, "_fresh_chunk", lambda self, *a: False)
        general = run_merge(spark, config("fresh_empty_general"), "src")
    assert not short["failed"], short
    assert not general["failed"], general
    for suffix in ("", "__changelog"):
        assert spark.table(f"logtide.fresh_empty.db__docs{suffix}").count() == 0
        assert iceberg.applied_frontier(spark, f"logtide.fresh_empty.db__docs{suffix}") == (
            iceberg.applied_frontier(spark, f"logtide.fresh_empty_general.db__docs{suffix}")
        )
    # a second run has nothing to do
    again = run_merge(spark, landing.config, "src")
    assert not again["failed"], again
