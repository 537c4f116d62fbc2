"""Key-list repairs under a source comparison that is not byte equality.

A key-list dump asks for keys as the user spells them ('apple'); the database finds a row under
the key column's comparison (citext, a MariaDB `_ci` collation, a case-insensitive ICU collation,
PAD SPACE), and the merge's repair deletes the target keys that equal an asked key and that no
chunk returned. Spark compares strings byte by byte, so on main a target 'Apple' the source no
longer held stayed when 'apple' was asked. The dump now records with each key-list chunk how the
database compares each key column (`ChunkMeta.key_folds`), as folds Spark applies exactly and
that never join two keys the database tells apart, each one proven on the column by the database
itself (`probe`):

  case  ASCII letters compared without case: 'ABC...Z' = 'abc...z' and 'aBc...' = 'AbC...' hold
        under the column's comparison (A-Z mapped to a-z; other letters compared as they are)
  pad   trailing spaces ignored: 'a' = 'a ' holds (MariaDB's PAD SPACE collations, bpchar)

Equality under other rules (non-ASCII case, accents under `_ai`/general_ci, 'ss' = 'ß') is not
folded: such a target key stays after a key-list repair, and a completed full dump deletes it
(README, Merge: keys and their order).
"""

from __future__ import annotations

from collections.abc import Callable

UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
LOWER = "abcdefghijklmnopqrstuvwxyz"
_CASE_PROBES = ((UPPER, LOWER), ("aBcDeFgHiJkLmNoPqRsTuVwXyZ", "AbCdEfGhIjKlMnOpQrStUvWxYz"))
_PAD_PROBES = (("a", "a "), ("A b", "A b   "))
_LOWERED = str.maketrans(UPPER, LOWER)


def probe(equal: Callable[[str, str], bool | None]) -> str:
    """The folds ('', 'case', 'pad', 'case,pad') that `equal` (the database comparing two values
    under the key column's type and collation; None or an error: not equal) proves."""
    folds = []
    if all(equal(a, b) is True for a, b in _CASE_PROBES):
        folds.append("case")
    if all(equal(a, b) is True for a, b in _PAD_PROBES):
        folds.append("pad")
    return ",".join(folds)


def fold(value: object, folds: str) -> object:
    """A key value as the folds compare it (Python side; `capture.merge` applies the same in Spark)."""
    if not folds or not isinstance(value, str):
        return value
    if "pad" in folds:
        value = value.rstrip(" ")
    if "case" in folds:
        value = value.translate(_LOWERED)
    return value
