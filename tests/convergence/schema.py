"""The adversarial schema of the convergence harness, written once for both databases.

Tables are described with logical column kinds (`int`, `text_ci`, `date`, `big_text`, ...). Each
source module (`mariadb.py`, `postgres.py`) says how it declares a kind, which extreme values the
kind holds there, what a random value looks like, how to SELECT it for the comparison and by which
rule its values compare (`SqlType`). The workload (`workload.py`) and the check (`check.py`) only
see this module's descriptions, so both databases run the same tables, operations and checks.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

KeySource = Literal["primary", "unique", "config", "none"]
# how two values of a kind compare (check.canonical): exact Python values after one spelling per
# value, floats by their bits (NaN equal to NaN), decimals by value, TIME/intervals in microseconds
Compare = Literal["exact", "int", "float32", "float64", "decimal", "text", "bytes", "date", "datetime", "micros"]


@dataclass(frozen=True)
class SqlType:
    """One logical kind on one database."""

    ddl: str
    compare: Compare
    extremes: tuple[Any, ...]  # bound as parameters; each must come back exactly (or by a documented mapping)
    random: Callable[[random.Random], Any]
    select: str = "{}"  # SQL giving the value the comparison reads, `{}` is the quoted column
    external: bool = False  # PostgreSQL: stored out of line (TOAST) uncompressed
    counter: Callable[[int], Any] | None = None  # a key column's value from the workload's counter (unique)


@dataclass(frozen=True)
class Column:
    name: str
    kind: str
    nullable: bool = True


@dataclass(frozen=True)
class Table:
    """`ident`: the columns the workload finds a row by (kept unique by it); `key` says what makes
    them a key for Logtide: the primary key, the only UNIQUE index, the config's `sources.<name>.keys`,
    or nothing (a keyless table, which all-tables commands must skip)."""

    name: str
    columns: tuple[Column, ...]
    ident: tuple[str, ...]
    key: KeySource
    captured: bool = True
    size: float = 1.0  # initial rows relative to the run's `rows`

    def initial_rows(self, rows: int) -> int:
        return max(20, int(rows * self.size))

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    @property
    def values(self) -> tuple[Column, ...]:
        """The columns the workload writes besides `ident`."""
        return tuple(c for c in self.columns if c.name not in self.ident)

    def compared_by(self, config_keys: bool) -> tuple[str, ...] | None:
        """The key the check compares source and target by; None: the table has no target to check."""
        if self.key in ("primary", "unique") or (self.key == "config" and config_keys):
            return self.ident
        return None


# kinds every source supports: the key tables use them
BIG_KINDS = ("big_text", "big_bytes", "big_json")
# the `types` table's key: kinds the database orders as Spark does (the merge judges chunk ranges by
# Spark's order), with their hostile values: bytes 0x00/0x7f/0x80/0xff and prefixes of each other, times
# before the epoch or negative, integers across their whole range (MariaDB: past 2^63)
KEY_KINDS = ("key_bytes", "key_moment", "key_num")
COMMON_KINDS = ("int", "text", "text_ci", "date", *BIG_KINDS, *KEY_KINDS)
KEY_BYTES = (b"", b"\x00", b"\x00\x00", b"\x7f", b"\x80", b"\xff", b"\xff\x00", b"A", b"a", b"a ", b"a\x00")


def tables(type_kinds: Sequence[str]) -> list[Table]:
    """The harness's tables for a source whose `types` table has a column of each of `type_kinds`."""

    def cols(*spec: tuple[str, str] | tuple[str, str, bool]) -> tuple[Column, ...]:
        return tuple(Column(*s) for s in spec)

    small = (("v", "int"), ("note", "text"))
    return [
        Table("types", cols(("kb", "key_bytes", False), ("kt", "key_moment", False), ("id", "key_num", False),
                            *((f"c_{k}", k) for k in type_kinds)), ("kb", "kt", "id"), "primary"),
        Table("ci_keys", cols(("k", "text_ci", False), *small), ("k",), "primary"),
        Table("composite", cols(("region", "text_ci", False), ("n", "int", False), ("d", "date"), *small),
              ("region", "n"), "primary"),
        Table("unique_only", cols(("code", "text_ci", False), ("n", "int", False), *small), ("code", "n"), "unique"),
        # large values: TOASTed on PostgreSQL; updates that leave them alone and key changes must keep them.
        # Its name sorts after every text-keyed table: the harness kills the first merge after a later
        # table's changelog commit than the table whose dump it splits
        Table("wide", cols(("id", "int", False), ("v", "int"), ("body", "big_text"), ("blob", "big_bytes"),
                          ("doc", "big_json")), ("id",), "primary", size=0.1),
        Table("named_key", cols(("a", "int", False), ("b", "text_ci", False), *small), ("a", "b"), "config"),
        Table("nokey", cols(("a", "int"), *small), ("a",), "none"),
        # not captured: the application's writes on it must keep working (PostgreSQL publications)
        Table("uncaptured", cols(("a", "int"), *small), ("a",), "none", captured=False, size=0.1),
    ]  # fmt: skip


# -- values ----------------------------------------------------------------------------------------

# text that breaks careless code: empty, blanks, quotes and backslashes (COPY/CSV), the literal
# spellings of NULL, combining marks, emoji with modifiers and flags, case pairs that fold oddly
TEXT_SAMPLES = (
    "",
    " ",
    "trailing  ",
    "plain",
    "emoji 😀👍🏽🇫🇷",
    "e\u0301 combining \u0308",
    "Å vs A\u030a",
    "tab\tnew\nline\r",
    "quote ' \" \\ backslash",
    "\\N",
    "NULL",
    ",;{}[]()",
    "zero\u200bwidth",
    "ß ẞ İ \u0131 ǅ ﬁ",
    "日本語テキスト",
)
# Text keys are `<word>-<n>-<tail>`. Each word keeps one case, so that many chunks hold keys in the
# same order for the database and for Spark, while the words' order differs between them (the
# database folds case and accents: apple < Axe < beta; Spark compares bytes: Axe < Zeta < apple < zulu
# < Émile < école < ω < 😀; ICU puts emoji first): a chunk that agrees with Spark's order can still
# span, in Spark's order, keys that other chunks returned. Respelt keys change only the tail, which
# follows the counter: equal under the collation (x/X, é/É, ß/ẞ, ǆ/ǅ, a trailing blank under PAD SPACE)
# or not (e + combining acute on MariaDB, which ICU finds equal to é).
KEY_WORDS = (
    "apple", "Axe", "beta", "Cobalt", "delta", "école", "Émile", "fig", "Grape", "kiwi", "Lemon", "mango",
    "straße", "Zeta", "zulu", "Ωmega", "ωave", "😀",
)  # fmt: skip
KEY_TAILS = {"x": ("X", "x "), "é": ("É", "e\u0301"), "ß": ("ẞ", "ß "), "ǆ": ("ǅ", "Ǆ")}
# under an accent-insensitive collation (Scale.collation `ai`): also tails that differ only by accents
# (and case), equal there, and `ss`/`ß`/`SS`
AI_KEY_TAILS = {
    **KEY_TAILS,
    "e": ("é", "È", "ë", "E", "e\u0301"),
    "a": ("á", "Å", "A\u030a", "à", "A"),
    "o": ("ö", "Ø", "ô", "O"),
    "ss": ("ß", "SS", "ẞ"),
    "i": ("\u0131", "İ", "í", "I"),  # dotless i: a letter of its own, not equal to i
}
_CHARS = "aAbBzZ09 _-éÉßẞıİ\u0301\u0308😀🇫日Ω'\"\\,"


def random_text(rng: random.Random, max_len: int = 40) -> str:
    if rng.random() < 0.4:
        return rng.choice(TEXT_SAMPLES)
    return "".join(rng.choice(_CHARS) for _ in range(rng.randint(0, max_len)))


def big_text(rng: random.Random, low: int = 3000, high: int = 9000) -> str:
    """Incompressible text well past PostgreSQL's TOAST threshold (about 2 kB)."""
    return "".join(
        rng.choices("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789é😀", k=rng.randint(low, high))
    )


def big_json(rng: random.Random) -> str:
    return '{"n": 1.10, "e": 1e2, "body": "%s"}' % big_text(rng)  # noqa: UP031 - a JSON document


# the columns the DDL workload adds (workload.Ddl): a short VARCHAR, widened later to the long one
DDL_TEXT = ("", " ", "😀" * 40, "tab\tnew\nline\r", "\\N", "trailing  ")


def spread(n: int, low: int, high: int) -> int:
    """The workload's counter `n` as a key in [low, high], unique for each n: the bounds for n 1 and 2,
    else scattered over the range by an odd multiplier (a bijection modulo the range's size)."""
    size = high - low + 1
    return {1: high, 2: low}.get(n, low + (n * 0x9E3779B97F4A7C15) % size)


def value(kind: SqlType, rng: random.Random) -> Any:
    """A value for a column: an extreme of its kind now and then, NULL rarely, else random."""
    roll = rng.random()
    if roll < 0.05:
        return None
    if roll < 0.25 and kind.extremes:
        return rng.choice(kind.extremes)
    return kind.random(rng)


def fresh_ident(
    table: Table, kinds: dict[str, SqlType], n: int, rng: random.Random, tails: dict[str, tuple[str, ...]] = KEY_TAILS
) -> tuple[Any, ...]:
    """A new key, unique under any collation by its counter `n`."""
    out = []
    for name in table.ident:
        kind = table.column(name).kind
        if kind == "int":
            out.append(n)
        elif kinds[kind].counter is not None:
            out.append(kinds[kind].counter(n))
        elif kind == "text_ci":
            out.append(f"{rng.choice(KEY_WORDS)}-{n}-{rng.choice(list(tails))}")
        else:
            out.append(kinds[kind].random(rng))
    return tuple(out)


def variant(
    ident: tuple[Any, ...], table: Table, rng: random.Random, tails: dict[str, tuple[str, ...]] = KEY_TAILS
) -> tuple[Any, ...]:
    """The same key spelt otherwise (its tail): mostly equal under the key's collation, so a key change
    to it is a case-only change and an insert of it a duplicate; int keys stay as they are."""
    out = []
    for name, part in zip(table.ident, ident, strict=True):
        if table.column(name).kind == "text_ci":
            stem, _, tail = part.rpartition("-")
            spellings = [t for base, others in tails.items() for t in (base, *others) if tail in (base, *others)]
            part = f"{stem}-{rng.choice([t for t in spellings if t != tail] or [tail])}"
        out.append(part)
    return tuple(out)
