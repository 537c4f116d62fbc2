"""DDL during a PostgreSQL dump, through capture, the dump and the Spark merge into Iceberg: each target
equals its source table over the source's columns (README: Dumps, DDL during a dump).

`busy`: written all along (capture has its schema before the DDL) with `column_rewrites: accept`; a column
added with a DEFAULT and `v` rewritten with a USING that keeps its type inside chunk 4's window (a retype
int -> bigint inside one merge run is refused by the merge: README, DDL during a dump). `quiet`: only the
dump has its rows; `note` renamed and `v` rewritten with a USING that keeps its type between chunks 3 and
4. On main both targets kept NULL / old values in the rows of the chunks read before the DDL."""

from __future__ import annotations

import pytest

from capture.merge.app import run_merge
from tests.integration.dumping import AlterAt, run_dump
from tests.integration.postgres.conftest import make_pg_capture, pg_database  # noqa: F401 - fixtures by name
from tests.integration.postgres.dumping import Workload, table_state, wait_until_landed
from tests.spark.merging import changelog_replay, differences, iceberg_state, plain

pytestmark = pytest.mark.spark

KEY = ("id", "v2")  # both: a row left under a former value of either shows

DDL = {
    "busy": [
        "ALTER TABLE busy ADD COLUMN extra int NOT NULL DEFAULT 5",
        "ALTER TABLE busy ALTER COLUMN v TYPE int USING v * 2",
    ],
    "quiet": ["ALTER TABLE quiet RENAME COLUMN note TO label", "ALTER TABLE quiet ALTER COLUMN v TYPE int USING -v"],
}


def test_rewrites_during_the_dump_converge_in_iceberg(postgres, request, spark, catalogs):
    db, make = request.getfixturevalue("pg_database"), request.getfixturevalue("make_pg_capture")
    for table in DDL:
        postgres.execute(
            f"CREATE TABLE {table} (id int PRIMARY KEY, v int, note text)",
            f"INSERT INTO {table} SELECT i, i, 'row' || i FROM generate_series(1, 300) i",
            database=db,
        )
    capture = make(column_rewrites="accept").start()
    capture.wait_running()
    config = capture.config.model_copy(update={"merge": catalogs["hadoop"].model_copy(update={"namespace": db})})
    workload = Workload(postgres, db, "busy", 100_000, seed=5, key_changes=False)
    workload.start()
    try:
        for table, where in (("busy", "HIGH"), ("quiet", "LOW")):

            def wrap(source, table=table, where=where):
                return AlterAt(source, lambda _: postgres.execute(*DDL[table], database=db)).at(4, where, "ddl")

            run_dump(capture, f"public.{table}", chunk_size=25, wrap=wrap)
            if table == "busy":
                run_merge(spark, config, "src")  # a merge in between: the target gets the new column
    finally:
        workload.stop()
    postgres.execute("UPDATE quiet SET v = v + 1 WHERE id = 9", database=db)
    wait_until_landed(postgres, db, capture)
    run_merge(spark, config, "src")
    for table in DDL:
        want = {k: {c: plain(v) for c, v in row.items()} for k, row in table_state(postgres, db, table).items()}
        state = iceberg_state(spark, f"logtide.{db}.public__{table}")
        got = {k: {c: row.get(c) for c in want[k]} if k in want else row for k, row in state.items()}
        assert got == want, f"{table}:\n{differences(got, want)}"
    assert capture.stop() == 0


@pytest.mark.parametrize("old, new", [("id", "v2"), ("v2", "id")])
def test_changes_before_a_key_swap_converge(postgres, request, spark, catalogs, old, new):
    """A key swapped (`DROP CONSTRAINT ...; ADD PRIMARY KEY (new)`, `column_rewrites: accept`) after
    changes the log names by the old key only: a DELETE's old tuple holds the old key (REPLICA IDENTITY
    DEFAULT: the new key's column is NULL), an UPDATE of the future key column carries no old tuple at
    all. The merge names rows by the newest key: on main those deletes deleted nothing (the deleted row
    stayed until a full dump) and the update left the row under its former new-key value beside the
    updated one. Now each such event is resolved to its row under the new key from the row's state by
    the old key (the target, the run's earlier events, a chunk row): the target equals the source after
    the first merge, also for a row inserted, or updated, in the same run before the swap, and a row
    that came into the run from a chunk read before its delete (`dumped`), in both directions."""
    db, make = request.getfixturevalue("pg_database"), request.getfixturevalue("make_pg_capture")
    for table in ("swapped", "dumped"):
        postgres.execute(
            f"CREATE TABLE {table} (id int, v int, v2 int NOT NULL, PRIMARY KEY ({old}))",
            f"INSERT INTO {table} SELECT i, i, 1000 + i FROM generate_series(1, 100) i",
            database=db,
        )
    capture = make(column_rewrites="accept").start()
    capture.wait_running()
    config = capture.config.model_copy(update={"merge": catalogs["hadoop"].model_copy(update={"namespace": db})})
    postgres.execute("UPDATE swapped SET v = v + 1", database=db)  # every row lands: the target holds them
    postgres.execute("UPDATE dumped SET v = v + 1 WHERE id = 1", database=db)  # the log describes it
    wait_until_landed(postgres, db, capture)
    run_merge(spark, config, "src")
    run_dump(capture, "public.dumped", chunk_size=30)  # its rows come into the target in the next run
    postgres.execute(
        "DELETE FROM swapped WHERE id = 2",
        "INSERT INTO swapped VALUES (101, 101, 1101)",
        "DELETE FROM swapped WHERE id = 101",  # inserted in the same run
        "UPDATE swapped SET v2 = v2 + 5000 WHERE id = 4",  # the future key changed: no old tuple
        f"UPDATE swapped SET {old} = {old} + 5000 WHERE id = 5",  # a key change under the old key
        "UPDATE swapped SET v2 = v2 + 7000 WHERE id = 6",
        "DELETE FROM swapped WHERE id = 6",  # its new-key value is the update's
        "DELETE FROM dumped WHERE id = 7",
        database=db,
    )
    for table in ("swapped", "dumped"):
        postgres.execute(
            f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey", f"ALTER TABLE {table} ADD PRIMARY KEY ({new})",
            database=db,
        )  # fmt: skip
    postgres.execute("UPDATE swapped SET v = 0 WHERE id = 9", "DELETE FROM swapped WHERE id = 3", database=db)
    postgres.execute("UPDATE dumped SET v = 0 WHERE id = 9", database=db)  # its newest file: the new key

    def merged(table: str) -> str:
        want = {k: {c: plain(v) for c, v in row.items()} for k, row in table_state(postgres, db, table, KEY).items()}
        got = iceberg_state(spark, f"logtide.{db}.public__{table}", KEY)
        replayed = changelog_replay(spark, f"logtide.{db}.public__{table}__changelog", (new,))
        assert {tuple(r[k] for k in KEY): r for r in replayed.values()} == got  # the changelog replays to it
        return differences(got, want)

    wait_until_landed(postgres, db, capture)
    run_merge(spark, config, "src")
    assert merged("swapped") == "" and merged("dumped") == ""
    run_dump(capture, "public.swapped", chunk_size=30)  # a dump under the new key repairs nothing more
    postgres.execute("UPDATE swapped SET v = 1 WHERE id = 9", database=db)
    wait_until_landed(postgres, db, capture)
    run_merge(spark, config, "src")
    assert merged("swapped") == ""
    assert capture.stop() == 0
