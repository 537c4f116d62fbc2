"""The server's global sql_mode must not change what Logtide reads. Two modes change what a SELECT
returns: PAD_CHAR_TO_FULL_LENGTH pads CHAR(n) values to n with blanks (the binlog carries them
trimmed), and EMPTY_STRING_IS_NULL reads the literal '' as NULL (in the catalog queries'
`COALESCE(..., '')`, and in a bound key '' of a keyset read). On main, under the first, a dump
landed every CHAR key padded and the log trimmed, so each row the log changed had two keys in the
reconciled table ('a' and 'a     '); under the second, a dump refused every table as one that "does
not exist". Logtide's connections now set their own sql_mode."""

from __future__ import annotations

import pytest

from tests.integration.dumping import reconciled_state, run_dump, wait_until_landed

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("mode", ["PAD_CHAR_TO_FULL_LENGTH", "EMPTY_STRING_IS_NULL"])
def test_the_servers_sql_mode_does_not_change_what_lands(mariadb, database, make_capture, mode):
    mariadb.execute(
        "CREATE TABLE c (k CHAR(6) NOT NULL PRIMARY KEY, v CHAR(4), s VARCHAR(10))",
        "INSERT INTO c VALUES ('', 'a', ''), ('x y', NULL, 'x'), ('a', 'b ', ' '), ('b', '', 'q'), ('c', 'z', ''),"
        " ('d', 'y', 'y'), ('e', 'e', 'e')",
        database=database,
    )
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.sql_mode")
        before = cur.fetchone()[0]
        cur.execute(f"SET GLOBAL sql_mode = '{mode}'")  # the sessions Logtide opens from now on
    try:
        capture = make_capture([f"{database}.*"]).start()
        capture.wait_running()
        mariadb.execute("UPDATE c SET s = 'u' WHERE k = 'a'", "INSERT INTO c VALUES ('f', 'f', 'f')", database=database)
        assert run_dump(capture, f"{database}.c", 2)["tables"][0]["rows"] == 8
        mariadb.execute("UPDATE c SET v = 'w' WHERE k = 'b'", "DELETE FROM c WHERE k = ''", database=database)
        wait_until_landed(mariadb, capture)
    finally:
        mariadb.execute(f"SET GLOBAL sql_mode = '{before}'")
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.execute("SELECT k, v, s FROM c")
        source = sorted(cur.fetchall())
    state, _ = reconciled_state(capture, database, "c")
    assert sorted((r["k"], r["v"], r["s"]) for r in state.values()) == source
