"""The hostile tables (`tests/integration/hostile`) through the merge: rows written before
capture starts, a dump of every table while a writer changes them (key changes respelling keys
under the case- and accent-insensitive and PAD SPACE collations among them), a merge; each Iceberg
target holds the rows the source shows."""

from __future__ import annotations

import pytest

from capture.merge.app import run_merge
from tests.integration.hostile import TABLES, dump_while_writing, rows, source_state
from tests.spark.merging import iceberg_state

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("drop_database_afterwards")]


def test_hostile_tables_merge_to_the_source(mariadb, database, make_capture, merge_config, spark):
    capture = dump_while_writing(mariadb, database, make_capture, 20)
    config = merge_config(capture.config)
    run_merge(spark, config, "src")
    for table, (_, key) in TABLES.items():
        target = f"`{config.merge.catalog_name}`.`{database}`.`{database}__{table}`"
        assert rows(iceberg_state(spark, target, key)) == rows(source_state(mariadb, database, table)), table
