"""The column-wise pgoutput path (split_tuples -> typed images -> ColumnBatch -> landing file)
against the message-by-message rules it replaced: same changes, same images, same missing
columns, for random mixes of inserts, updates (old key, old row, none), deletes, key changes
and unchanged TOASTed values; and transactions held in a group and handed over together
against the same transactions handed over one by one. No server: messages are built as
pgoutput sends them."""

from __future__ import annotations

import random
import re
import struct
from datetime import UTC, datetime
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from capture.events import (
    LSN_ARROW_TYPE,
    UTC_MICROS,
    Change,
    ChangeBatch,
    Column,
    ColumnBatch,
    Lsn,
    Op,
    TableSchema,
    TransactionEnd,
    column_batch,
)
from capture.landing import Checkpoint, LandingZone
from capture.landing.log_writer import LogWriter
from capture.sources.postgres import pgoutput
from capture.sources.postgres.batches import Decoded, Group, TableInfo, decode
from capture.sources.postgres.types import ClampedKeys, TypeInfo, builder, column_type, is_text

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


def _table(identity: tuple[str, ...] = ("id",)) -> TableInfo:
    columns = tuple(Column(n, column_type(i)[0], i.name) for n, i in INFOS.items())
    schema = TableSchema("public", "t", columns, ("id",))
    builders = [None if is_text(c.arrow_type) else builder(INFOS[c.name]) for c in columns]
    missing = tuple(n for n in NAMES if n not in identity)
    return TableInfo(
        schema, builders, schema.key_indexes, identity, missing, True, False, ClampedKeys("s", "refuse", ValueError)
    )


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


def _message(kind: str, old_kind: str | None, old: list | None, new: list | None, oid: int = 16392) -> bytes:
    out = kind.encode() + struct.pack(">I", oid)
    if old is not None:
        out += old_kind.encode() + _tuple(old)
    if new is not None:
        out += b"N" + _tuple(new)
    return out


def _reference(table: TableInfo, change: pgoutput.RowChange) -> list[tuple[Op, list | None, list | None, tuple]]:
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


def _batch(table: TableInfo, txid: str, watermark: bool, major: int, first_minor: int, decoded: Decoded) -> ColumnBatch:
    """The decoded changes as one transaction's batch."""
    count = len(decoded.ops)
    lsn = pa.array([Lsn(major, first_minor + i).encode() for i in range(count)], LSN_ARROW_TYPE)
    txids, times = pa.repeat(pa.scalar(txid), count), pa.repeat(pa.scalar(NOW, UTC_MICROS), count)
    return column_batch(table.schema, txid, NOW, watermark, lsn, txids, times, *decoded[:4])


def _random_messages(rng: random.Random, count: int, old_images: bool = True, oid: int = 16392) -> list[bytes]:
    def row(key: int, toast: bool) -> list:
        doc = U if toast and rng.random() < 0.5 else rng.choice([None, "", "d" * rng.randint(1, 40), "é🎉"])
        return [str(key), rng.choice([None, "", 'n,"x"\n', "name"]), rng.choice([None, "1.50", "-0.01"]), doc]

    messages = []
    for _ in range(count):
        key = rng.randint(1, 50)
        choice = rng.random() if old_images else rng.choice([rng.random() * 0.3, 0.55 + rng.random() * 0.15])
        if choice < 0.3:
            messages.append(_message("I", None, None, row(key, False), oid))
        elif choice < 0.45:
            messages.append(_message("D", "K", [str(key), None, None, None], None, oid))
        elif choice < 0.55:
            messages.append(_message("D", "O", row(key, False), None, oid))
        elif choice < 0.7:
            messages.append(_message("U", None, None, row(key, True), oid))
        elif choice < 0.85:
            new_key = key if rng.random() < 0.6 else key + 100
            messages.append(_message("U", "K", [str(key), None, None, None], row(new_key, True), oid))
        else:
            new_key = key if rng.random() < 0.6 else key + 100
            messages.append(_message("U", "O", row(key, True), row(new_key, True), oid))
    return messages


@pytest.mark.parametrize("old_images", [True, False], ids=["any", "inserts-and-updates-without-old-images"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_column_wise_changes_equal_the_message_by_message_rules(seed, old_images):
    rng = random.Random(seed)
    table = _table()
    for size in (1, 7, 300):
        messages = _random_messages(rng, size, old_images)
        expected = [e for m in messages for e in _reference(table, pgoutput.parse_change(m))]
        batch = _batch(table, "745", False, 0x1_0000_0010, 3, decode(table, messages))
        got = batch.changes
        assert [c.lsn for c in got] == [Lsn(0x1_0000_0010, 3 + i) for i in range(len(expected))]
        assert [(c.op, c.before, c.after, c.missing) for c in got] == [
            (op, _typed(before), _typed(after), missing) for op, before, after, missing in expected
        ]


def test_inserts_only_take_the_bulk_path_and_keep_types():
    table = _table()
    messages = [_message("I", None, None, [str(i), f"n{i}", "12.30", None]) for i in range(5)]
    ops, before, after, missing, origin = decode(table, messages)
    assert ops.to_pylist() == ["c"] * 5 and before.null_count == 5 and missing is None and origin is None
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
            batch = _batch(table, str(major), major == 20, major, 0, decode(table, messages))
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
        pa.array([Lsn(9, 2).encode()], LSN_ARROW_TYPE),
        pa.array(["1"]),
        pa.array([NOW], UTC_MICROS),
        pa.array(["u"]),
        pa.nulls(1, table.schema.row_type),
        pa.array([{"id": 1, "name": "a", "amount": Decimal("1.00"), "doc": None}], table.schema.row_type),
        pa.array([["doc"]], pa.list_(pa.string())),
    )
    assert batch.changes == [change] and batch.events.num_rows == 1


def _transactions(rng: random.Random, count: int) -> list[list[bytes]]:
    """Messages of `count` transactions (Begin, changes of two relations interleaved, Commit):
    commit LSNs 0x1_0000_1000, 0x1_0000_2000, ..., each ending 0x10 past its commit LSN."""
    transactions = []
    for t in range(count):
        lsn, micros, xid = 0x1_0000_0000 + 0x1000 * (t + 1), 86_400_000_000 + t, 700 + t
        changes = []
        for _ in range(rng.choice([0, 1, 1, 2, 5])):
            changes += _random_messages(rng, rng.randint(1, 3), oid=rng.choice([OID_A, OID_B]))
        begin = b"B" + struct.pack(">qqI", lsn, micros, xid)
        commit = b"C" + struct.pack(">bqqq", 0, lsn, lsn + 0x10, micros)
        transactions.append([begin, *changes, commit])
    return transactions


OID_A, OID_B = 16392, 16400


def _feed(transactions: list[list[bytes]], tables: dict[int, TableInfo], hand_over) -> list:
    """The items a Group hands over for these messages; `hand_over(in_transaction)` says when
    to hand over besides at the end (after a commit, or in the middle of a transaction)."""
    group, items = Group(10_000, 1 << 20), []
    for messages in transactions:
        for buf in messages:
            kind = buf[0]
            if kind == 66:
                group.begin(buf)
            elif kind == 67:
                group.commit(buf)
            else:
                oid = struct.unpack_from(">I", buf, 1)[0]
                group.add(group.run(oid, tables[oid]), buf)
            if hand_over(group.open):
                items += group.hand_over()
    items += group.hand_over()
    return items


def _landed(items: list) -> tuple[list[tuple], list[Lsn]]:
    """(every change with its txid and commit time, ordered by LSN; the frontiers handed over),
    checking that no change comes before the end of an earlier transaction."""
    changes, ends = [], []
    for item in items:
        if isinstance(item, TransactionEnd):
            assert all(c[0].major < item.frontier.major for c in changes)
            ends.append(item.frontier)
            continue
        txids, times = item.events["_txid"].to_pylist(), item.events["_commit_ts"].to_pylist()
        assert (item.txid, item.commit_ts) == (txids[0], times[0])
        for change, txid, ts in zip(item.changes, txids, times, strict=True):
            assert not ends or change.lsn.major > ends[-1].major
            changes.append(
                (change.lsn, item.table.table, txid, ts, change.op, change.before, change.after, change.missing)
            )
    return sorted(changes, key=lambda c: c[0]), ends


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_transactions_handed_over_together_land_as_one_by_one(seed):
    """A group of many transactions gives every change the LSN, txid and commit time it gets
    when each transaction is handed over alone (key changes count two indexes, across the
    relations of a transaction), also when the group is handed over inside a transaction."""
    rng = random.Random(seed)
    table_a = _table()
    table_b = TableInfo(TableSchema("public", "b", table_a.schema.columns, ("id",)), *list(vars(table_a).values())[1:])
    tables = {OID_A: table_a, OID_B: table_b}
    transactions = _transactions(rng, 60)
    expected = []
    for messages in transactions:
        lsn, micros, xid = pgoutput.begin_fields(messages[0])
        index = 0
        for buf in messages[1:-1]:
            table = tables[struct.unpack_from(">I", buf, 1)[0]]
            for op, before, after, missing in _reference(table, pgoutput.parse_change(buf)):
                when = pgoutput.timestamp(micros)
                expected.append(
                    (Lsn(lsn, index), table.schema.table, str(xid), when, op, _typed(before), _typed(after), missing)
                )
                index += 1
    assert sum(c[0].minor > 0 for c in expected) > 50 and any(c[1] == "b" for c in expected)
    alone = _landed(_feed(transactions, tables, lambda in_transaction: not in_transaction))
    together = _landed(_feed(transactions, tables, lambda in_transaction: False))
    at_random = _landed(_feed(transactions, tables, lambda in_transaction: rng.random() < 0.1))
    assert alone[0] == expected and together[0] == expected and at_random[0] == expected
    assert alone[1] == [Lsn(0x1_0000_0000 + 0x1000 * (t + 1) + 0x10) for t in range(60)]
    assert together[1] == alone[1][-1:] and at_random[1][-1] == alone[1][-1]


def test_clamped_keys_refuse_names_the_setting_and_accept_warns_once_per_table_and_column(caplog):
    """`clamped_keys`: refuse raises the error it is given, naming the column, the value and the
    setting; accept logs one warning per table and column however many batches hold such values,
    and says of every batch whether one of its keys lands as another value (after the warning too:
    a dump records it with each chunk, `ChunkMeta.clamped_keys`)."""
    schema = TableSchema(
        "public",
        "valid",
        (Column("id", pa.int32(), "integer"), Column("valid_to", pa.date32(), "date")),
        ("id", "valid_to"),
    )
    batches = [
        [pa.array(["1", "2"]), pa.array(["2020-01-01", "infinity"])],
        [pa.array(["3"]), pa.array(["12345-01-01"])],
    ]
    with pytest.raises(ValueError, match=r"key column 'valid_to' holds 'infinity', .*`clamped_keys: accept`"):
        ClampedKeys("src", "refuse", ValueError).check(schema, batches[0], (0, 1))
    assert not ClampedKeys("src", "refuse", ValueError).check(
        schema, [pa.array(["1"]), pa.array(["9999-12-31"])], (0, 1)
    )
    accepted = ClampedKeys("src", "accept", ValueError)
    plain = [pa.array(["4"]), pa.array(["0001-01-01"])]
    assert [accepted.check(schema, texts, (0, 1)) for texts in [*batches, plain] * 2] == [True, True, False] * 2
    warned = [r.fields for r in caplog.records if getattr(r, "event", None) == "capture.clamped_key_accepted"]
    assert warned == [
        {
            "source": "src",
            "table": "public.valid",
            "column": "valid_to",
            "value": "infinity",
            "lands_as": "9999-12-31",  # a date column
            "reason": warned[0]["reason"],
            "action": warned[0]["action"],
        }
    ]
    assert "become one target row" in warned[0]["reason"]


@pytest.mark.parametrize(
    ("arrow_type", "texts", "refused"),
    [
        (pa.duration("us"), ["P1D", "P300000Y"], "holds 'P300000Y', which lands as NULL"),
        (pa.duration("us"), ["P-300000Y"], "holds 'P-300000Y', which lands as NULL"),
        (pa.list_(pa.date32()), ["{2020-01-01}", "{2020-01-01,NULL,-infinity}"], "element '-infinity' lands as 0001"),
        (pa.list_(pa.timestamp("us")), ['{"0100-01-01 00:00:00 BC"}'], "element '0100-01-01 00:00:00 BC' lands"),
        (pa.list_(pa.duration("us")), ["{P1D,P400000Y}"], "element 'P400000Y' lands as NULL"),
    ],
)
def test_clamped_keys_refuse_intervals_and_arrays_that_would_not_land_as_themselves(arrow_type, texts, refused):
    """Intervals past Arrow's durations land as NULL, arrays with an out-of-range element as the
    range's end: keys that differ only there would be one target row, so they are refused too."""
    schema = TableSchema("public", "k", (Column("k", arrow_type, "k"),), ("k",))
    with pytest.raises(ValueError, match=re.escape(refused)):
        ClampedKeys("src", "refuse", ValueError).check(schema, [pa.array(texts)], (0,))


@pytest.mark.parametrize(
    ("arrow_type", "texts"),
    [
        (pa.duration("us"), ["P1D", "P290000Y", None]),
        (pa.list_(pa.date32()), ["{2020-01-01,NULL}", "{}", None]),
        (pa.list_(pa.int32()), ["{1,2}"]),
        (pa.decimal128(10, 2), ["NaN"]),  # one value per key column: allowed
        (pa.time64("us"), ["24:00:00"]),
    ],
)
def test_clamped_keys_pass_keys_that_land_as_themselves(arrow_type, texts):
    schema = TableSchema("public", "k", (Column("k", arrow_type, "k"),), ("k",))
    ClampedKeys("src", "refuse", ValueError).check(schema, [pa.array(texts, pa.string())], (0,))
