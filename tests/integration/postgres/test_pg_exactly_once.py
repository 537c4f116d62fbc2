"""kill -9 the capture service again and again during a write load on PostgreSQL: the landing
zone still holds every change exactly once, in commit order. A second slot with the
independent test_decoding plugin, read after the fact, is the proof."""

from __future__ import annotations

import random
import re
import threading

import pytest

from tests.integration.crash_load import kill_repeatedly, random_transactions
from tests.servers import wait_for

pytestmark = pytest.mark.integration

WRITE_SECONDS = 12
_LINE = re.compile(r"^table public\.(\w+): (INSERT|UPDATE|DELETE): (.*)$")
_VALUE = re.compile(r"(\w+)\[[^\]]+\]:('(?:[^']|'')*'|\S+)")


def _insert_batch(cur, first: int, size: int, rng: random.Random) -> None:
    cur.execute(
        "INSERT INTO ledger SELECT i, (random() * 1e6)::int, 'n' || i FROM generate_series(%s, %s) i",
        (first, first + size - 1),
    )


def _workload(postgres, database: str, stop: threading.Event, seed: int) -> int:
    conn = postgres.connect(database, autocommit=False)
    try:
        return random_transactions(conn, stop, seed, _insert_batch)
    finally:
        conn.close()


def _values(text: str) -> dict[str, object]:
    out: dict[str, object] = {}
    for name, raw in _VALUE.findall(text):
        out[name] = raw[1:-1].replace("''", "'") if raw.startswith("'") else (None if raw == "null" else int(raw))
    return out


def _decoded_changes(postgres, database: str, slot: str) -> list[tuple]:
    """(table, op, before key, after) for every row change the independent slot decodes."""
    rows = postgres.query(
        "SELECT data FROM pg_logical_slot_peek_changes(%s, NULL, NULL, 'include-xids', '0')", (slot,), database=database
    )
    changes = []
    for (data,) in rows:
        match = _LINE.match(data)
        if match is None:
            continue
        table, op, rest = match.groups()
        if op == "INSERT":
            changes.append((table, "c", None, _values(rest)))
        elif op == "DELETE":
            changes.append((table, "d", _values(rest)["id"], None))
        elif rest.startswith("old-key:"):
            old, new = rest.split(" new-tuple: ")
            changes.append((table, "d", _values(old)["id"], None))
            changes.append((table, "c", None, _values(new)))
        else:
            changes.append((table, "u", None, _values(rest)))
    return changes


def test_kill9_during_writes_loses_and_duplicates_nothing(postgres, pg_database, make_pg_capture):
    postgres.execute(
        "CREATE TABLE ledger (id int PRIMARY KEY, v int, note text)",
        "CREATE TABLE audit (id bigserial PRIMARY KEY, ledger_id int, what text)",
        database=pg_database,
    )
    capture = make_pg_capture(landing={"flush_interval_s": 0.05, "max_buffer_rows": 300})
    capture.start().wait_running()
    witness = f"w_{pg_database}"[:63]
    postgres.query("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (witness,), database=pg_database)

    stop = threading.Event()
    result: dict[str, int] = {}
    writer = threading.Thread(target=lambda: result.update(tx=_workload(postgres, pg_database, stop, seed=7)))
    writer.start()
    kills = kill_repeatedly(capture, WRITE_SECONDS)
    stop.set()
    writer.join()

    expected = _decoded_changes(postgres, pg_database, witness)

    def landed() -> list[tuple] | None:
        assert capture.process.poll() is None, capture.log()
        events = []
        for table in ("ledger", "audit"):
            for event in capture.events("public", table):
                events.append((int(event["_lsn"]), table, event))
        return events if len(events) >= len(expected) else None

    events = wait_for(landed, 120, interval=0.2, what="capture to catch up")
    assert capture.stop() == 0
    lsns = [e[0] for e in events]
    assert len(set(lsns)) == len(lsns), "an LSN landed twice"
    events.sort(key=lambda e: e[0])
    got = []
    for _, table, event in events:
        before_key = event["before"]["id"] if event["_op"] == "d" else None
        got.append((table, event["_op"], before_key, event["after"]))
    assert result["tx"] > 200 and kills >= 8
    assert len(got) == len(expected)
    assert got == expected
    assert "capture.source_lost" in capture.log() or kills > 0

    # replaying the landed log rebuilds the table exactly
    state: dict[int, dict] = {}
    for table, op, before_key, after in got:
        if table == "ledger":
            if op == "d":
                del state[before_key]
            else:
                state[after["id"]] = after
    rows = postgres.query("SELECT id, v, note FROM ledger", database=pg_database)
    assert {r[0]: {"id": r[0], "v": r[1], "note": r[2]} for r in rows} == state
