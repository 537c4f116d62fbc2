"""The column-wise pgoutput path (split_tuples -> typed images -> ColumnBatch -> landing file)
against the message-by-message rules it replaced: same changes, same images, same missing
columns, for random mixes of inserts, updates (old key, old row, none), deletes, key changes
and unchanged TOASTed values. No server: messages are built as pgoutput sends them."""

from __future__ import annotations

import random
import struct
from datetime import UTC, datetime
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from capture.events import Change, ChangeBatch, Column, Lsn, Op, TableSchema, TransactionEnd
from capture.landing import Checkpoint, LandingZone
from capture.landing.log_writer import ColumnBatch, LogWriter, column_batch
from capture.sources.postgres import pgoutput
from capture.sources.postgres.reader import _changes, _Table
from capture.sources.postgres.types import TypeInfo, builder, column_type, is_text

pytestmark = pytest.mark.unit

U = pgoutput.UNCHANGED
NOW = datetime(2026, 1, 1, tzinfo=UTC)
INFOS = {
    "id": TypeInfo(20, "int8", "b", None, -1),
    "name": TypeInfo(25, "text", "b", None, -1),
    "amount": TypeInfo(1700, "numeric", "b", None, (12 << 16 | 2) + 4),
    "doc": TypeInfo(25, "text", "b", None, -1),  # the TOASTed one
}
NAMES = tuple(INFOS)


def _table(identity: tuple[str, ...] = ("id",)) -> _Table:
    columns = tuple(Column(n, column_type(i)[0], i.name) for n, i in INFOS.items())
    schema = TableSchema("public", "t", columns, ("id",))
    builders = [None if is_text(c.arrow_type) else builder(INFOS[c.name]) for c in columns]
    missing = tuple(n for n in NAMES if n not in identity)
    return _Table(schema, builders, schema.key_indexes, identity, missing, True, False)


def _tuple(values: list) -> bytes:
    out = struct.pack(">h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is U:
            out += b"u"
        else:
            data = v.encode()
            out += b"t" + struct.pack(">I", len(data)) + data
    return out


def _message(kind: str, old_kind: str | None, old: list | None, new: list | None) -> bytes:
    out = kind.encode() + struct.pack(">I", 16392)
    if old is not None:
        out += old_kind.encode() + _tuple(old)
    if new is not None:
        out += b"N" + _tuple(new)
    return out


def _reference(table: _Table, change: pgoutput.RowChange) -> list[tuple[Op, list | None, list | None, tuple]]:
    """The message-by-message rules of the previous reader (`_pend`). One addition: should an old
    row image carry an "unchanged" marker (PostgreSQL inlines a FULL old row's TOASTed values, so
    it does not today), a delete names that column as missing; the previous reader failed there."""
    names = table.schema.names
    old, new = change.old, change.new
    before_missing: tuple[str, ...] = ()
    if old is not None and change.old_kind == "K":
        before_missing = tuple(n for n in names if n not in table.identity_names)
    elif old is not None:
        before_missing = tuple(n for n, v in zip(names, old, strict=True) if v is U)
    if change.kind == "I":
        return [(Op.CREATE, None, new, ())]
    if change.kind == "D":
        return [(Op.DELETE, old, None, before_missing)]
    if U in new and old is not None and change.old_kind == "O":
        new = [o if v is U else v for v, o in zip(new, old, strict=True)]
    after_missing = tuple(n for n, v in zip(names, new, strict=True) if v is U)
    if old is not None and any(old[i] != new[i] and new[i] is not U for i in table.key_indexes):
        return [(Op.DELETE, old, None, before_missing), (Op.CREATE, None, new, after_missing)]
    return [(Op.UPDATE, old if change.old_kind == "O" else None, new, after_missing)]


def _typed(image: list | None) -> tuple | None:
    if image is None:
        return None
    ident, name, amount, doc = (None if v is U else v for v in image)
    return (None if ident is None else int(ident), name, None if amount is None else Decimal(amount), doc)


def _random_messages(rng: random.Random, count: int) -> list[bytes]:
    def row(key: int, toast: bool) -> list:
        doc = U if toast and rng.random() < 0.5 else rng.choice([None, "", "d" * rng.randint(1, 40), "é🎉"])
        return [str(key), rng.choice([None, "", 'n,"x"\n', "name"]), rng.choice([None, "1.50", "-0.01"]), doc]

    messages = []
    for _ in range(count):
        key = rng.randint(1, 50)
        choice = rng.random()
        if choice < 0.3:
            messages.append(_message("I", None, None, row(key, False)))
        elif choice < 0.45:
            messages.append(_message("D", "K", [str(key), None, None, None], None))
        elif choice < 0.55:
            messages.append(_message("D", "O", row(key, False), None))
        elif choice < 0.7:
            messages.append(_message("U", None, None, row(key, True)))
        elif choice < 0.85:
            new_key = key if rng.random() < 0.6 else key + 100
            messages.append(_message("U", "K", [str(key), None, None, None], row(new_key, True)))
        else:
            new_key = key if rng.random() < 0.6 else key + 100
            messages.append(_message("U", "O", row(key, True), row(new_key, True)))
    return messages


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_column_wise_changes_equal_the_message_by_message_rules(seed):
    rng = random.Random(seed)
    table = _table()
    for size in (1, 7, 300):
        messages = _random_messages(rng, size)
        expected = [e for m in messages for e in _reference(table, pgoutput.parse_change(m))]
        batch = column_batch(table.schema, "745", NOW, False, 0x1_0000_0010, 3, *_changes(table, messages))
        got = batch.changes
        assert [c.lsn for c in got] == [Lsn(0x1_0000_0010, 3 + i) for i in range(len(expected))]
        assert [(c.op, c.before, c.after, c.missing) for c in got] == [
            (op, _typed(before), _typed(after), missing) for op, before, after, missing in expected
        ]


def test_inserts_only_take_the_bulk_path_and_keep_types():
    table = _table()
    messages = [_message("I", None, None, [str(i), f"n{i}", "12.30", None]) for i in range(5)]
    ops, before, after, missing = _changes(table, messages)
    assert ops.to_pylist() == ["c"] * 5 and before.null_count == 5 and missing is None
    assert after.type == table.schema.row_type
    assert after.to_pylist()[2] == {"id": 2, "name": "n2", "amount": Decimal("12.30"), "doc": None}


def test_split_tuples_refuses_binary_values_and_wrong_widths():
    binary = b"I" + struct.pack(">I", 7) + b"N" + struct.pack(">h", 1) + b"b" + struct.pack(">I", 1) + b"x"
    octets = pgoutput.message_octets(binary)
    with pytest.raises(ValueError, match="binary mode is off"):
        pgoutput.split_tuples(octets, pa.array([6], pa.int64()), 1)
    with pytest.raises(ValueError, match="2 columns"):
        pgoutput.split_tuples(octets, pa.array([6], pa.int64()), 2)
    bad_utf8 = b"I" + struct.pack(">I", 7) + b"N" + struct.pack(">h", 1) + b"t" + struct.pack(">I", 1) + b"\xff"
    with pytest.raises(pa.ArrowInvalid):
        pgoutput.split_tuples(pgoutput.message_octets(bad_utf8), pa.array([6], pa.int64()), 1)


def test_a_column_batch_lands_exactly_as_the_same_change_rows(tmp_path):
    """The writer's Arrow path and its row path give the same file contents."""
    table = _table()
    messages = _random_messages(random.Random(7), 200)
    files = []
    for kind in ("columns", "rows"):
        zone = LandingZone(tmp_path / kind, "src")
        start = Checkpoint(Lsn(1), {"lsn": "0/1"})
        zone.write_checkpoint(start)
        writer = LogWriter(zone, start, flush_interval_s=60, max_buffer_rows=10_000)
        for major in (10, 20):
            batch = column_batch(table.schema, str(major), NOW, major == 20, major, 0, *_changes(table, messages))
            if kind == "rows":
                batch = ChangeBatch(batch.table, batch.txid, batch.commit_ts, batch.watermark, list(batch.changes))
            else:
                assert isinstance(batch, ColumnBatch)
            writer.add(batch)
            writer.end_transaction(TransactionEnd(Lsn(major + 1), {"lsn": f"0/{major + 1}"}, NOW))
        writer.commit()
        (path,) = zone.committed_files("public.t")
        files.append(pq.read_table(path))
    columns, rows = files
    assert columns.schema == rows.schema and columns.schema.metadata == rows.schema.metadata
    assert columns.to_pylist() == rows.to_pylist()
    assert any(r["_missing"] for r in rows.to_pylist())


def test_column_batch_changes_round_trip():
    table = _table()
    change = Change(Lsn(9, 2), Op.UPDATE, None, (1, "a", Decimal("1.00"), None), ("doc",))
    batch = column_batch(
        table.schema,
        "1",
        NOW,
        False,
        9,
        2,
        pa.array(["u"]),
        pa.nulls(1, table.schema.row_type),
        pa.array([{"id": 1, "name": "a", "amount": Decimal("1.00"), "doc": None}], table.schema.row_type),
        pa.array([["doc"]], pa.list_(pa.string())),
    )
    assert batch.changes == [change] and batch.events.num_rows == 1
