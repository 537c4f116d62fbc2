"""One definition of a changed key (`KeySignature`): a whole dump reads the table again
(`stale_changes`) exactly where a key list or range dump stops (`_refuse_rekeyed`), and other columns'
changes touch neither's key verdict. Messages as before the two shared it."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

from capture.dump.engine import KeySignature, _Plan, _refuse_rekeyed, stale_changes
from capture.errors import DumpInputError
from capture.events import Column, TableSchema

pytestmark = pytest.mark.unit


def _table(key: tuple[str, ...] = ("id",), id_type: str = "integer", exact: bool = True, v: str = "int") -> TableSchema:
    columns = (Column("id", pa.int32(), id_type), Column("v", pa.int32(), v))
    return TableSchema("public", "ledger", columns, key, exact_key_order=exact)


CASES = {
    "replaced": (_table(("id", "v")), "key (id) is now (id, v)", "from (id) to (id, v)"),
    "retyped": (_table(id_type="text"), "key (id) retyped", "from (id integer) to (id text)"),
    "reordered": (_table(exact=False), "key (id) retyped", "from (id integer) to (id integer, ordered another way)"),
    "other_column": (_table(v="bigint"), None, None),
    "same": (_table(), None, None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_whole_dump_reads_again_where_a_key_range_dump_stops(case):
    before = _table()
    after, stale, refused = CASES[case]
    assert (KeySignature.of(before) != KeySignature.of(after)) == (stale is not None)
    found = [c for c in stale_changes(before, after, []) if c.startswith("key")]
    assert [c[: len(stale)] for c in found] == ([] if stale is None else [stale])
    _refuse_rekeyed(_Plan(before, None, None, None), before, after)  # a whole dump never stops here
    ranged = _Plan(before, None, (1,), (150,))
    if refused is None:
        _refuse_rekeyed(ranged, before, after)
    else:
        with pytest.raises(DumpInputError, match=rf"changed during the dump, {re.escape(refused)}:"):
            _refuse_rekeyed(ranged, before, after)
