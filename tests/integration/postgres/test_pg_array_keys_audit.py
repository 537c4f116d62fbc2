"""Array keys in composite keys and of types the first array tests left out (text[] with NULL
elements beside the string 'NULL' and empty arrays, paired with an int; citext[]; float8[] with
NaN and infinities; char(2)[]; timestamptz[]; varchar(3)[] beside text): a full dump in chunks
of 2 with changes after it and a key-list dump given as JSON lists land each source row once."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pytest

from capture.dump.control import DumpSettings
from capture.dump.engine import DumpRequest
from tests.integration.dumping import run_dump
from tests.integration.postgres.dumping import reconciled_state, wait_until_landed

pytestmark = pytest.mark.integration

TEXTS = ["{}", "{NULL}", '{"NULL"}', "{a}", "{a,NULL}", '{a,"NULL"}', "{A}", '{"a b"}', '{""}', "{NULL,NULL}"]
TABLES = {
    "comp": ("k text[], j int, v int, PRIMARY KEY (k, j)", [(t, j) for t in TEXTS for j in (1, 2, 3)], "k, j"),
    "cia": ("k citext[] PRIMARY KEY, v int", [(t,) for t in ["{Apple}", "{apple2}", "{B}", "{b2,NULL}", "{}", "{Ω}"]],
            "k::text[]"),
    "fla": ("k float8[] PRIMARY KEY, v int",
            [(t,) for t in ["{1.5}", "{NaN}", "{-0}", "{Infinity}", "{-Infinity}", "{0.1}", "{1e308}", "{NULL}",
                            "{NaN,1}", "{5e-324}"]], "k"),
    "bpa": ("k char(2)[] PRIMARY KEY, v int", [(t,) for t in ["{a}", "{ab}", "{b}", '{""}', '{" b"}', "{}"]],
            "k::text[]"),
    "tza": ("k timestamptz[] PRIMARY KEY, v int",
            [(t,) for t in ["{2020-01-01 00:00+02}", "{2020-01-01 00:00+00}", "{2020-01-01 00:00:00.000001+00}",
                            "{NULL}", "{}", '{"2020-06-01 12:00+05:30","2021-01-01 00:00+00"}']], "k"),
    "vca": ("k varchar(3)[], j text, v int, PRIMARY KEY (k, j)",
            [(t, j) for t in ["{abc}", "{ab,NULL}", "{}", '{"N"}'] for j in ("x", "NULL", "")], "k, j"),
}  # fmt: skip
ASKED = {
    "comp": [[["a", None], 1], [[], 2], [["NULL"], 3], [["zz"], 1], ["{a,NULL}", 2], [[None], 1]],
    "cia": [["apple"], ["B"], "{b2,NULL}"],
    "fla": [[1.5], [float("nan")], "{NaN,1}", [0.1]],
    "bpa": [["a"], "{ab}", [" b"]],
    "tza": [["2020-01-01T00:00:00+02:00"], "{NULL}"],
    "vca": [[["abc"], "x"], ["{ab,NULL}", "NULL"], [["abcd"], "x"]],
}


def _lit(text: str | int) -> str:
    return str(text) if isinstance(text, int) else "'" + text.replace("'", "''") + "'"


def _canon(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_canon(v) for v in value)
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, float) and value == 0:
        return 0.0
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    if isinstance(value, str):
        return value.rstrip(" ")  # char(2): '' lands padded, as the array's text spells it
    return value


def test_composite_and_odd_array_keys_land_each_source_row_once(postgres, pg_database, make_pg_capture):
    statements = ["CREATE EXTENSION IF NOT EXISTS citext"]
    for name, (ddl, keys, _) in TABLES.items():
        statements.append(f"CREATE TABLE {name} ({ddl})")
        rows = ", ".join("(" + ", ".join([*(_lit(p) for p in k), str(v)]) + ")" for v, k in enumerate(keys, 1))
        statements.append(f"INSERT INTO {name} VALUES {rows}")
    postgres.execute(*statements, database=pg_database)
    capture = make_pg_capture().start()
    capture.wait_running()
    failed = []
    for name in TABLES:
        try:
            run_dump(capture, f"public.{name}", chunk_size=2)
        except Exception as exc:
            failed.append(f"{name} full dump: {type(exc).__name__}: {exc}")
    postgres.execute(*(f"UPDATE {name} SET v = v + 100" for name in TABLES), database=pg_database)
    for name in TABLES:
        try:
            run_dump(capture, DumpRequest(tables=[f"public.{name}"], keys=ASKED[name],
                                          settings=DumpSettings(chunk_size=2)))  # fmt: skip
        except Exception as exc:
            failed.append(f"{name} key-list dump: {type(exc).__name__}: {exc}")
    wait_until_landed(postgres, pg_database, capture)
    for name, (_, _, select) in TABLES.items():
        key = ["k", "j"] if "j" in select else ["k"]
        query = postgres.query(f"SELECT v, {select} FROM {name}", database=pg_database)
        source = sorted((tuple(_canon(x) for x in r) for r in query), key=repr)
        state, _ = reconciled_state(capture, "public", name)
        landed = sorted((tuple(_canon(x) for x in [r["v"], *(r[k] for k in key)]) for r in state.values()), key=repr)
        if landed != source:
            failed.append(f"{name}: landed {landed} != source {source}")
    assert capture.process.poll() is None
    assert not failed, "\n".join(failed)
