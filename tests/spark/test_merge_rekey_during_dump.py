"""A whole-table MariaDB dump whose table gets another primary key between two chunks reads the
table again from its start under the new key (`stale_changes`); the chunks before the change keep
their `after`/`start`/`stop` bounds in the old key. One merge run after the dump holds chunks of
both keys, and with a target that already held rows that run repairs range by range (`_repairs`):
the target must still equal the source."""

from __future__ import annotations

import pytest

from capture.dump.control import DumpSettings
from capture.dump.engine import DumpRequest
from capture.landing.reader import dump_chunk_files, read_chunk_schema
from capture.merge.app import run_merge
from tests.integration.dumping import StatementAt, run_dump, wait_until_landed
from tests.spark.ddl_dumps import FILL, TABLE, dump_through, merged_differences

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("drop_database_afterwards")]

ID_C = TABLE.replace("id INT PRIMARY KEY", "id INT")[: -len("\n)")] + ",\n  PRIMARY KEY (id, c)\n)"
CASES = [
    (TABLE, ("id",), "ALTER TABLE ledger DROP PRIMARY KEY, ADD PRIMARY KEY (id, c)", ("id", "c")),
    (ID_C, ("id", "c"), "ALTER TABLE ledger DROP PRIMARY KEY, ADD PRIMARY KEY (id)", ("id",)),
]


# name and id within the 50 characters of the database name, which is also the Iceberg namespace:
# a longer name gave both cases one namespace, and the second merged into the first one's target
@pytest.mark.parametrize(("table", "old", "alter", "new"), CASES, ids=["wider", "narrower"])
def test_rekeyed_dump_merged_once(mariadb, database, make_capture, merge_config, spark, table, old, alter, new):
    """The target is not new (a merge ran before the dump), so the run after the dump repairs with
    every chunk of the dump, those read under the old key and those read again under the new one.
    (`test_merge_ddl_during_dump.py`'s "primary key replaced" merges once, into a target that run
    creates: no repair, and so no old-key bound is ever compared with the new key.)"""
    mariadb.execute(table, FILL, database=database)
    capture = make_capture([f"{database}.*"], column_rewrites="accept").start()
    capture.wait_running()
    mariadb.execute("UPDATE ledger SET v = v + 1 WHERE id <= 20", database=database)
    wait_until_landed(mariadb, capture)
    config = merge_config(capture.config)
    run_merge(spark, config, "src")  # the target now holds rows: the next run repairs
    summary = dump_through(mariadb, database, capture, 4, "before LOW", alter)
    files = dump_chunk_files(capture.zone, summary["dump_id"], database, "ledger")
    keys = [read_chunk_schema(f)[0].key for f in files]
    assert keys[0] == old and keys[-1] == new, keys  # one merge run below holds chunks of both keys
    diff = merged_differences(spark, config, mariadb, database)
    assert not diff, f"{alter}: the target differs from the source:\n{diff}"


@pytest.mark.parametrize(("table", "old", "alter", "new"), CASES, ids=["wider", "narrower"])
def test_old_key_dump_repairs_after_rekey(mariadb, database, make_capture, merge_config, spark, table, old, alter, new):
    """A dump that ended before the key changed, merged after it: every chunk was read under the old
    key, the run merges under the new one. The source lost rows without a log event (deleted with
    the binlog off) in the first, a middle and the last chunk's range; each chunk repairs its range
    under the key it was read under, and the deletes (under the run's key) remove them. On main
    these chunks were left out of the repairs and the lost rows stayed in the target."""
    mariadb.execute(table, FILL, database=database)
    capture = make_capture([f"{database}.*"], column_rewrites="accept").start()
    capture.wait_running()
    lost = (1, 130, 300)  # in the first chunk's range (no start), a middle one, the last (no stop)
    mariadb.execute(f"UPDATE ledger SET v = v + 1 WHERE id <= 20 OR id IN {lost}", database=database)
    wait_until_landed(mariadb, capture)
    config = merge_config(capture.config)
    run_merge(spark, config, "src")  # the target holds the updated rows (the lost ones too): the next run repairs
    mariadb.execute(
        "SET SESSION sql_log_bin = 0",
        f"DELETE FROM ledger WHERE id IN {lost}",
        "SET SESSION sql_log_bin = 1",
        database=database,
    )
    summary = run_dump(capture, f"{database}.ledger", chunk_size=100)
    mariadb.execute(alter, "UPDATE ledger SET v = v + 1 WHERE id IN (5, 150)", database=database)
    wait_until_landed(mariadb, capture)
    files = dump_chunk_files(capture.zone, summary["dump_id"], database, "ledger")
    assert {read_chunk_schema(f)[0].key for f in files} == {old}  # every chunk under the old key
    diff = merged_differences(spark, config, mariadb, database)
    assert not diff, f"{alter}: the target differs from the source:\n{diff}"
    target = f"`{config.merge.catalog_name}`.`{database}`.`{database}__ledger`"
    assert spark.sql(f"SELECT count(*) FROM {target} WHERE id IN {lost}").first()[0] == 0


def test_old_key_repair_keeps_a_row_moved_between_chunks(mariadb, database, make_capture, merge_config, spark):
    """Keyed by `c`, then by `id`. Between chunks 2 and 3 of a dump under `c`, row id 250 moves from
    c 250 (chunk 3's range) to c 0 (chunk 1's, already read): no chunk returns it, under either key,
    and the target still holds it as c 250, inside chunk 3's range. Its event came before chunk 3's
    LOW, outside the window, so only the rule for chunks read under another key than the run's (an
    event of the run before HIGH, under either key, keeps the row) tells the repair to leave it:
    deleting it at chunk 3's HIGH would drop a row the source holds. Row c 150, lost with the binlog
    off, is still deleted."""
    mariadb.execute(
        "CREATE TABLE ledger (id INT NOT NULL, c INT NOT NULL, v INT, PRIMARY KEY (c))",
        "INSERT INTO ledger SELECT seq, seq, seq FROM seq_1_to_300",
        database=database,
    )
    capture = make_capture([f"{database}.*"], column_rewrites="accept").start()
    capture.wait_running()
    mariadb.execute("UPDATE ledger SET v = v + 1", database=database)  # the target holds every row
    wait_until_landed(mariadb, capture)
    config = merge_config(capture.config)
    run_merge(spark, config, "src")
    mariadb.execute("SET SESSION sql_log_bin = 0", "DELETE FROM ledger WHERE c = 150", database=database)

    def wrap(source):
        move = "UPDATE ledger SET c = 0 WHERE id = 250"
        return StatementAt(source, lambda sql: mariadb.execute(sql, database=database), 3, "before LOW", move)

    run_dump(capture, DumpRequest(tables=[f"{database}.ledger"], settings=DumpSettings(chunk_size=100)), wrap=wrap)
    mariadb.execute(
        "ALTER TABLE ledger DROP PRIMARY KEY, ADD PRIMARY KEY (id)",
        "UPDATE ledger SET v = 0 WHERE id = 9",
        database=database,
    )
    wait_until_landed(mariadb, capture)
    diff = merged_differences(spark, config, mariadb, database)
    assert not diff, f"the target differs from the source:\n{diff}"
