"""Repairs within one merge run (MariaDB): two full dumps of a table merged by ONE run, rows lost
between them with the binlog off (no log event). The second dump's chunks cover those keys and do
not return them, so the rows go, whether the first dump (into a new target) or the target (merged
before) held them, and a row a log insert gave the table before the second dump and that went
with the binlog off goes too. A row inserted through the log after the second dump stays."""

from __future__ import annotations

import pytest

from capture.merge.app import run_merge
from tests.integration.dumping import run_dump, wait_until_landed
from tests.spark.ddl_dumps import merged_differences

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("drop_database_afterwards")]

LOST = (1, 150, 300)  # in the first chunk's range (no start), a middle one, the last (no stop)


@pytest.mark.parametrize("merged_before", [False, True], ids=["new", "held"])
def test_rows_lost_between_two_dumps_merged_in_one_run_go(
    mariadb, database, make_capture, merge_config, spark, merged_before
):
    mariadb.execute(
        "CREATE TABLE ledger (id INT PRIMARY KEY, v INT)",
        "INSERT INTO ledger SELECT seq, seq FROM seq_1_to_300",
        database=database,
    )
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    config = merge_config(capture.config)
    if merged_before:  # the target holds every row: the run's repairs also see them as stored
        mariadb.execute("UPDATE ledger SET v = v + 1", database=database)
        wait_until_landed(mariadb, capture)
        run_merge(spark, config, "src")
    run_dump(capture, f"{database}.ledger", chunk_size=100)
    # through the log: 400 is a row the run sees in an event before the second dump (in the last
    # chunk's range), 5 an update of a row the first dump returned
    mariadb.execute("INSERT INTO ledger VALUES (400, 400)", "UPDATE ledger SET v = -5 WHERE id = 5", database=database)
    mariadb.execute(
        "SET SESSION sql_log_bin = 0",
        f"DELETE FROM ledger WHERE id IN {(*LOST, 400, 5)}",
        "SET SESSION sql_log_bin = 1",
        database=database,
    )
    run_dump(capture, f"{database}.ledger", chunk_size=100)
    # after the second dump, through the log: 150 comes back, and stays
    mariadb.execute("INSERT INTO ledger VALUES (150, -150)", database=database)
    wait_until_landed(mariadb, capture)
    diff = merged_differences(spark, config, mariadb, database)
    assert not diff, f"the target differs from the source:\n{diff}"
    target = f"`{config.merge.catalog_name}`.`{database}`.`{database}__ledger`"
    rows = spark.sql(f"SELECT id, v FROM {target} WHERE id IN (1, 5, 150, 300, 400) ORDER BY id").collect()
    assert [tuple(r) for r in rows] == [(150, -150)]
    assert capture.stop() == 0
