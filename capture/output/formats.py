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
from datetime import date, datetime, timedelta
from datetime import time as dtime
from decimal import Decimal
from typing import Any, NamedTuple

import orjson

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
