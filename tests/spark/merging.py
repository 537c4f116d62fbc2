"""Helpers for the merge tests: a table with many types, and the states to compare (source,
reference reconciliation, Iceberg target, changelog replay) as typed Python values."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from capture.dump.control import DumpSettings, FileControl
from capture.dump.engine import DumpRequest
from capture.dump.progress import dump_dir
from capture.dump.reconcile import apply, reconcile_table
from tests.integration.dumping import run_dump, table_state
from tests.servers import wait_for

# Workload (tests/integration/dumping.py) writes id, v, note; the other columns take their
# defaults on its inserts and keep their values on its updates (ts changes ON UPDATE).
LEDGER = """
CREATE TABLE ledger (
  id INT PRIMARY KEY, v INT, note VARCHAR(20),
  amount DECIMAL(12,3) DEFAULT 1.5,
  ts DATETIME(6) DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  tz TIMESTAMP(6) NULL DEFAULT CURRENT_TIMESTAMP(6),
  d DATE DEFAULT '2024-02-29', t TIME(6) DEFAULT '-01:02:03.5', b VARBINARY(16) DEFAULT X'00FF10',
  f DOUBLE DEFAULT 0.1, u BIGINT UNSIGNED DEFAULT 18446744073709551615, small TINYINT DEFAULT -5,
  e ENUM('x', 'y') DEFAULT 'y', wide DECIMAL(50,5) DEFAULT '123456789012345678901234567890.12345'
)
"""
LEDGER_ROWS = """
INSERT INTO ledger (id, v, note, amount, ts, tz, d, t, b, f, u, small, e, wide)
SELECT seq, seq % 100, IF(seq % 17 = 0, NULL, CONCAT('row', seq)), seq / 7,
  TIMESTAMP('2020-01-01') + INTERVAL seq SECOND + INTERVAL seq MICROSECOND,
  IF(seq % 13 = 0, NULL, TIMESTAMP('2021-06-01') + INTERVAL seq MINUTE),
  DATE('1999-12-31') + INTERVAL seq DAY, SEC_TO_TIME(CAST(seq AS SIGNED) * 97 - 100000) + INTERVAL seq MICROSECOND,
  UNHEX(HEX(seq)), seq / 3, 18446744073709551615 - seq, CAST(seq AS SIGNED) % 128 - 64, IF(seq % 2, 'x', 'y'),
  seq * 1000000000000000000000 + 0.5
FROM seq_1_to_{rows}
"""
# source column -> how the target stores it (see the README's type table)
LEDGER_TYPES = {
    "id": "int", "v": "int", "note": "string", "amount": "decimal(12,3)", "ts": "timestamp_ntz",
    "tz": "timestamp", "d": "date", "t": "bigint", "b": "binary", "f": "double", "u": "decimal(20,0)",
    "small": "int", "e": "string", "wide": "string",
}  # fmt: skip


def plain(value: Any) -> Any:
    """One spelling per value: UTC timestamps naive, TIME and intervals as microseconds (the target's
    bigint), bytes not bytearray or memoryview, lists element by element."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    if isinstance(value, timedelta):
        return value // timedelta(microseconds=1)
    if isinstance(value, time):  # PostgreSQL time: microseconds since midnight
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def _typed(value: Any) -> tuple[str, Any]:
    return ("list", [_typed(v) for v in value]) if isinstance(value, list) else (type(value).__name__, value)


def typed(state: dict[tuple, dict[str, Any]]) -> dict[tuple, dict[str, tuple[str, Any]]]:
    """Values with their Python type (list elements too), so that 1.5 and Decimal('1.5') do not compare equal."""
    return {k: {c: _typed(v) for c, v in row.items()} for k, row in state.items()}


def source_state(mariadb, database: str, table: str, key: tuple[str, ...] = ("id",)) -> dict:
    """SELECT * as the target must hold it (UTC TIMESTAMP naive, BIGINT UNSIGNED as Decimal,
    DECIMAL beyond 38 digits as its exact text)."""
    state = table_state(mariadb, database, table, key)
    out = {}
    for k, row in state.items():
        row = {c: plain(v) for c, v in row.items()}
        if "u" in row and row["u"] is not None:
            row["u"] = Decimal(row["u"])
        if "wide" in row and row["wide"] is not None:
            row["wide"] = format(row["wide"], "f")
        out[k] = row
    return out


def reference_state(zone, database: str, table: str, key: tuple[str, ...] = ("id",)) -> dict:
    stream, _ = reconcile_table(zone, database, table)
    rows = [{c: plain(v) for c, v in row.items()} for row in apply(stream).values()]
    return {tuple(row[k] for k in key): row for row in rows}


def _collect(spark, name: str, order: tuple[str, ...] = ()) -> tuple[list[str], list[Any]]:
    frame = spark.table(name)
    columns = [
        f"CAST(`{f.name}` AS TIMESTAMP_NTZ) AS `{f.name}`" if f.dataType.typeName() == "timestamp" else f"`{f.name}`"
        for f in frame.schema.fields
    ]
    frame = frame.selectExpr(*columns)
    rows = frame.collect()
    if order:  # sorted here: Spark's ORDER BY is two more jobs (sample, sort) for a few thousand rows
        rows.sort(key=lambda r: [(False, 0) if r[c] is None else (True, r[c]) for c in order])  # nulls first
    return [f.name for f in frame.schema.fields], rows


def iceberg_state(spark, name: str, key: tuple[str, ...] = ("id",), bookkeeping: bool = False) -> dict:
    names, rows = _collect(spark, name)
    skip = set() if bookkeeping else {"_lsn", "_applied_at"}
    state = {}
    for row in rows:
        values = {c: plain(row[c]) for c in names if c not in skip}
        state[tuple(plain(row[k]) for k in key)] = values
    assert len(state) == len(rows), f"{name} holds duplicate keys"
    return state


def changelog_replay(spark, name: str, key: tuple[str, ...] = ("id",)) -> dict:
    """Apply the changelog in (LSN, order): the last event per key wins, deletes remove, a
    truncate (op t) empties the table."""
    names, rows = _collect(spark, name, ("_lsn", "_order"))
    columns = [c for c in names if not c.startswith("_")]
    state: dict[tuple, dict] = {}
    for row in rows:
        k = tuple(plain(row[c]) for c in key)
        if row["_op"] == "t":
            state.clear()
        elif row["_op"] == "d":
            state.pop(k, None)
        else:
            missing = set(row["_missing"] or ())  # not carried by the event: the value before it stays
            stored = state.get(k, {})
            state[k] = {c: stored.get(c) if c in missing else plain(row[c]) for c in columns}
    return state


def target_types(spark, name: str) -> dict[str, str]:
    return {f.name: f.dataType.simpleString() for f in spark.table(name).schema.fields}


def snapshot_count(spark, name: str) -> int:
    return spark.sql(f"SELECT count(*) FROM {name}.snapshots").collect()[0][0]


def differences(got: dict, want: dict, limit: int = 5) -> str:
    """The first keys whose rows differ, with only the columns that differ: an assertion message."""
    lines = [f"missing: {k}" for k in list(want.keys() - got.keys())[:limit]]
    lines += [f"unexpected: {k}" for k in list(got.keys() - want.keys())[:limit]]
    for k in [k for k in got.keys() & want.keys() if got[k] != want[k]][:limit]:
        columns = {c for c in got[k].keys() | want[k].keys() if got[k].get(c) != want[k].get(c)}
        lines.append(f"{k}: " + ", ".join(f"{c}: {got[k].get(c)!r} != {want[k].get(c)!r}" for c in sorted(columns)))
    return "\n".join(lines)


class PausedDump:
    """A dump of `tables` in small chunks in a thread, which the test pauses once the first table has
    `chunks` chunks (to merge in the middle of it) and resumes; on leaving, resumed and joined.
    `result`: the dump's summary."""

    def __init__(self, capture, dump_id: str, tables: list[str]) -> None:
        self.control = FileControl(dump_dir(capture.zone, dump_id) / "control.json")
        request = DumpRequest(dump_id=dump_id, tables=tables, settings=DumpSettings(chunk_size=37, delay_s=0.01))
        self.result: dict = {}
        self._thread = threading.Thread(
            target=lambda: self.result.update(run_dump(capture, request, control=self.control))
        )
        self._progress = dump_dir(capture.zone, dump_id) / f"{tables[0]}.json"

    def __enter__(self) -> PausedDump:
        self._thread.start()
        return self

    def pause_after(self, chunks: int) -> None:
        progress = self._progress
        wait_for(lambda: progress.exists() and json.loads(progress.read_text())["chunk"] >= chunks, 60)
        self.control.update(state="paused")

    def resume(self) -> None:
        self.control.update(state="running")

    def __exit__(self, *exc: object) -> None:
        self.resume()
        self._thread.join()
