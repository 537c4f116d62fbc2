"""The harness's verdict once writes have stopped, capture has caught up and a last merge has run:
every keyed target equals its source table value for value (compared by the source column's
type), the changelog replays to the target, and nothing is in the landing zone or the changelog twice.

Findings are lines a person can act on: table, key, column, source value, target value.
"""

from __future__ import annotations

import struct
from collections import Counter
from datetime import UTC, time, timedelta
from decimal import Decimal
from typing import Any

from capture.landing import LandingZone
from tests.convergence.kit import Kit
from tests.convergence.schema import Compare, Table

Rows = dict[tuple[Any, ...], dict[str, Any]]
SHOWN = 5  # differing rows shown per table


def canonical(rule: Compare, value: Any) -> Any:
    """One spelling per value, so that equal means equal for the column's type."""
    if value is None:
        return None
    if rule == "float32":  # the float32 the column holds, spelt exactly: NaN equals NaN, -0.0 is not 0.0
        return repr(struct.unpack(">f", struct.pack(">f", value))[0])
    if rule == "float64":
        return repr(float(value))
    if rule == "int":
        return int(value)
    if rule == "decimal":
        return Decimal(value)
    if rule == "bytes":
        return bytes(value)
    if rule in ("date", "datetime") and isinstance(value, str):
        return None  # MariaDB's zero dates ('0000-00-00') land as NULL (README, types)
    if rule == "datetime" and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    if rule == "micros":
        if isinstance(value, timedelta):
            return value // timedelta(microseconds=1)
        if isinstance(value, time):
            return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
        return int(value)
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, list):
        return [canonical("exact", v) for v in value]
    return value


def show(value: Any) -> str:
    """A value for a finding line: its type and a short repr (long values by length and ends)."""
    text = repr(value)
    if len(text) > 70:
        size = f" (len {len(value)})" if hasattr(value, "__len__") else ""
        text = f"{text[:30]}...{text[-15:]}{size}"
    return text


def _rows(kit: Kit, table: Table, key: tuple[str, ...], records: list[dict[str, Any]]) -> tuple[Rows, list[str]]:
    """Canonical rows by key; keys held twice are findings."""
    rules = {c.name: kit.types[c.kind].compare for c in table.columns}
    rows: Rows = {}
    twice = []
    for record in records:
        row = {c: canonical(rules[c], record.get(c)) for c in rules}
        k = tuple(row[c] for c in key)
        if k in rows:
            twice.append(k)
        rows[k] = row
    return rows, twice


def source_rows(kit: Kit, table: Table, key: tuple[str, ...]) -> Rows:
    conn = kit.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(kit.select_sql(table))
            records = [dict(zip([c.name for c in table.columns], r, strict=True)) for r in cur.fetchall()]
        conn.commit()
    finally:
        conn.close()
    return _rows(kit, table, key, records)[0]


def spark_records(spark: Any, name: str, order: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Every row of an Iceberg table as Python values; timestamps as UTC wall clock."""
    frame = spark.table(name)
    frame = frame.selectExpr(
        *(
            f"CAST(`{f.name}` AS TIMESTAMP_NTZ) AS `{f.name}`"
            if f.dataType.typeName() == "timestamp"
            else f"`{f.name}`"
            for f in frame.schema.fields
        )
    )
    records = [row.asDict() for row in frame.collect()]
    if order:  # sorted here: Spark's ORDER BY is two more jobs (sample, sort) for a few thousand rows
        records.sort(key=lambda r: [(False, 0) if r[c] is None else (True, r[c]) for c in order])  # nulls first
    return records


def replay(records: list[dict[str, Any]], key: tuple[str, ...], columns: list[str]) -> list[dict[str, Any]]:
    """The changelog applied in (LSN, order): the last event of a key wins, deletes remove, columns an
    event does not carry (`_missing`) keep the value before it."""
    state: dict[tuple[Any, ...], dict[str, Any]] = {}
    for event in records:
        k = tuple(canonical("exact", event[c]) for c in key)
        if event["_op"] == "d":
            state.pop(k, None)
            continue
        missing = set(event.get("_missing") or ())
        before = state.get(k, {})
        state[k] = {c: before.get(c) if c in missing else event[c] for c in columns}
    return list(state.values())


def differences(table: str, want: Rows, got: Rows, what: str) -> list[str]:
    """Finding lines: rows missing from `got`, rows `got` has too many, columns that differ."""
    missing = [k for k in want if k not in got]
    extra = [k for k in got if k not in want]
    changed = [k for k in want if k in got and want[k] != got[k]]
    if not (missing or extra or changed):
        return []
    columns = Counter(c for k in changed for c in want[k] if want[k][c] != got[k].get(c))
    lines = [
        f"{table}: {what} differs from the source: {len(missing)} rows missing, {len(extra)} rows too many, "
        f"{len(changed)} rows with other values (columns: {dict(columns) or '-'}); source has {len(want)} rows"
    ]
    lines += [f"  {table} key {show(k)}: missing from the {what}" for k in missing[:SHOWN]]
    lines += [f"  {table} key {show(k)}: in the {what} but not in the source" for k in extra[:SHOWN]]
    for k in changed[:SHOWN]:
        for c in sorted(c for c in want[k] if want[k][c] != got[k].get(c)):
            lines.append(f"  {table} key {show(k)} column {c}: source {show(want[k][c])}, {what} {show(got[k].get(c))}")
    return lines


def check_table(kit: Kit, spark: Any, table: Table, key: tuple[str, ...], target: str, changelog: str) -> list[str]:
    """Source against target and target against the changelog's replay."""
    name = f"{kit.schema}.{table.name}"
    if not spark.catalog.tableExists(target):
        return [f"{name}: no Iceberg target {target} after the last merge"]
    want = source_rows(kit, table, key)
    got, twice = _rows(kit, table, key, spark_records(spark, target))
    findings = [f"{name}: the target holds key {show(k)} twice" for k in twice[:SHOWN]]
    findings += differences(name, want, got, "target")
    if spark.catalog.tableExists(changelog):
        events = spark_records(spark, changelog, ("_lsn", "_order"))
        appended = Counter((e["_lsn"], e["_order"], *(canonical("exact", e[c]) for c in key)) for e in events)
        doubled = [k for k, n in appended.items() if n > 1]
        if doubled:
            findings.append(
                f"{name}: {len(doubled)} changelog events appended twice, e.g. (_lsn, _order, key) {doubled[0]}"
            )
        replayed, _ = _rows(kit, table, key, replay(events, key, [c.name for c in table.columns]))
        findings += differences(name, got, replayed, "changelog replay")
    else:
        findings.append(f"{name}: no changelog table {changelog}")
    return findings


def landing_duplicates(zone: LandingZone) -> list[str]:
    """Every change lands once: no `_lsn` twice in any table's log."""
    findings = []
    for schema, table in zone.tables():
        data = zone.read_table(schema, table)
        if data is None:
            continue
        counts = Counter(int(v) for v in data.column("_lsn").to_pylist())
        twice = [lsn for lsn, n in counts.items() if n > 1]
        if twice:
            findings.append(f"{schema}.{table}: {len(twice)} LSNs landed twice, e.g. {twice[:3]}")
    return findings
