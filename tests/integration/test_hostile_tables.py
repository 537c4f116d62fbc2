"""The hostile tables (`hostile`): rows written before capture starts (only a dump has them),
changed while the dump reads them; the landed log and chunks rebuild each table as the source
shows it (`reconcile`; `tests/spark/test_merge_hostile` merges them). They found the dump
skipping the rows of an ENUM key past its first member (`test_an_enum_or_set_key_is_dumped_whole`)."""

from __future__ import annotations

import pytest

from capture.dump.control import DumpSettings
from capture.dump.engine import DumpEngine, DumpRequest
from capture.errors import DumpInputError
from capture.sources import open_chunk_source
from tests.integration.dumping import Died, DiesBeforeHigh, reconciled_state, run_dump, wait_until_landed
from tests.integration.hostile import TABLES, dump_while_writing, rows, source_state

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("drop_database_afterwards")]


@pytest.mark.parametrize("watermarks", ["table", "readonly"])
def test_hostile_tables_converge(mariadb, database, make_capture, watermarks):
    capture = dump_while_writing(mariadb, database, make_capture, 7, watermarks=watermarks)
    for table in TABLES:
        state, stats = reconciled_state(capture, database, table)
        assert stats.chunks_pending == 0
        assert rows(state) == rows(source_state(mariadb, database, table)), table


def test_an_enum_or_set_key_is_dumped_whole(mariadb, database, make_capture):
    """MariaDB orders ENUM and SET values by their number (member order, bits), but compares one
    with a string by its text: on main the chunk SELECT's `e > 'z'` after the first chunk found no
    row, and the dump ended there, with the rows of 'b', 'a' and '' (and of every SET value but
    the first) never read."""
    mariadb.execute(
        "CREATE TABLE ek (e ENUM('z','b','a','') NOT NULL, s SET('y','x') NOT NULL, i INT NOT NULL,"
        " PRIMARY KEY (e, s, i))",
        "INSERT INTO ek VALUES "
        + ", ".join(f"('{e}', '{s}', {i})" for e in "zba" for s in ("", "y", "x", "y,x") for i in range(3))
        + ", ('', 'x', 1)",
        database=database,
    )
    _assert_dumped_whole(mariadb, database, make_capture, "ek", 37)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "members, values",
    [
        ("'z','b','a',''", "('bogus', 1), ('bogus', 2), ('bogus', 3), ('z', 1), ('a', 1), ('', 10), ('', 11)"),
        (
            "'z','a\\\\b','it''s','n\\nl','a'",
            "('a\\\\b', 1), ('a\\\\b', 2), ('a\\\\b', 3), ('z', 1), ('a', 1), ('it''s', 1), ('it''s', 2),"
            " ('it''s', 3), ('n\\nl', 1), ('n\\nl', 2), ('n\\nl', 3)",
        ),
    ],
    ids=["error_value_and_empty_member", "escaped"],
)
def test_enum_members_that_read_back_ambiguously_are_dumped_whole(mariadb, database, make_capture, members, values):
    """The error value (number 0, which permissive sql_mode writes) and a real '' member (4) both
    read back as '': on main a chunk ending on an error-value row went on at `e > 4`, skipping
    rows (a full dump's repair then deletes them from the target). A member `a\\b` is shown in
    COLUMN_TYPE with its backslash doubled: on main a chunk ending on it went on at `e > 0`, for ever."""
    mariadb.execute(
        "SET SESSION sql_mode = ''",
        f"CREATE TABLE ee (e ENUM({members}) NOT NULL, i INT NOT NULL, PRIMARY KEY (e, i))",
        f"INSERT INTO ee VALUES {values}",
        database=database,
    )
    _assert_dumped_whole(mariadb, database, make_capture, "ee", values.count("("))


def test_the_enum_error_value_and_a_real_empty_member_land_as_two_keys(mariadb, database, make_capture):
    """The error value (number 0, which permissive sql_mode writes for an invalid value) and a real
    '' member both read back as ''. MariaDB holds (error, 1) and ('', 1) as two keys; on main both
    landed as ('', 1), by the dump and by the log, so the target held one row for the two. The error
    value now lands as ' ' (text no member can have: MariaDB strips members' trailing spaces)."""
    mariadb.execute(
        "SET SESSION sql_mode = ''",
        "CREATE TABLE ez (e ENUM('z','') NOT NULL, i INT NOT NULL, v INT, PRIMARY KEY (e, i))",
        "INSERT INTO ez VALUES ('bogus', 1, 1), ('', 1, 2), ('z', 1, 3), ('bogus', 2, 4), ('', 2, 5)",
        database=database,
    )
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    run_dump(capture, f"{database}.ez", 2)
    mariadb.execute(  # the log's rows: an insert of each, an update of an error-value row
        "SET SESSION sql_mode = ''",
        "INSERT INTO ez VALUES ('bogus', 3, 6), ('', 3, 7)",
        "UPDATE ez SET v = v + 10 WHERE e = 0 AND i = 1",
        "UPDATE ez SET v = v + 20 WHERE e = '' AND i = 2",
        database=database,
    )
    wait_until_landed(mariadb, capture)
    state, _ = reconciled_state(capture, database, "ez")
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.execute("SELECT IF(e = 0, ' ', e), i, v FROM ez")
        source = sorted(cur.fetchall())
    assert len(source) == 7
    assert sorted((r["e"], r["i"], r["v"]) for r in state.values()) == source
    for keys, count in (([[" ", 2]], 1), ([[" ", 9], ["", 9]], 0), ([["z", 1], [" ", 3], ["", 3]], 3)):
        summary = run_dump(capture, DumpRequest(tables=[f"{database}.ez"], keys=keys))  # a key list names ' ' too
        assert summary["tables"][0]["rows"] == count, keys
    wait_until_landed(mariadb, capture)
    state, _ = reconciled_state(capture, database, "ez")
    assert sorted((r["e"], r["i"], r["v"]) for r in state.values()) == source


def test_a_dump_resumed_after_a_chunk_ending_on_the_empty_member_goes_on(mariadb, database, make_capture):
    """A dump that stops after a chunk ending on the '' member, resumed by a new chunk source (as a new
    process: nothing but the landing zone's saved key goes over). On main the saved key '' was taken
    as the lowest number it may name (the error value, 0), the next chunk read the same rows again and
    the dump stopped: 'chunk 2 ends at key ..., as the chunk before it did'."""
    mariadb.execute(
        "SET SESSION sql_mode = ''",
        "CREATE TABLE er (e ENUM('z','') NOT NULL, i INT NOT NULL, PRIMARY KEY (e, i))",
        "INSERT INTO er VALUES ('bogus', 3), ('', 1), ('', 2)",
        database=database,
    )
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    request = DumpRequest(dump_id="er", tables=[f"{database}.er"], settings=DumpSettings(chunk_size=2))
    source = open_chunk_source("src", capture.config.source("src"))
    try:  # chunk 1: (error, 3), ('', 1) (by number: 0, then 2); stop before chunk 2's HIGH
        with pytest.raises(Died):
            DumpEngine(DiesBeforeHigh(source, chunk=2), capture.zone).run(request)
    finally:
        source.close()
    summary = run_dump(capture, request)
    assert summary["tables"][0]["rows"] >= 2
    wait_until_landed(mariadb, capture)
    state, _ = reconciled_state(capture, database, "er")
    assert sorted((r["e"], r["i"]) for r in state.values()) == [("", 1), ("", 2), (" ", 3)]


def test_enum_bounds_match_members_by_the_column_collation(mariadb, database, make_capture):
    """`--from 'B'` names the member 'b' under a _ci collation (on main: number 0, so 'z' was dumped
    too), `--from 'N\\nL'` the member written `'n\\nl'` in COLUMN_TYPE; text that is no member is refused."""
    mariadb.execute(
        "CREATE TABLE eb (e ENUM('z','b','n\\nl','a') COLLATE utf8mb4_general_ci PRIMARY KEY, v INT)",
        "INSERT INTO eb VALUES ('z', 1), ('b', 2), ('n\\nl', 3), ('a', 4)",
        database=database,
    )
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    settings = DumpSettings(chunk_size=1)
    for key_from, count in (("B", 3), ("N\nL", 2)):
        summary = run_dump(capture, DumpRequest(tables=[f"{database}.eb"], key_from=key_from, settings=settings))
        assert summary["tables"][0]["rows"] == count, key_from
    with pytest.raises(DumpInputError, match="'q' is not a member"):
        run_dump(capture, DumpRequest(tables=[f"{database}.eb"], key_from="q", settings=settings))


def test_a_wide_decimal_key_is_dumped_whole(mariadb, database, make_capture):
    """A DECIMAL(65,30) key lands as its text; values a double cannot tell apart (10^34 + n)."""
    mariadb.execute(
        "CREATE TABLE wd (d DECIMAL(65,30) PRIMARY KEY, v INT)",
        "INSERT INTO wd VALUES " + ", ".join(f"(10000000000000000000000000000000000 + {n}, {n})" for n in range(9)),
        "INSERT INTO wd VALUES " + ", ".join(f"(0.{'0' * 29}{n}, {n})" for n in range(1, 9)),
        database=database,
    )
    _assert_dumped_whole(mariadb, database, make_capture, "wd", 17)


def _assert_dumped_whole(mariadb, database: str, make_capture, table: str, count: int) -> None:
    """A dump of `table` in chunks of 2 (no other writes) lands its `count` rows as the source shows them."""
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    summary = run_dump(capture, f"{database}.{table}", 2)
    wait_until_landed(mariadb, capture)
    state, _ = reconciled_state(capture, database, table)
    assert rows(state) == rows(source_state(mariadb, database, table))
    assert summary["tables"][0]["rows"] == count
