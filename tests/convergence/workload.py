"""The seeded random workload: the tables' first rows, then a thread with its own connection that
writes at a steady rate while dumps, merges and capture kills happen.

Operations: inserts, updates (some leave the large values alone: PostgreSQL then logs them as
missing), deletes, key changes (to a new key, or to the same key spelt otherwise: a case-only change
under a case-insensitive collation; some change values in the same statement), delete and re-insert
of the same key, two rows trading keys through a third in one transaction, inserts of an existing
key spelt otherwise (the database refuses most: the transaction rolls back), transactions of one to
twelve operations across tables (one in fifty of eighty, spanning several chunks of a dump), one in
ten rolled back on purpose. The workload remembers which
keys exist, so it never needs a SELECT; what the database refused is undone in that memory too.

With `ddl_every_s`, between two transactions now and then one ALTER TABLE of a keyed table that
Logtide claims to follow with no operator action (README, DDL during a dump): ADD COLUMN without a
DEFAULT, DROP COLUMN, and a type widened as `Kit.widenings` allows (MariaDB INT -> BIGINT and a longer
VARCHAR; PostgreSQL a longer varchar). The workload's tables follow it, so later writes use the new
columns and the check compares the source as it ends. With `rewritable` too (the harness then sets
`column_rewrites: accept`), ALTERs that give existing rows new values without row events: ADD COLUMN
... DEFAULT, RENAME COLUMN, and on PostgreSQL integer -> bigint (`Kit.rewrites`), but only on a table
the running dump has not reached yet, so that its chunks, read after the ALTER or read again from the
table's start, repair the rows: the dump the accepted warning asks for (README, DDL during a dump).
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from tests.convergence.kit import Kit
from tests.convergence.schema import BIG_KINDS, Column, Table, fresh_ident, value, variant

Ident = tuple[Any, ...]


class KeySet:
    """The keys of a table the workload knows to exist: add, remove and random choice in O(1)."""

    def __init__(self) -> None:
        self._items: list[Ident] = []
        self._index: dict[Ident, int] = {}

    def __len__(self) -> int:
        return len(self._items)

    def add(self, key: Ident) -> bool:
        if key in self._index:
            return False
        self._index[key] = len(self._items)
        self._items.append(key)
        return True

    def remove(self, key: Ident) -> bool:
        at = self._index.pop(key, None)
        if at is None:
            return False
        last = self._items.pop()
        if at < len(self._items):
            self._items[at] = last
            self._index[last] = at
        return True

    def choice(self, rng: random.Random) -> Ident:
        return self._items[rng.randrange(len(self._items))]


def row_values(kit: Kit, table: Table, rng: random.Random, extreme: int | None = None) -> list[Any]:
    """Values of `table.values`: row `extreme` of the extremes of each kind where it has one, else random."""
    out = []
    for column in table.values:
        kind = kit.types[column.kind]
        if extreme is not None and extreme < len(kind.extremes):
            out.append(kind.extremes[extreme])
        elif column.kind in BIG_KINDS:
            out.append(kind.random(rng))
        else:
            out.append(value(kind, rng))
    return out


def _insert_sql(kit: Kit, table: Table) -> str:
    names = [*table.ident, *(c.name for c in table.values)]
    return f"INSERT INTO {kit.quote(table.name)} ({', '.join(kit.quote(n) for n in names)}) VALUES "


def populate(kit: Kit, tables: list[Table], rows: int, seed: int) -> tuple[dict[str, KeySet], int]:
    """The tables' rows before capture starts (history only a dump has): first the extremes of each
    kind row by row, one row of NULLs, then random rows. Returns the keys and the next free counter."""
    rng = random.Random(seed)
    live = {t.name: KeySet() for t in tables}
    n = 1
    conn = kit.connect()
    try:
        for table in tables:
            extremes = max(len(kit.types[c.kind].extremes) for c in table.values)
            batch = []
            for i in range(table.initial_rows(rows)):
                ident = fresh_ident(table, kit.types, n, rng, kit.key_tails)
                n += 1
                if i == extremes:
                    values = [None if c.nullable else kit.types[c.kind].random(rng) for c in table.values]
                else:
                    values = row_values(kit, table, rng, i if i < extremes else None)
                batch.append((*ident, *values))
                live[table.name].add(ident)
            kit.insert_many(conn, _insert_sql(kit, table), batch)
            conn.commit()
    finally:
        conn.close()
    return live, n


class Workload(threading.Thread):
    """Random transactions on every table at about `ops_per_s` statements a second, until stop()."""

    OPS = (
        ("insert", 28), ("update", 30), ("delete", 14), ("key_change", 12), ("reinsert", 8), ("collide", 8),
        ("bulk", 6), ("upsert", 6), ("swap", 6),
    )  # fmt: skip

    DDL_OPS = (("add", 4), ("drop", 2), ("widen", 3), ("add_default", 2), ("rename", 2), ("retype", 1))
    REWRITES = ("add_default", "rename", "retype")

    def __init__(
        self,
        kit: Kit,
        tables: list[Table],
        live: dict[str, KeySet],
        next_n: int,
        seed: int,
        ops_per_s: float,
        ddl_every_s: tuple[float, float] | None = None,
        rewritable: Callable[[str], bool] | None = None,
    ) -> None:
        super().__init__(daemon=True, name=f"workload-{kit.kind}")
        # `tables` is the harness's list: DDL replaces its items, so the check reads the schema as it ends
        self.kit, self.tables, self.live, self.n = kit, tables, live, next_n
        self.ddl_every_s, self.rewritable = ddl_every_s, rewritable
        self.ddl_rng = random.Random(seed * 13)  # its own stream: the writes' choices stay as they were
        self.ddl_done: list[str] = []  # every ALTER that committed, in order (the seed's facts)
        self.rng = random.Random(seed)
        self.interval = 1.0 / ops_per_s
        self.stop_event = threading.Event()
        self.counts: Counter[str] = Counter()  # statements, commits, rollbacks, refused, per operation
        self.errors: Counter[str] = Counter()  # unexpected errors: "table: first line of the error"
        self.failure: BaseException | None = None
        self._names, self._weights = zip(*self.OPS, strict=True)

    def run(self) -> None:
        try:
            conn = self.kit.connect()
            try:
                self._loop(conn)
            finally:
                conn.close()
        except BaseException as exc:  # reported by the harness
            self.failure = exc

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=60)

    def _loop(self, conn: Any) -> None:
        due = time.monotonic()
        next_ddl = due + self.ddl_rng.uniform(*self.ddl_every_s) if self.ddl_every_s else None
        while not self.stop_event.is_set():
            if next_ddl is not None and time.monotonic() >= next_ddl:
                self._ddl(conn)
                next_ddl = time.monotonic() + self.ddl_rng.uniform(*self.ddl_every_s)
            undo: list[tuple[str, str, Ident]] = []
            table = None
            try:
                with conn.cursor() as cur:
                    # now and then a large transaction, whose writes span several chunks of a dump
                    size = self.rng.choice((1, 1, 1, 1, 2, 3, 4, 5, 8, 12)) if self.rng.random() > 0.02 else 80
                    for _ in range(size):
                        table = self.rng.choice(self.tables)
                        self._operation(cur, table, undo)
                        due = max(due + self.interval, time.monotonic() - 1.0)
                        time.sleep(max(0.0, due - time.monotonic()))
                if self.rng.random() < 0.1:
                    conn.rollback()
                    self._undo(undo)
                    self.counts["rollbacks"] += 1
                else:
                    conn.commit()
                    self.counts["commits"] += 1
            except Exception as exc:
                conn.rollback()
                self._undo(undo)
                if self.kit.is_duplicate(exc):
                    self.counts["refused"] += 1
                else:
                    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                    self.errors[f"{table.name if table else '?'}: {first_line}"] += 1

    def _ddl(self, conn: Any) -> None:
        """One ALTER TABLE of a keyed table (never `types`, nor `nokey`, whose `note` PostgreSQL's landed
        marker writes), then a committed insert into it: PostgreSQL sends the table's new Relation
        message with its next change, and capture compares each message with the one before, so two
        ALTERs with no change between (a DROP and an ADD) would look like one rename to it."""
        rng = self.ddl_rng
        candidates = [i for i, t in enumerate(self.tables) if t.captured and t.key != "none" and t.name != "types"]
        ahead = [i for i in candidates if self.rewritable is not None and self.rewritable(self.tables[i].name)]
        if ahead and rng.random() < 0.5:  # while the dump has tables ahead, half the ALTERs rewrite one of them
            at = rng.choice(ahead)
            op = rng.choice([o for o in self.REWRITES if o != "retype" or self.kit.rewrites])
        else:
            at = rng.choice(candidates)
            op = rng.choices([o for o, _ in self.DDL_OPS], [w for _, w in self.DDL_OPS])[0]
        table = self.tables[at]
        quoted = self.kit.quote(table.name)
        droppable = [c for c in table.values if c.kind not in BIG_KINDS]
        widenings = self.kit.widenings
        if op in self.REWRITES and (self.rewritable is None or not self.rewritable(table.name)):
            op = "widen" if op == "retype" else "add"  # the rows would keep old values: no dump to repair them
        elif op == "retype":
            widenings = self.kit.rewrites
        widenable = [c for c in table.values if c.kind in widenings]
        if op == "rename" and droppable:
            column = rng.choice(droppable)
            self.n += 1
            renamed = f"r{self.n}"
            sql = (f"ALTER TABLE {quoted} RENAME COLUMN {self.kit.quote(column.name)} TO "
                   f"{self.kit.quote(renamed)}")  # fmt: skip
            columns = tuple(dataclasses.replace(c, name=renamed) if c is column else c for c in table.columns)
        elif op == "drop" and len(droppable) > 1:  # keep a small value: an update may leave the large ones alone
            column = rng.choice(droppable)
            sql = f"ALTER TABLE {quoted} DROP COLUMN {self.kit.quote(column.name)}"
            columns = tuple(c for c in table.columns if c.name != column.name)
        elif op in ("widen", "retype") and widenable:
            column = rng.choice(widenable)
            wider = widenings[column.kind]
            sql = self.kit.retype_sql(table, column.name, wider)
            columns = tuple(dataclasses.replace(c, kind=wider) if c is column else c for c in table.columns)
        else:
            op = "add_default" if op == "add_default" else "add"
            self.n += 1
            column = Column(f"d{self.n}", rng.choice(("int", "ddl_vc")))
            sql = f"ALTER TABLE {quoted} ADD COLUMN {self.kit.quote(column.name)} {self.kit.types[column.kind].ddl}"
            if op == "add_default":  # every row holds it at once, no row event says so
                sql += " DEFAULT 7" if column.kind == "int" else " DEFAULT 'dflt é 😀'"
            columns = (*table.columns, column)
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
            conn.commit()
        except Exception as exc:
            conn.rollback()
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            self.errors[f"{table.name}: DDL {sql}: {first_line}"] += 1
            return
        self.tables[at] = table = dataclasses.replace(table, columns=columns)
        self.ddl_done.append(sql)
        self.counts[f"ddl_{op}"] += 1
        undo: list[tuple[str, str, Ident]] = []
        try:
            with conn.cursor() as cur:
                key = self._fresh(table)
                self._insert(cur, table, key)
                self._add(table, key, undo)
            conn.commit()
        except Exception as exc:  # a fresh key is never a duplicate: any error is the workload's finding
            conn.rollback()
            self._undo(undo)
            self.errors[f"{table.name}: insert after DDL: {str(exc).strip().splitlines()[0]}"] += 1

    def _undo(self, undo: list[tuple[str, str, Ident]]) -> None:
        for action, table, key in reversed(undo):
            if action == "add":
                self.live[table].remove(key)
            else:
                self.live[table].add(key)

    def _add(self, table: Table, key: Ident, undo: list) -> None:
        if self.live[table.name].add(key):
            undo.append(("add", table.name, key))

    def _remove(self, table: Table, key: Ident, undo: list) -> None:
        if self.live[table.name].remove(key):
            undo.append(("remove", table.name, key))

    def _fresh(self, table: Table) -> Ident:
        self.n += 1
        return fresh_ident(table, self.kit.types, self.n, self.rng, self.kit.key_tails)

    def _where(self, table: Table) -> str:
        return " AND ".join(f"{self.kit.quote(c)} = %s" for c in table.ident)

    def _execute(self, cur: Any, sql: str, args: list[Any]) -> None:
        cur.execute(sql, args)
        self.counts["statements"] += 1

    def _insert(self, cur: Any, table: Table, key: Ident) -> None:
        values = row_values(self.kit, table, self.rng)
        self._execute(cur, _insert_sql(self.kit, table) + f"({', '.join(['%s'] * (len(key) + len(values)))})",
                      [*key, *values])  # fmt: skip

    def _operation(self, cur: Any, table: Table, undo: list) -> None:
        keys, rng, name = self.live[table.name], self.rng, self.kit.quote(table.name)
        op = rng.choices(self._names, self._weights)[0] if len(keys) > 10 else "insert"
        if op in ("collide", "upsert") and table.key in ("config", "none"):
            op = "insert"  # nothing in the database keeps such a key unique: the workload must
        self.counts[op] += 1
        if op == "insert":
            key = self._fresh(table)
            self._insert(cur, table, key)
            self._add(table, key, undo)
        elif op == "collide":
            key = variant(keys.choice(rng), table, rng, self.kit.key_tails)
            self._insert(cur, table, key)  # mostly refused: equal under the key's collation
            self._add(table, key, undo)
        elif op == "update":
            columns = [c for c in table.values if c.kind not in BIG_KINDS or rng.random() < 0.5]
            columns = rng.sample(columns, min(len(columns), rng.randint(1, 3)))
            sets = ", ".join(f"{self.kit.quote(c.name)} = %s" for c in columns)
            values = [value(self.kit.types[c.kind], rng) for c in columns]
            self._execute(cur, f"UPDATE {name} SET {sets} WHERE {self._where(table)}", [*values, *keys.choice(rng)])
        elif op == "delete":
            key = keys.choice(rng)
            self._execute(cur, f"DELETE FROM {name} WHERE {self._where(table)}", list(key))
            self._remove(table, key, undo)
        elif op == "key_change":
            old = keys.choice(rng)
            if any(table.column(c).kind == "text_ci" for c in table.ident) and rng.random() < 0.5:
                new = variant(old, table, rng, self.kit.key_tails)  # mostly a case-only change
                self.counts["key_respelt"] += 1
            else:
                new = self._fresh(table)
            # now and then values change with the key (PostgreSQL: a large value changed, or left
            # TOASTed, in the same update that moves the row to another key)
            columns = rng.sample(table.values, rng.randint(1, min(2, len(table.values)))) if rng.random() < 0.3 else []
            sets = ", ".join(f"{self.kit.quote(c)} = %s" for c in [*table.ident, *(c.name for c in columns)])
            values = [value(self.kit.types[c.kind], rng) for c in columns]
            self._execute(cur, f"UPDATE {name} SET {sets} WHERE {self._where(table)}", [*new, *values, *old])
            self._remove(table, old, undo)
            self._add(table, new, undo)
        elif op == "upsert":  # an existing key respelt (or the same), else a new one
            old = keys.choice(rng) if rng.random() < 0.7 else None
            key = variant(old, table, rng, self.kit.key_tails) if old is not None else self._fresh(table)
            names = [*table.ident, *(c.name for c in table.values)]
            inserted = self.kit.upsert(cur, table, names, [*key, *row_values(self.kit, table, rng)])
            self.counts["statements"] += 1
            if old is not None and not inserted:
                self._remove(table, old, undo)
            self._add(table, key, undo)
        elif op == "bulk":
            self._bulk(cur, table, undo)
        elif op == "swap":
            self._swap(cur, table)
        else:  # reinsert: the same key deleted and inserted again, now and then spelt otherwise
            old = keys.choice(rng)
            self._execute(cur, f"DELETE FROM {name} WHERE {self._where(table)}", list(old))
            self._remove(table, old, undo)
            new = variant(old, table, rng, self.kit.key_tails) if rng.random() < 0.3 else old
            self._insert(cur, table, new)
            self._add(table, new, undo)

    def _swap(self, cur: Any, table: Table) -> None:
        """Two rows trade keys in one transaction, through a third, fresh key (a key the database keeps
        unique refuses the trade in one statement; where nothing does, one statement is a documented
        limit: README, `sources.<name>.keys`). The keys that exist stay the same; on PostgreSQL the
        large values travel with their rows, left TOASTed by each of the three key changes."""
        rng, keys, name = self.rng, self.live[table.name], self.kit.quote(table.name)
        a, b = keys.choice(rng), keys.choice(rng)
        if a == b:
            return
        sets = ", ".join(f"{self.kit.quote(c)} = %s" for c in table.ident)
        middle = self._fresh(table)
        for old, new in ((a, middle), (b, a), (middle, b)):
            self._execute(cur, f"UPDATE {name} SET {sets} WHERE {self._where(table)}", [*new, *old])

    def _bulk(self, cur: Any, table: Table, undo: list) -> None:
        """One statement on several rows (one row event, or several tuples, holding them all): their
        values updated, the rows deleted, or each moved to a new key by a CASE on the key (one-column
        keys)."""
        rng, keys, name = self.rng, self.live[table.name], self.kit.quote(table.name)
        chosen = list(dict.fromkeys(keys.choice(rng) for _ in range(rng.randint(2, 6))))
        where = " OR ".join(f"({self._where(table)})" for _ in chosen)
        found = [part for key in chosen for part in key]
        roll = rng.random()
        if roll < 0.4:
            column = rng.choice(table.values)
            self.counts["bulk_update"] += 1
            self._execute(cur, f"UPDATE {name} SET {self.kit.quote(column.name)} = %s WHERE {where}",
                          [value(self.kit.types[column.kind], rng), *found])  # fmt: skip
        elif roll < 0.7 or len(table.ident) > 1:
            self.counts["bulk_delete"] += 1
            self._execute(cur, f"DELETE FROM {name} WHERE {where}", found)
            for key in chosen:
                self._remove(table, key, undo)
        else:
            self.counts["bulk_key_change"] += 1
            new = [self._fresh(table) for _ in chosen]
            column = self.kit.quote(table.ident[0])
            cases = " ".join("WHEN %s THEN %s" for _ in chosen)
            pairs = [part for old, fresh in zip(chosen, new, strict=True) for part in (*old, *fresh)]
            self._execute(cur, f"UPDATE {name} SET {column} = CASE {column} {cases} END WHERE {where}",
                          [*pairs, *found])  # fmt: skip
            for old, fresh in zip(chosen, new, strict=True):
                self._remove(table, old, undo)
                self._add(table, fresh, undo)
