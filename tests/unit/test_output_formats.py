"""The output formats (capture/output/formats.py): Debezium's documented change-event envelope, and
Logtide's own JSON, for every op, PostgreSQL's missing (TOAST) columns and the value types."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal

import jsonschema
import pytest

from capture.config import parse_config
from capture.errors import ConfigError
from capture.output.formats import UNAVAILABLE, Encoder, _default, encode
from capture.output.interleave import Event

pytestmark = pytest.mark.unit

# The value of a Debezium change event as the MySQL and PostgreSQL connector documentation describes it
# ("Change event values": the payload's envelope, with Kafka Connect's JSON converter and schemas off):
# op is required, one of c, u, d, r (read: a snapshot), t (a truncate); before and after are optional row structs (null
# where the operation has none); source is required, with version, connector, name, ts_ms (int64), db and
# snapshot (an enum: true, first, first_in_data_collection, last_in_data_collection, last, false,
# incremental), table, and the connector's position fields; ts_ms (optional) is when the connector
# processed the event.
DEBEZIUM_VALUE = {
    "type": "object",
    "required": ["op", "source", "before", "after"],
    "properties": {
        "op": {"enum": ["c", "u", "d", "r", "t"]},
        "before": {"type": ["object", "null"]},
        "after": {"type": ["object", "null"]},
        "ts_ms": {"type": "integer"},
        "transaction": {"type": ["object", "null"]},
        "source": {
            "type": "object",
            "required": ["version", "connector", "name", "ts_ms", "db", "snapshot", "table"],
            "properties": {
                "version": {"type": "string"},
                "connector": {"enum": ["mysql", "postgresql"]},
                "name": {"type": "string"},
                "ts_ms": {"type": "integer"},
                "db": {"type": "string"},
                "table": {"type": "string"},
                "snapshot": {
                    "enum": [
                        "true",
                        "first",
                        "first_in_data_collection",
                        "last_in_data_collection",
                        "last",
                        "false",
                        "incremental",
                    ]
                },
            },
        },
    },
    "allOf": [  # which images each op carries
        {"if": {"properties": {"op": {"const": "c"}}}, "then": {"properties": {"before": {"type": "null"}}}},
        {"if": {"properties": {"op": {"const": "r"}}}, "then": {"properties": {"before": {"type": "null"}}}},
        {"if": {"properties": {"op": {"const": "d"}}}, "then": {"properties": {"after": {"type": "null"}}}},
        {"if": {"properties": {"op": {"const": "u"}}}, "then": {"properties": {"after": {"type": "object"}}}},
        {  # a truncate (Debezium 1.8+ documents op t): no images, the source names the table
            "if": {"properties": {"op": {"const": "t"}}},
            "then": {"properties": {"before": {"type": "null"}, "after": {"type": "null"}}},
        },
    ],
}

TS = datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=UTC)
ROW = {"id": 7, "price": Decimal("12.50"), "born": date(2000, 1, 2), "at": TS, "blob": b"\x00\xff", "body": "x"}
BIG_LSN = (1 << 64) + 5  # MariaDB's encoded LSNs pass 2**64


def events() -> list[Event]:
    key = ("id",)
    return [
        Event("shop", "items", BIG_LSN, "c", None, ROW, key, "0-1-42", TS),
        Event("shop", "items", BIG_LSN + 1, "u", ROW, {**ROW, "body": None}, key, "0-1-43", TS, ("body",)),
        Event("shop", "items", BIG_LSN + 2, "d", ROW, None, key, "0-1-44", TS),
        Event("shop", "items", BIG_LSN + 3, "r", None, ROW, key, None, TS, (), 3, "dump-1", 12),
    ]


@pytest.mark.parametrize("kind", ["mariadb", "postgresql"])
def test_debezium_envelope_matches_the_documented_structure(kind):
    for event in events():
        message = encode("debezium", "src", kind, event)
        value = json.loads(message.payload)
        jsonschema.validate(value, DEBEZIUM_VALUE)
        assert value["op"] == event.op and value["source"]["name"] == "src"
        assert value["source"]["table"] == "items" and value["source"]["db"] == "shop"
        assert int(value["source"]["lsn"]) == event.lsn  # text: past 2**64
        assert value["source"]["ts_ms"] == int(TS.timestamp() * 1000)
        assert value["source"]["snapshot"] == ("incremental" if event.op == "r" else "false")
        assert value["source"]["connector"] == ("postgresql" if kind == "postgresql" else "mysql")
    update = json.loads(encode("debezium", "src", kind, events()[1]).payload)
    assert update["after"]["body"] == UNAVAILABLE  # Debezium's placeholder for an unchanged TOASTed value
    assert update["before"]["body"] == "x"
    row = json.loads(encode("debezium", "src", kind, events()[3]).payload)
    assert row["source"]["dump_id"] == "dump-1" and row["source"]["chunk"] == 12 and row["source"]["order"] == 3


def test_logtide_json_carries_lsn_key_missing_columns_and_the_chunk():
    create, update, delete, row = (json.loads(encode("logtide", "src", "mariadb", e).payload) for e in events())
    assert create == {
        "source": "src",
        "table": "shop.items",
        "op": "c",
        "lsn": str(BIG_LSN),
        "order": 0,
        "txid": "0-1-42",
        "commit_ts": "2026-03-01T12:00:00.250000+00:00",
        "key": {"id": 7},
        "before": None,
        "after": {
            "id": 7,
            "price": "12.50",
            "born": "2000-01-02",
            "at": "2026-03-01T12:00:00.250000+00:00",
            "blob": "AP8=",
            "body": "x",
        },
        "missing": [],
        "dump": None,
    }
    # a column PostgreSQL left out (unchanged TOAST) is not in `after`: a null there would be a wrong value
    assert update["missing"] == ["body"] and "body" not in update["after"] and update["after"]["id"] == 7
    assert delete["key"] == {"id": 7} and delete["after"] is None
    assert row["dump"] == {"id": "dump-1", "chunk": 12} and row["order"] == 3 and row["lsn"] == str(BIG_LSN + 3)


@pytest.mark.parametrize("kind", ["mariadb", "postgresql"])
def test_a_truncate_is_op_t_without_images_in_both_formats(kind):
    event = Event("shop", "items", BIG_LSN + 9, "t", None, None, (), "811", TS)
    value = json.loads(encode("debezium", "src", kind, event).payload)
    jsonschema.validate(value, DEBEZIUM_VALUE)
    assert value["op"] == "t" and value["before"] is None and value["after"] is None
    assert value["source"]["table"] == "items" and value["source"]["snapshot"] == "false"
    assert int(value["source"]["lsn"]) == BIG_LSN + 9
    own = json.loads(encode("logtide", "src", kind, event).payload)
    assert own["op"] == "t" and own["table"] == "shop.items" and own["key"] == {} and own["after"] is None
    assert encode("logtide", "src", kind, event).msg_id == f"src:{BIG_LSN + 9}"


def test_every_payload_is_strict_json_with_values_as_before():
    """Python's json, which the outputs used until 2026-11-24, wrote NaN and Infinity (not JSON); orjson
    writes null, and every other value as before: the old encoder's output is the reference."""
    odd = {
        "id": 18446744073709551615,  # BIGINT UNSIGNED's largest
        "f": float("nan"),
        "g": float("-inf"),
        "small": -9223372036854775808,
        "t": time(23, 59, 59, 1),
        "naive": datetime(2026, 1, 2, 3, 4, 5),
        "zoned": datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=-3, minutes=-30))),
        "span": timedelta(days=-1, microseconds=5),
        "text": 'naïve \u2028 \x00 "q" \U0001f600 </script>',
        "raw": memoryview(b"\x00\xff"),
        "dec": Decimal("-1E+30"),
    }
    event = Event("db", "t", BIG_LSN, "c", None, odd, ("id",), None, None)
    for fmt in ("logtide", "debezium"):
        after = json.loads(encode(fmt, "src", "mariadb", event).payload, parse_constant=_not_json)["after"]
        reference = json.loads(json.dumps({**odd, "f": None, "g": None}, default=_default))
        assert after == reference


def _not_json(token: str) -> None:
    raise AssertionError(f"{token} is not JSON")


def test_message_ids_tell_log_events_and_chunk_rows_apart():
    ids = [encode("logtide", "src", "mariadb", e).msg_id for e in events()]
    assert ids == [f"src:{BIG_LSN}", f"src:{BIG_LSN + 1}", f"src:{BIG_LSN + 2}", f"src:{BIG_LSN + 3}:3"]


def test_the_relays_encoder_writes_the_same_bytes_and_ids_as_encode():
    """The relay encodes through `Encoder` (Logtide's JSON from fragments, for speed): byte for byte what
    `encode` writes, for every op, missing columns, chunk rows, odd values and names, zones and no zone."""
    odd_names = Event('d"b', "t.x y", 2**70, "u", {"id": 1}, {"id": 1, "v": "\u2028"}, ("id",), None, None)
    no_image = Event("db", "t", 9, "u", None, None, ("a", "b"))
    composite = Event("db", "t", 10, "d", {"a": 1, "b": None, "c": Decimal("1E-10")}, None, ("a", "b"), "9")
    zoned = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=-3, minutes=-30)))
    later = Event("db", "t", 11, "c", None, {"id": 2, "f": float("nan"), "b": b"\x00"}, ("id",), "x", zoned)
    for fmt in ("logtide", "debezium"):
        for kind in ("mariadb", "postgresql"):
            encoder = Encoder(fmt, "src", kind, "pg")
            for event in [*events(), odd_names, no_image, composite, later, *events()]:
                fast, reference = encoder(event), encode(fmt, "src", kind, event, "pg")
                assert fast.msg_id == reference.msg_id and fast.event is event
                if fmt == "logtide":
                    assert fast.payload == reference.payload
                else:  # ts_ms is when it was encoded
                    assert {**json.loads(fast.payload), "ts_ms": 0} == {**json.loads(reference.payload), "ts_ms": 0}


SOURCES = {"src": {"kind": "mariadb", "user": "u", "server_id": 5}}


def test_outputs_are_off_by_default_and_name_a_known_source():
    assert parse_config({"sources": SOURCES}).outputs == {}
    config = parse_config(
        {"sources": SOURCES, "outputs": {"js": {"source": "src", "kind": "nats", "url": "nats://127.0.0.1:4222"}}}
    )
    js = config.outputs["js"]
    assert (js.format, js.start, js.max_inflight, js.includes("a", "b")) == ("logtide", "checkpoint", 5000, True)
    assert (js.batch_size, js.backpressure_rows) == (5000, 1000)  # backpressure is on by default
    hook = {"source": "src", "kind": "webhook", "url": "http://h/"}
    assert parse_config({"sources": SOURCES, "outputs": {"h": hook}}).outputs["h"].batch_size == 1000
    small = {"source": "src", "kind": "nats", "url": "x", "batch_size": 10}
    assert parse_config({"sources": SOURCES, "outputs": {"js": small}}).outputs["js"].batch_size == 10
    with pytest.raises(ConfigError, match="names source 'nope'"):
        parse_config({"sources": SOURCES, "outputs": {"js": {"source": "nope", "kind": "nats", "url": "x"}}})
    with pytest.raises(ConfigError, match=r"outputs\.js\.format"):
        parse_config(
            {"sources": SOURCES, "outputs": {"js": {"source": "src", "kind": "nats", "url": "x", "format": "avro"}}}
        )


def _land(zone, tables_rows) -> None:
    """Landing files written by capture's own LogWriter: (table, txid, changes) a transaction."""
    from capture.events import ChangeBatch, Lsn, TransactionEnd
    from capture.landing import Checkpoint
    from capture.landing.log_writer import LogWriter

    writer = LogWriter(zone, Checkpoint(Lsn(1), {}), flush_interval_s=3600, max_buffer_rows=10**7)
    major = 100
    for table, txid, changes in tables_rows:
        writer.add(ChangeBatch(table, txid, TS, False, changes))
        major += 100
        writer.end_transaction(TransactionEnd(Lsn(major), {}, TS))
    writer.commit()


def test_the_arrow_encoder_writes_what_encode_writes_from_the_landing_files(tmp_path):
    """The relay's fast path (`ArrowEncoder`, from the landing files' columns, no image dicts): the same
    message ids and bytes as `encode` of the events the reader builds, for every op, odd text (escapes,
    quotes, non-ASCII), NULLs in key and value columns, composite keys, DECIMAL, DATETIME, floats,
    booleans, binary, and reads that start and end inside a file."""
    import pyarrow as pa

    from capture.events import Change, Column, Lsn, Op, TableSchema
    from capture.landing import LandingZone
    from capture.output.formats import ArrowEncoder
    from capture.output.landing import LandingReader

    wide = TableSchema(
        "shop",
        'it"ems',
        (
            Column("id", pa.int64(), "bigint"),
            Column("name", pa.string(), "varchar(64)"),
            Column("amount", pa.decimal128(12, 2), "decimal(12,2)"),
            Column("at", pa.timestamp("us"), "datetime(6)"),
            Column("flag", pa.bool_(), "bool"),
            Column("f", pa.float64(), "double"),
            Column("blob", pa.binary(), "blob"),
            Column("u", pa.uint64(), "bigint unsigned"),
            Column("born", pa.date32(), "date"),
            Column("zoned", pa.timestamp("us", "UTC"), "timestamptz"),
            Column("tiny", pa.decimal128(20, 8), "decimal(20,8)"),  # str(Decimal) may write an exponent
            Column("old", pa.timestamp("us"), "timestamp"),  # a year before 1000 in the column: orjson's way
        ),
        ("id",),
    )
    pair = TableSchema(
        "shop",
        "pairs",
        (Column("a", pa.int32(), "int"), Column("b", pa.string(), "text"), Column("v", pa.int8(), "tinyint")),
        ("a", "b"),
    )
    texts = ["plain", 'q"uote', "back\\slash", "tab\tnew\nline\x00", "naïve \u2028 \U0001f600 </script>", "", None]

    def row(n: int) -> tuple:
        return (
            n,
            texts[n % len(texts)],
            None if n % 5 == 0 else Decimal(n) / 100,
            datetime(2026, 1, 2, 3, 4, 5, n % 2) if n % 3 else None,
            None if n % 4 == 0 else n % 2 == 1,
            [float("nan"), 1.5, -0.0, 1e300, None][n % 5],
            None if n % 2 else bytes([n % 256, 0]),
            18446744073709551615 - n,
            None if n % 7 == 0 else date(1000 + n, 1 + n % 12, 1),
            datetime(2026, 1, 2, 3, 4, 5, n % 3 * 7, tzinfo=UTC),
            Decimal(n) / 10**8,
            datetime(900 + n, 1, 1, 0, 0, 0, n % 2),
        )

    lsn = iter(range(1, 10**6))
    plain = [Change(Lsn(150, next(lsn)), Op.CREATE, None, row(n)) for n in range(40)]
    changed = [Change(Lsn(250, next(lsn)), Op.UPDATE, row(n), row(n + 1)) for n in range(10)]
    gone = [Change(Lsn(350, next(lsn)), Op.DELETE, row(n), None) for n in range(10)]
    pairs = [Change(Lsn(450, next(lsn)), Op.CREATE, None, (n, texts[n % len(texts)], n)) for n in range(14)]
    pairs += [Change(Lsn(450, next(lsn)), Op.DELETE, (n, texts[n % len(texts)], n), None) for n in range(7)]
    # only plain text: Arrow writes it without orjson
    simple = [Change(Lsn(550, next(lsn)), Op.CREATE, None, (n, f"row-{n}", n % 97)) for n in range(20)]
    zone = LandingZone(tmp_path / "landing", 'sr"c')
    _land(zone, [(wide, "0-1-42", plain), (wide, 'x"1', changed), (wide, None, gone), (pair, "7", pairs)])
    _land(zone, [(pair, "8", simple)])
    reader = LandingReader(zone)
    reader.encoder, reader.encoded, reader.arrow_rows = ArrowEncoder('sr"c'), lambda db, table: True, 1
    frontier = 1 << 80
    for start in (0, Lsn(250, 45).encode()):  # the second from inside a file
        read, messages, _end = reader.read_encoded(start, frontier)
        assert len(read) == len(messages) and {e.op for e in read} == {"c", "u", "d"}
        for event, message in zip(read, messages, strict=True):
            reference = encode("logtide", 'sr"c', "mariadb", event)
            assert message is not None and message.event is event
            assert (message.msg_id, message.payload) == (reference.msg_id, reference.payload)
    assert len(reader.read_encoded(0, frontier)[0]) == 40 + 10 + 10 + 21 + 20
    assert len(reader.read_encoded(Lsn(250, 45).encode(), frontier)[0]) == 6 + 10 + 21 + 20


def test_the_fast_path_reads_no_images_unless_a_window_may_keep_the_event(tmp_path):
    """Events the interleaver will not keep come without images (their messages are written from the
    columns); those of a table with a window open, a look-back, or a LOW among the events read keep them,
    and every message is still `encode`'s of the whole event."""
    import pyarrow as pa

    from capture.events import Change, Column, Lsn, Op, TableSchema
    from capture.landing import LandingZone
    from capture.output.formats import ArrowEncoder
    from capture.output.landing import LandingReader
    from capture.sources.base import WATERMARK_COLUMNS, WATERMARK_SCHEMA, WATERMARK_TABLE

    items = TableSchema(
        "shop", "items", (Column("id", pa.int64(), "bigint"), Column("v", pa.string(), "text")), ("id",)
    )
    other = TableSchema("shop", "other", (Column("id", pa.int64(), "bigint"),), ("id",))
    marks = TableSchema(
        WATERMARK_SCHEMA,
        WATERMARK_TABLE,
        tuple(Column(c, pa.int64() if c in ("slot", "chunk") else pa.string(), "x") for c in WATERMARK_COLUMNS),
        ("slot",),
    )
    low = (1, "d1", "shop.items", 0, "LOW", "w1", "now")
    lsn = iter(range(1, 10**6))
    zone = LandingZone(tmp_path / "landing", "src")
    _land(
        zone,
        [
            (items, "1", [Change(Lsn(150, next(lsn)), Op.CREATE, None, (n, f"v{n}")) for n in range(5)]),
            (other, "2", [Change(Lsn(250, next(lsn)), Op.DELETE, (n,), None) for n in range(5)]),
            (marks, "3", [Change(Lsn(350, next(lsn)), Op.CREATE, None, low)]),
        ],
    )
    frontier = 1 << 80
    whole = {e.lsn: e for e in LandingReader(zone).read(0, frontier)[0]}
    for collecting, kept in [
        (lambda table: False, {"shop.items", "logtide.watermarks"}),  # items: its LOW is among the events read
        (lambda table: table == "shop.other", {"shop.items", "shop.other", "logtide.watermarks"}),
    ]:
        reader = LandingReader(zone)
        reader.encoder, reader.collecting, reader.arrow_rows = ArrowEncoder("src"), collecting, 1
        reader.encoded = lambda db, table: (db, table) != (WATERMARK_SCHEMA, WATERMARK_TABLE)
        read, messages, _end = reader.read_encoded(0, frontier)
        assert [e.lsn for e in read] == sorted(whole)
        for event, message in zip(read, messages, strict=True):
            full = whole[event.lsn]
            if event.qualified_name in kept:
                assert event == full
            else:
                assert ((event.before, event.after) == (None, None) and full.after is None) or full.before is None
                assert replace(event, before=full.before, after=full.after) == full
            if event.table == WATERMARK_TABLE:
                assert message is None
            else:
                assert message is not None and message.payload == encode("logtide", "src", "mariadb", full).payload
