"""Message formats of the outputs: Logtide's own JSON and a Debezium-compatible envelope.

Every message carries the event's LSN (decimal text: encoded LSNs pass 2**64, see `lsn_text`) and, for a
chunk row (op `r`), its dump id and chunk, so a consumer can drop duplicates and order per key. Values: as
JSON where JSON has the type; DECIMAL as text (Debezium's decimal.handling.mode=string), dates and times as
ISO 8601 text (timestamps with their zone, as Debezium's ZonedTimestamp), binary as base64 (Debezium's
binary.handling.mode=base64).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from datetime import date, datetime, timedelta
from datetime import time as dtime
from decimal import Decimal
from typing import Any, NamedTuple

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from capture.events import lsn_text
from capture.output.interleave import Event

VERSION = "logtide-0.1.0"
# Debezium's PostgreSQL connector puts this in a column whose value the log does not carry
# (unavailable.value.placeholder), where Logtide's own format lists the column in `missing`
UNAVAILABLE = "__debezium_unavailable_value"


def _default(value: Any) -> Any:
    """What orjson cannot write itself (called only for those values). Its own are as Python's json and
    isoformat write them (dates and times ISO 8601, timestamps with their offset), 5 to 10 times faster;
    a float NaN or infinity becomes null (Python's json wrote NaN, which is not JSON)."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime | date | dtime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


_LEAVE_OUT = object()


def _image(row: dict[str, Any] | None, missing: tuple[str, ...] = (), placeholder: Any = _LEAVE_OUT) -> Any:
    """`row` with its `missing` columns (not carried by the event: PostgreSQL's unchanged TOAST) left out,
    or holding `placeholder`; never the null the landing zone stores for them, which would be a wrong value."""
    if row is None or not missing:
        return row
    if placeholder is _LEAVE_OUT:
        return {k: v for k, v in row.items() if k not in missing}
    return {k: placeholder if k in missing else v for k, v in row.items()}


def _millis(ts: datetime | None) -> int | None:
    return None if ts is None else int(ts.timestamp() * 1000)


class Message(NamedTuple):
    """An encoded event. A named tuple: the relay builds one a message, and `tuple.__new__` (`_message`)
    builds it without running Python code (a dataclass's __init__ cost as much as the payload's format)."""

    event: Event
    msg_id: str  # unique per event of a source: `<source>:<lsn>` (`:<order>` for chunk rows)
    payload: bytes


_message = tuple.__new__


def message_id(source: str, event: Event) -> str:
    lsn = lsn_text(event.lsn)
    return f"{source}:{lsn}" if event.order == 0 else f"{source}:{lsn}:{event.order}"


def logtide_json(source: str, kind: str, event: Event, database: str | None = None) -> dict[str, Any]:
    return {
        "source": source,
        "table": event.qualified_name,
        "op": event.op,
        "lsn": lsn_text(event.lsn),
        "order": event.order,
        "txid": event.txid,
        "commit_ts": None if event.commit_ts is None else event.commit_ts.isoformat(),
        "key": _image(event.key_values()),
        "before": _image(event.before),
        "after": _image(event.after, event.missing),
        "missing": list(event.missing),
        "dump": None if event.dump_id is None else {"id": event.dump_id, "chunk": event.chunk},
    }


def debezium(source: str, kind: str, event: Event, database: str | None = None) -> dict[str, Any]:
    """Debezium's change event value (the envelope of its JSON converter, schemas off): before, after,
    source, op, ts_ms, transaction. Chunk rows are op `r` with source.snapshot "incremental", as Debezium's
    own (DBLog-based) incremental snapshots; log events have snapshot "false". PostgreSQL: `db` is the
    database, `schema` the schema, `txId` the xid as a number, as Debezium's connector has them."""
    connector = "postgresql" if kind == "postgresql" else "mysql"
    txid: Any = event.txid
    if connector == "postgresql" and txid is not None and txid.isdigit():
        txid = int(txid)
    info: dict[str, Any] = {
        "version": VERSION,
        "connector": connector,
        "name": source,
        "ts_ms": _millis(event.commit_ts),
        "snapshot": "false" if event.op != "r" else "incremental",
        "db": database if connector == "postgresql" and database else event.schema,
        "table": event.table,
        "txId": txid,
        "lsn": lsn_text(event.lsn),
        "order": event.order,
    }
    if connector == "postgresql":
        info["schema"] = event.schema
    if event.dump_id is not None:
        info["dump_id"], info["chunk"] = event.dump_id, event.chunk
    return {
        "before": _image(event.before),
        "after": _image(event.after, event.missing, UNAVAILABLE),
        "source": info,
        "op": event.op,
        "ts_ms": int(time.time() * 1000),
        "transaction": None,
    }


FORMATS = {"logtide": logtide_json, "debezium": debezium}


def encode(fmt: str, source: str, kind: str, event: Event, database: str | None = None) -> Message:
    body = FORMATS[fmt](source, kind, event, database)
    payload = orjson.dumps(body, default=_default)
    return Message(event, message_id(source, event), payload)


class Encoder:
    """`encode` for one output, the relay's per-message path: Logtide's JSON is written from fragments (the
    table's, the transaction's id and commit time, the op's, each image by orjson) into one bytes format,
    byte for byte what `encode` writes, at about half its CPU; Debezium's envelope goes through `encode`.
    orjson is called only for what changes from message to message (the key's value, the images that
    are not null): each call costs as much as the format itself."""

    def __init__(self, fmt: str, source: str, kind: str, database: str | None = None) -> None:
        self.fmt, self.source, self.kind, self.database = fmt, source, kind, database
        self._fast = fmt == "logtide"
        self._prefix = source + ":"
        # (db, table) -> the payload's start, the key's names, and `{"<name>":` for a one-column key
        self._tables: dict[tuple[str, str], tuple[bytes, tuple[str, ...], bytes | None]] = {}
        self._ops: dict[str, bytes] = {}
        self._ts: Any = _LEAVE_OUT  # the last commit time seen (a transaction's events share the object)
        self._ts_json = _NULL
        self._txid: Any = _LEAVE_OUT  # the last transaction id seen
        self._txid_json = _NULL

    def __call__(self, event: Event) -> Message:
        if not self._fast:
            return encode(self.fmt, self.source, self.kind, event, self.database)
        table = self._tables.get((event.schema, event.table))
        if table is None:
            start = b'{"source":' + orjson.dumps(self.source) + b',"table":' + orjson.dumps(event.qualified_name)
            table = self._tables[(event.schema, event.table)] = (start, event.key, _key_start(event.key))
        start, names, key_start = table
        ts = event.commit_ts
        if ts is not self._ts:
            self._ts, self._ts_json = ts, _NULL if ts is None else orjson.dumps(ts.isoformat())
        txid = event.txid
        if txid != self._txid:  # equal, not the same object: each row read has its own string
            self._txid, self._txid_json = txid, orjson.dumps(txid)
        op = self._ops.get(event.op)
        if op is None:
            op = self._ops[event.op] = orjson.dumps(event.op)
        lsn, order = event.lsn, event.order
        before, after, missing, key = event.before, event.after, event.missing, event.key
        image = after if after is not None else before
        if key is not names and key != names:  # an enrichment hook changed it
            key_start = _key_start(key)
        if image is None:
            key_json = orjson.dumps(dict.fromkeys(key))
        elif key_start is not None:
            key_json = key_start + orjson.dumps(image.get(key[0]), default=_default) + b"}"
        else:
            key_json = orjson.dumps({k: image.get(k) for k in key}, default=_default)
        if missing:
            after = _image(after, missing)
        payload = _PAYLOAD % (
            start,
            op,
            lsn,
            order,
            self._txid_json,
            self._ts_json,
            key_json,
            _NULL if before is None else orjson.dumps(before, default=_default),
            _NULL if after is None else orjson.dumps(after, default=_default),
            orjson.dumps(list(missing)) if missing else b"[]",
            _NULL if event.dump_id is None else orjson.dumps({"id": event.dump_id, "chunk": event.chunk}),
        )
        msg_id = f"{self._prefix}{lsn}" if order == 0 else f"{self._prefix}{lsn}:{order}"
        return _message(Message, (event, msg_id, payload))


_NULL = b"null"
_PAYLOAD = (
    b'%s,"op":%s,"lsn":"%d","order":%d,"txid":%s,"commit_ts":%s,"key":%s,"before":%s,"after":%s,"missing":%s,"dump":%s}'
)


def _key_start(key: tuple[str, ...]) -> bytes | None:
    """`{"<name>":` for a one-column key (its value is then written alone), else None."""
    return b"{" + orjson.dumps(key[0]) + b":" if len(key) == 1 else None


class ArrowEncoder:
    """Logtide's JSON for a landing file's log events straight from its Arrow columns: each message's
    payload and id are joined in Arrow's C++ kernels, column by column, and reach Python as one bytes and
    one str a message, with no image dicts, Decimal or datetime objects and no per-message format. Byte
    for byte what `encode` writes (a unit test compares them); integers, booleans and text that needs no
    JSON escape are written by Arrow, every other value by orjson as `Encoder` does (one call a value).
    `messages` returns None for what it does not handle (events with `missing` columns), which the relay
    encodes through `Encoder`."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._prefix = pa.scalar(source + ":")
        self._starts: dict[tuple[str, str], str] = {}

    def messages(self, schema: str, table: str, key: tuple[str, ...], data: pa.Table, lsns: pa.Array) -> Any:
        """(message ids, payloads) of `data`'s rows (log events of `schema.table`, order 0), `lsns` their
        LSNs as decimal text; None when a row carries `missing` columns."""
        if "_missing" in data.column_names:
            gone = pc.list_value_length(data.column("_missing"))
            if pc.max(gone).as_py():
                return None
        start = self._starts.get((schema, table))
        if start is None:
            names = orjson.dumps(self.source) + b',"table":' + orjson.dumps(f"{schema}.{table}")
            start = '{"source":' + names.decode()
            self._starts[(schema, table)] = start
        before, before_fields = _object(data.column("before"))
        after, after_fields = _object(data.column("after"))
        key_json = _key(key, data.column("before"), before_fields, data.column("after"), after_fields)
        payload = pc.binary_join_element_wise(
            start + ',"op":',
            _distinct(data.column("_op"), orjson.dumps),
            ',"lsn":"',
            lsns,
            '","order":0,"txid":',
            _distinct(data.column("_txid"), orjson.dumps),
            ',"commit_ts":',
            _distinct(data.column("_commit_ts"), _isoformat),
            ',"key":',
            key_json,
            ',"before":',
            before,
            ',"after":',
            after,
            ',"missing":[],"dump":null}',
            "",
        )
        ids = pc.binary_join_element_wise(self._prefix, lsns, "")
        return ids.to_pylist(), payload.cast(pa.binary()).to_pylist()


_ESCAPED = r'[\x00-\x1f"\\]'  # what JSON (and orjson) escapes in a string; everything else is written as is


def _values(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Each value's JSON text (null for a null), as `orjson.dumps(value, default=_default)` writes the
    Python value Arrow gives."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    kind = column.type
    if pa.types.is_large_string(kind):
        column, kind = column.cast(pa.string()), pa.string()
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        text = column.cast(pa.string())
    elif pa.types.is_string(kind) and not pc.any(pc.match_substring_regex(column, _ESCAPED)).as_py():
        text = pc.binary_join_element_wise('"', column, '"', "")
    elif (pa.types.is_decimal(kind) and 0 <= kind.scale <= 6) or _iso_dates(column):  # str(Decimal): no exponent
        text = pc.binary_join_element_wise('"', column.cast(pa.string()), '"', "")
    elif _iso_times(column):  # isoformat: microseconds only where there are some, UTC as +00:00
        text = pc.replace_substring_regex(pc.strftime(column, format="%Y-%m-%dT%H:%M:%S"), r"\.000000$", "")
        text = pc.binary_join_element_wise('"', text, '"' if kind.tz is None else '+00:00"', "")
    else:
        dumps = orjson.dumps
        text = pa.array([dumps(v, default=_default) for v in column.to_pylist()], pa.binary()).cast(pa.string())
    return pc.fill_null(text, "null")


def _iso_dates(column: pa.Array) -> bool:
    """A date32 column whose every value has a four-digit year (Arrow's text then is `isoformat`'s)."""
    return pa.types.is_date32(column.type) and _from_year_1000(column, pa.scalar(date(1000, 1, 1), column.type))


def _iso_times(column: pa.Array) -> bool:
    """A microsecond timestamp column, naive or UTC, whose every value has a four-digit year."""
    kind = column.type
    if not pa.types.is_timestamp(kind) or kind.unit != "us" or kind.tz not in (None, "UTC", "+00:00"):
        return False
    return _from_year_1000(column.cast(pa.timestamp("us")), pa.scalar(datetime(1000, 1, 1), pa.timestamp("us")))


def _from_year_1000(column: pa.Array, first: pa.Scalar) -> bool:
    least = pc.min(column)
    return not least.is_valid or pc.greater_equal(least, first).as_py()


def _object(column: pa.ChunkedArray) -> tuple[pa.Array, dict[str, pa.Array]]:
    """A struct column's rows as JSON objects (null where the row is null), and each field's values."""
    struct = column.combine_chunks()
    if struct.null_count == len(struct):  # every row's (inserts' before, deletes' after)
        return pa.scalar("null"), {}
    fields = {struct.type.field(i).name: _values(struct.field(i)) for i in range(struct.type.num_fields)}
    pieces: list[Any] = []
    for i, (name, values) in enumerate(fields.items()):
        pieces += [("{" if i == 0 else ",") + orjson.dumps(name).decode() + ":", values]
    if not pieces:
        return pc.if_else(struct.is_valid(), "{}", "null"), fields
    joined = pc.binary_join_element_wise(*pieces, "}", "")
    return pc.if_else(struct.is_valid(), joined, "null"), fields


def _key(
    key: tuple[str, ...],
    before: pa.ChunkedArray,
    before_fields: dict[str, pa.Array],
    after: pa.ChunkedArray,
    after_fields: dict[str, pa.Array],
) -> Any:
    """`{"<key column>": value, ...}` from the after image, or the before image where it has none (null
    where neither has the column), as `Event.key_values`."""
    has_after, has_before = after.is_valid(), before.is_valid()
    if isinstance(has_after, pa.ChunkedArray):
        has_after, has_before = has_after.combine_chunks(), has_before.combine_chunks()
    pieces: list[Any] = []
    for i, name in enumerate(key):
        from_before = before_fields.get(name)
        value = pc.if_else(has_before, from_before, "null") if from_before is not None else pa.scalar("null")
        from_after = after_fields.get(name)
        value = pc.if_else(has_after, from_after if from_after is not None else "null", value)
        pieces += [("{" if i == 0 else ",") + orjson.dumps(name).decode() + ":", value]
    if not pieces:
        return pa.scalar("{}")
    return pc.binary_join_element_wise(*pieces, "}", "")


def _isoformat(ts: datetime) -> bytes:
    return orjson.dumps(ts.isoformat())


def _distinct(column: pa.ChunkedArray, write: Callable[[Any], bytes]) -> pa.Array:
    """A column's JSON text (null for a null), each distinct value written once by `write`: the op, the
    transaction's id and commit time (`isoformat`, as `Encoder`) repeat from event to event."""
    encoded = column.combine_chunks().dictionary_encode()
    texts = [write(value) for value in encoded.dictionary.to_pylist()]
    values = pa.array(texts, pa.binary()).cast(pa.string())
    return pc.fill_null(pc.take(values, encoded.indices), "null")
