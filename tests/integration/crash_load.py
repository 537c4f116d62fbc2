"""The write load and the kill loop of the exactly-once tests, shared by both sources: random
transactions (batches, updates, deletes, key changes, big ones that spill) on `ledger` and
`audit`, and capture killed with SIGKILL at random moments meanwhile."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

# (cursor, first id, rows, rng): insert rows first .. first + rows - 1 into `ledger`, the source's way
InsertBatch = Callable[[Any, int, int, random.Random], None]


def random_transactions(
    conn: Any, stop: threading.Event, seed: int, insert_batch: InsertBatch, max_pause_s: float = 0.004
) -> int:
    """Random transactions on `conn` (not autocommit) until `stop`; returns how many committed."""
    rng = random.Random(seed)
    next_id, live = 1, []
    transactions = 0
    with conn.cursor() as cur:
        while not stop.is_set():
            choice = rng.random()
            if choice < 0.35 or len(live) < 10:
                size = 1500 if rng.random() < 0.01 else rng.randint(1, 20)
                insert_batch(cur, next_id, size, rng)
                cur.execute("INSERT INTO audit (ledger_id, what) VALUES (%s, 'insert')", (next_id,))
                live.extend(range(next_id, next_id + size))
                next_id += size
            elif choice < 0.65:
                for key in rng.sample(live, min(len(live), rng.randint(1, 5))):
                    cur.execute("UPDATE ledger SET v = v + 1, note = %s WHERE id = %s", (f"u{transactions}", key))
            elif choice < 0.85:
                key = live.pop(rng.randrange(len(live)))
                cur.execute("DELETE FROM ledger WHERE id = %s", (key,))
                cur.execute("INSERT INTO audit (ledger_id, what) VALUES (%s, 'delete')", (key,))
            else:
                old = live.pop(rng.randrange(len(live)))
                cur.execute("UPDATE ledger SET id = %s WHERE id = %s", (next_id, old))
                live.append(next_id)
                next_id += 1
            conn.commit()
            transactions += 1
            time.sleep(rng.uniform(0, max_pause_s))
    return transactions


def kill_repeatedly(
    capture: Any,
    seconds: float,
    seed: int = 11,
    pause_s: tuple[float, float] = (0.2, 1.2),
    stop: threading.Event | None = None,
) -> int:
    """SIGKILL the capture process after a random pause in `pause_s` (0.2-1.2 s), restart it, again for
    `seconds` or until `stop` is set; returns how many times it was killed."""
    rng = random.Random(seed)
    stop = stop or threading.Event()
    kills = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stop.wait(rng.uniform(*pause_s)):
        capture.kill()
        kills += 1
        capture.start()
    return kills
