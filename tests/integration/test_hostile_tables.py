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


def _set_text(number: int, members: tuple[str, ...]) -> str:
    """A SET's landed text: its members in definition order joined by ',', the '' member alone as ','."""
    text = ",".join(m for n, m in enumerate(members) if number >> n & 1)
    return "," if text == "" and number else text


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "members, charset",
    [(("a", "", "b"), "latin1"), (("", "a"), "utf8mb4"), (("é", "", "😀"), "utf16")],
    ids=["empty_second", "empty_first", "utf16"],
)
def test_a_set_with_an_empty_member_lands_every_value_as_its_own_key(mariadb, database, make_capture, members, charset):
    """A SET's '' member does not show in the server's text where no member before it is in the value:
    in SET('a','','b') the empty set and {''} both read '', {b} and {'',b} both 'b'. On main a dump
    landed such rows as one key (two source rows, one target row), and the log, which joins the
    members itself (',b'), landed one row as two keys. Now both land the members joined by ','
    (',b', 'a,', the text the server reads back as that value) and {''} alone as ','."""
    spelled = ", ".join(f"'{m}'" for m in members)
    numbers = range(1 << len(members))
    mariadb.execute(
        f"CREATE TABLE sz (s SET({spelled}) CHARACTER SET {charset} NOT NULL, i INT NOT NULL, v INT,"
        " PRIMARY KEY (s, i))",
        "INSERT INTO sz VALUES " + ", ".join(f"({n}, {i}, {n * 10 + i})" for n in numbers for i in (1, 2)),
        database=database,
    )
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    run_dump(capture, f"{database}.sz", 3)
    empty = 1 << members.index("")
    mariadb.execute(  # the log: inserts, updates by value and of the key, deletes
        f"INSERT INTO sz VALUES (0, 3, 1), ({empty | (1 << (len(members) - 1))}, 3, 3)",
        f"UPDATE sz SET v = v + 100 WHERE s + 0 = {empty} AND i = 1",
        f"UPDATE sz SET s = {empty} WHERE s + 0 = 0 AND i = 3",  # the key from the empty set to {''}
        "DELETE FROM sz WHERE s + 0 = 0 AND i = 2",
        f"UPDATE sz SET s = 0 WHERE s + 0 = {empty} AND i = 2",  # and back, onto a freed key
        f"DELETE FROM sz WHERE s + 0 = {len(members) - 1} AND i = 1",
        database=database,
    )
    wait_until_landed(mariadb, capture)
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.execute("SELECT s + 0, i, v FROM sz")
        source = sorted((_set_text(n, members), i, v) for n, i, v in cur.fetchall())
    state, _ = reconciled_state(capture, database, "sz")
    assert sorted((r["s"], r["i"], r["v"]) for r in state.values()) == source
    run_dump(capture, f"{database}.sz", 2)  # a second full dump over the log's rows
    keys = [[_set_text(n, members), 1] for n in numbers] + [[",", 9]]
    summary = run_dump(capture, DumpRequest(dump_id="szkeys", tables=[f"{database}.sz"], keys=keys))
    assert summary["tables"][0]["rows"] == sum(1 for _, i, _ in source if i == 1)
    ranged = DumpRequest(dump_id="szrange", tables=[f"{database}.sz"], key_from=[",", 0], key_to=[",", 9])
    summary = run_dump(capture, ranged)  # ',' names {''} alone in a range too
    assert summary["tables"][0]["rows"] == sum(1 for s, _, _ in source if s == ",")
    wait_until_landed(mariadb, capture)
    state, _ = reconciled_state(capture, database, "sz")
    assert sorted((r["s"], r["i"], r["v"]) for r in state.values()) == source


@pytest.mark.timeout(300)
def test_a_set_key_with_its_64th_member_is_dumped_whole(mariadb, database, make_capture):
    """A SET of 64 members: with its last member, `s + 0` reads negative (-2^63) and the server compares
    the column with a number as signed, while ORDER BY sorts it unsigned. On main a chunk bound `s > 2`
    left out every row with the 64th member (here the '' member: ',' and 'm0,'), and the dump ended
    without them; a range from ',' (that member alone) found no row."""
    members = tuple([f"m{n}" for n in range(63)] + [""])
    spelled = ", ".join(f"'{m}'" for m in members)
    values = [0, 1, 2, 3, 1 << 62, 1 << 63, (1 << 63) | 1, (1 << 63) | 2, (1 << 64) - 1]
    mariadb.execute(
        f"CREATE TABLE s64 (s SET({spelled}) NOT NULL, i INT NOT NULL, v INT, PRIMARY KEY (s, i))",
        "INSERT INTO s64 VALUES " + ", ".join(f"({n}, {i}, {n % 1000 + i})" for n in values for i in (1, 2)),
        database=database,
    )
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    summary = run_dump(capture, f"{database}.s64", 3)
    assert summary["tables"][0]["rows"] == 2 * len(values)
    ranged = DumpRequest(dump_id="s64range", tables=[f"{database}.s64"], key_from=[",", 2], key_to=["m0,", 1])
    assert run_dump(capture, ranged)["tables"][0]["rows"] == 2  # ({''}, 2) and ({m0, ''}, 1)
    mariadb.execute("UPDATE s64 SET v = -v WHERE s + 0 < 0 AND i = 1", database=database)
    wait_until_landed(mariadb, capture)
    state, _ = reconciled_state(capture, database, "s64")
    expected = sorted(
        (_set_text(n, members), i, -(n % 1000 + i) if n >> 63 and i == 1 else n % 1000 + i)
        for n in values
        for i in (1, 2)
    )
    assert sorted((r["s"], r["i"], r["v"]) for r in state.values()) == expected


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
