"""The reference for the binlog decoder's differential test: the binlog read by mysql-replication
and converted the way capture did before it had its own decoder (the per-value converters of
`types.py` up to 2bbbfaa), as (LSN, op, before, after) tuples."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from pymysqlreplication.constants import FIELD_TYPE, NONE_SOURCE
from pymysqlreplication.row_event import UpdateRowsEvent, WriteRowsEvent

from capture.events import Lsn
from capture.sources.mysql.reader import file_number
from tests.integration.binlog_check import row_events


def _negative_time_fraction(value: timedelta | None) -> timedelta | None:
    """mysql-replication 1.0.17 reads the fraction f of a negative TIME2 as 1 - f."""
    if value is None or value >= timedelta(0):
        return value
    seconds, micros = divmod(-value // timedelta(microseconds=1), 1_000_000)
    return value if micros == 0 else -timedelta(seconds=seconds, microseconds=1_000_000 - micros)


def _json_text(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(_keys(value), ensure_ascii=False, separators=(", ", ": "))


def _keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {(k.decode() if isinstance(k, bytes) else k): _keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_keys(v) for v in value]
    return value.decode() if isinstance(value, bytes) else value


def _converter(col: Any) -> Callable[[Any], Any] | None:
    kind = col.type
    if kind == FIELD_TYPE.NEWDECIMAL and col.precision > 38:
        return lambda v: format(v, "f") if v is not None else None
    if kind == FIELD_TYPE.STRING and (col.character_set_name or "").lower() == "binary":
        length = col.max_length
        return lambda v: (v.encode() if isinstance(v, str) else v).ljust(length, b"\x00") if v is not None else None
    if kind == FIELD_TYPE.JSON:
        return _json_text
    if kind in (FIELD_TYPE.TIME, FIELD_TYPE.TIME2) and getattr(col, "fsp", 0):
        return _negative_time_fraction
    if kind == FIELD_TYPE.YEAR:
        return lambda v: 0 if v == 1900 else v
    if kind == FIELD_TYPE.BIT:
        return lambda v: int(v, 2) if v is not None else None
    if kind == FIELD_TYPE.SET:
        order = {m: i for i, m in enumerate(col.set_values or [])}
        return lambda v: ",".join(sorted(v, key=order.__getitem__)) if v is not None else None
    return None


def _row(columns: list[Any], values: dict[str, Any], none_sources: dict[str, str]) -> tuple:
    out = []
    for col, value in zip(columns, values.values(), strict=True):
        if col.type == FIELD_TYPE.SET and value is None and none_sources.get(col.name) == NONE_SOURCE.EMPTY_SET:
            value = set()  # mysql-replication reports an empty SET as None
        convert = _converter(col)
        out.append(convert(value) if convert else value)
    return tuple(out)


def legacy_changes(port: int, gtid: str, database: str, end: Lsn, key: tuple[str, ...]) -> list[tuple]:
    """(LSN, op, before, after) of every row change in `database` from `gtid` to `end`; an UPDATE
    that changes `key` is a delete and a create, as capture lands it."""
    changes: list[tuple] = []
    for file, event in row_events(port, database, gtid, end, server_id=998):
        start = file_number(file) << 32 | (event.packet.log_pos - event.event_size)
        columns = event.table_map[event.table_id].columns
        index = 0
        for row in event.rows:
            if isinstance(event, UpdateRowsEvent):
                before = _row(columns, row["before_values"], row["before_none_sources"])
                after = _row(columns, row["after_values"], row["after_none_sources"])
                names = [c.name for c in columns]
                if any(before[names.index(k)] != after[names.index(k)] for k in key):
                    changes.append((Lsn(start, index), "d", before, None))
                    index += 1
                    changes.append((Lsn(start, index), "c", None, after))
                else:
                    changes.append((Lsn(start, index), "u", before, after))
            else:
                image = _row(columns, row["values"], row["none_sources"])
                if isinstance(event, WriteRowsEvent):
                    changes.append((Lsn(start, index), "c", None, image))
                else:
                    changes.append((Lsn(start, index), "d", image, None))
            index += 1
    return changes
