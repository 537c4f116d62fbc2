"""The hostile tables (`hostile`): rows written before capture starts (only a dump has them),
changed while the dump reads them; the landed log and chunks rebuild each table as the source
shows it (`reconcile`; `tests/spark/test_merge_hostile` merges them)."""

from __future__ import annotations

import pytest

from tests.integration.dumping import reconciled_state
from tests.integration.hostile import TABLES, dump_while_writing, rows, source_state

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("drop_database_afterwards")]


@pytest.mark.parametrize("watermarks", ["table", "readonly"])
def test_hostile_tables_converge(mariadb, database, make_capture, watermarks):
    capture = dump_while_writing(mariadb, database, make_capture, 7, watermarks=watermarks)
    for table in TABLES:
        state, stats = reconciled_state(capture, database, table)
        assert stats.chunks_pending == 0
        assert rows(state) == rows(source_state(mariadb, database, table)), table
