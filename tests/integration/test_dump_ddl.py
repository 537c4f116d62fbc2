"""DDL during a MariaDB dump that the dump cannot go on through: the table renamed away or left
without a key, or a key-range dump whose key was replaced. The dump stops with a message that says
what happened and what to do (not "does not exist" or a driver's formatting error), and the
landing zone still rebuilds the source. The DDL it goes on through is checked end to end, through
the merge, in tests/spark/test_merge_ddl_during_dump.py."""

from __future__ import annotations

import logging

import pytest

from capture.dump.control import DumpSettings
from capture.dump.engine import DumpEngine, DumpRequest
from capture.errors import DumpInputError
from capture.sources import open_chunk_source
from tests.integration.dumping import (
    Died,
    DiesBeforeHigh,
    StatementAt,
    edit_progress,
    landed_rows,
    populate_ledger,
    reconciled_state,
    table_rows,
    wait_until_landed,
)

pytestmark = pytest.mark.integration


def _dump(capture, mariadb, database: str, where: str, sql: str, **request) -> None:
    """The ledger dumped in 20-row chunks, `sql` run at `where` of chunk 3."""
    source = open_chunk_source("src", capture.config.source("src"))
    wrapped = StatementAt(source, lambda text: mariadb.execute(text, database=database), 3, where, sql)
    settings = DumpSettings(chunk_size=20)
    try:
        DumpEngine(wrapped, capture.zone).run(DumpRequest(tables=[f"{database}.ledger"], settings=settings, **request))
    finally:
        source.close()


def test_a_table_renamed_away_during_the_dump_stops_it_saying_so(mariadb, database, make_capture):
    populate_ledger(mariadb, database, 200)
    capture = make_capture([f"{database}.ledger"]).start()  # the new name is not captured: a truncate lands
    capture.wait_running()
    with pytest.raises(DumpInputError) as info:
        _dump(capture, mariadb, database, "before LOW", "RENAME TABLE ledger TO ledger_gone")
    message = str(info.value)
    assert "went away during dump" in message and "at chunk 3" in message and "renamed" in message
    wait_until_landed(mariadb, capture)
    assert reconciled_state(capture, database, "ledger")[0] == {}  # as the source: no table ledger


def test_a_key_dropped_during_the_dump_stops_it_saying_so(mariadb, database, make_capture):
    populate_ledger(mariadb, database, 200)
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    with pytest.raises(DumpInputError) as info:
        _dump(capture, mariadb, database, "before HIGH", "ALTER TABLE ledger DROP PRIMARY KEY")
    assert "lost its key during dump" in str(info.value) and "at chunk 3" in str(info.value)


@pytest.mark.parametrize("where", ["before LOW", "before HIGH"])
def test_a_key_replaced_during_a_key_range_dump_stops_it_and_a_whole_dump_reads_again(
    mariadb, database, make_capture, where
):
    populate_ledger(mariadb, database, 200)
    capture = make_capture([f"{database}.*"]).start()
    capture.wait_running()
    swap = "ALTER TABLE ledger DROP PRIMARY KEY, ADD PRIMARY KEY (id, v)"
    with pytest.raises(DumpInputError) as info:  # main: "not enough arguments for format string"
        _dump(capture, mariadb, database, where, swap, key_from=[10], key_to=[150])
    assert "the key of" in str(info.value) and "changed during the dump, from (id) to (id, v)" in str(info.value)
    # a whole dump under the other key goes on: read again from the first key, under the new one
    _dump(capture, mariadb, database, where, "ALTER TABLE ledger DROP PRIMARY KEY, ADD PRIMARY KEY (id)")
    wait_until_landed(mariadb, capture)
    assert landed_rows(capture, database, "ledger") == table_rows(mariadb, database, "ledger")


def test_a_dump_resumed_after_an_alter_reads_the_table_again(mariadb, database, make_capture):
    """A dump killed at chunk 4, a narrowing ALTER (accepted by capture) while it was down, the dump
    resumed by its id: on main it went on after chunk 3, whose rows kept 'row1'..'row60' where the
    source shows 'row' (the ALTER writes no row events); now it reads the table again from its first key."""
    populate_ledger(mariadb, database, 200)
    capture = make_capture([f"{database}.*"], column_rewrites="accept").start()
    capture.wait_running()
    request = DumpRequest(dump_id="resumed", tables=[f"{database}.ledger"], settings=DumpSettings(chunk_size=20))
    source = open_chunk_source("src", capture.config.source("src"))
    try:
        with pytest.raises(Died):
            DumpEngine(DiesBeforeHigh(source, 4), capture.zone).run(request)
        mariadb.execute("SET SESSION sql_mode = ''", "ALTER TABLE ledger MODIFY note VARCHAR(3)", database=database)
        DumpEngine(source, capture.zone).run(request)
    finally:
        source.close()
    wait_until_landed(mariadb, capture)
    assert landed_rows(capture, database, "ledger") == table_rows(mariadb, database, "ledger")


@pytest.mark.parametrize(
    "ddl",
    [
        "ALTER TABLE ledger MODIFY note VARCHAR(3)",  # gives rows 1-60 'row' for 'row1'..'row60'
        "ALTER TABLE ledger ADD COLUMN a INT DEFAULT 7",  # gives rows 1-60 a = 7
    ],
)
def test_a_dump_resumed_from_a_progress_file_without_its_shape_reads_the_table_again(
    mariadb, database, make_capture, caplog, ddl
):
    """A progress file written before progress kept the table's shape (the field removed, as an older
    version wrote it) cannot tell whether the table changed while the dump was stopped. On main the
    resumed dump went on after chunk 3, whose rows kept their old values (a narrowed note, `a` NULL
    where the source has 7: the ALTER writes no row events); now it reads the table again from its
    first key, saying why."""
    populate_ledger(mariadb, database, 200)
    capture = make_capture([f"{database}.*"], column_rewrites="accept").start()
    capture.wait_running()
    request = DumpRequest(dump_id="older", tables=[f"{database}.ledger"], settings=DumpSettings(chunk_size=20))
    source = open_chunk_source("src", capture.config.source("src"))
    try:
        with pytest.raises(Died):
            DumpEngine(DiesBeforeHigh(source, 4), capture.zone).run(request)
        edit_progress(capture.zone, "older", lambda data: data.pop("shape"))
        mariadb.execute("SET SESSION sql_mode = ''", ddl, database=database)
        with caplog.at_level(logging.INFO):
            summary = DumpEngine(source, capture.zone).run(request)
    finally:
        source.close()
    wait_until_landed(mariadb, capture)
    assert landed_rows(capture, database, "ledger") == table_rows(mariadb, database, "ledger")
    assert "records no shape" in caplog.text
    assert summary["tables"][0]["chunks"] == 3 + 200 // 20 + 1  # chunks 4.. read the table from its first key


class AltersEveryChunk:
    """The real chunk source, except that another connection adds a column right before each HIGH
    from chunk 2 on (`limit` times): the table changes faster than a dump can read it."""

    def __init__(self, source, execute, limit: int) -> None:
        self._source, self._execute, self.left, self.added = source, execute, limit, 0

    def __getattr__(self, name: str):
        return getattr(self._source, name)

    def write_watermark(self, mark, table=None) -> None:
        if mark.kind == "HIGH" and mark.chunk >= 2 and self.left:
            self.left -= 1
            self.added += 1
            self._execute(f"ALTER TABLE ledger ADD COLUMN c{self.added} INT DEFAULT {self.added}")
        self._source.write_watermark(mark, table)


def test_a_table_altered_every_chunk_stops_the_dump_saying_so_and_a_rerun_finishes_it(mariadb, database, make_capture):
    """Each ADD COLUMN ... DEFAULT gives every row a value no row event carries: the dump reads the chunk
    again, and the table from its start once chunks were read before it. A table altered at every chunk
    would never finish (on main the dump read chunks again for as long as the ALTERs came). Now the
    eleventh change in one run stops it with a message that says so; run again by its id once the ALTERs
    stop, it finishes and the landing zone rebuilds the table."""
    populate_ledger(mariadb, database, 200)
    capture = make_capture([f"{database}.*"], column_rewrites="accept").start()
    capture.wait_running()
    request = DumpRequest(dump_id="busy", tables=[f"{database}.ledger"], settings=DumpSettings(chunk_size=20))
    source = open_chunk_source("src", capture.config.source("src"))
    try:
        altering = AltersEveryChunk(source, lambda text: mariadb.execute(text, database=database), limit=40)
        with pytest.raises(DumpInputError) as info:
            DumpEngine(altering, capture.zone).run(request)
        message = str(info.value)
        assert "changed under dump busy 11 times in this run" in message, message
        assert "--dump-id busy" in message
        assert altering.added == 11  # it stopped at the eleventh change, not at the fortieth
        DumpEngine(source, capture.zone).run(request)
    finally:
        source.close()
    wait_until_landed(mariadb, capture)
    assert landed_rows(capture, database, "ledger") == table_rows(mariadb, database, "ledger")
