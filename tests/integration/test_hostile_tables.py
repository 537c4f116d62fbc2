"""The hostile tables (`hostile`): rows written before capture starts (only a dump has them),
changed while the dump reads them; the landed log and chunks rebuild each table as the source
shows it (`reconcile`; `tests/spark/test_merge_hostile` merges them)."""

from __future__ import annotations

import pytest

from tests.integration.dumping import reconciled_state, run_dump, wait_until_landed
from tests.integration.hostile import TABLES, Writer, populate, rows, source_state

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("drop_database_afterwards")]


@pytest.mark.parametrize("watermarks", ["table", "readonly"])
def test_hostile_tables_converge(mariadb, database, make_capture, watermarks):
    populate(mariadb, database)
    capture = make_capture([f"{database}.*"], watermarks=watermarks).start()
    capture.wait_running()
    writer = Writer(mariadb, database, 3)
    writer.start()
    try:
        for table in TABLES:
            run_dump(capture, f"{database}.{table}", 7)
    finally:
        writer.stop()
    wait_until_landed(mariadb, capture)
    assert writer.statements > 100
    for table in TABLES:
        state, stats = reconciled_state(capture, database, table)
        assert stats.chunks_pending == 0
        source = source_state(mariadb, database, table)
        assert rows(state) == rows(source), table
