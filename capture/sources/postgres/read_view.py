"""What a PostgreSQL chunk's SELECT could see: its snapshot (`pg_current_snapshot()`, xmin:xmax:xip)
and the WAL position read just before its LOW watermark.

A commit is in the WAL slightly before it is visible to new snapshots, so a transaction whose commit
precedes LOW in the log can still be invisible to the chunk: the chunk row is then older than the log
and reconciliation drops it like a row a window event touched. Such a transaction is either in the
snapshot's in-progress list (found by xid anywhere before LOW) or got its xid at or after xmax, hence
committed after `before_low` (found in that short stretch of the log). The log carries 32-bit xids;
the snapshot 64-bit ones (epoch | xid): a log xid is widened to the 64-bit xid closest to xmax.

Read-only watermarks (`watermarks: readonly`, chunks.py) write no LOW row, so nothing of the
dump's own has an xid that would bound xmax: a transaction whose commit record is in the WAL before
LOW can still be in the procarray when the snapshot is taken, with an xid at or past xmax (xmax is
the latest *completed* xid + 1, and xids >= xmax are not listed in xip). Such a chunk's view is
`readonly`: every event before LOW whose xid is in xip or at/after xmax is hidden, whatever its
LSN; that is exactly "not visible to the snapshot" for a committed top-level xid (pgoutput's Begin
carries the top-level xid; xip holds top-level xids only, subtransactions' xids go to the
snapshot's subxip, which pg_current_snapshot() does not show, and a subxid is always newer than
its parent, so the parent decides).

Stored in the chunk file's metadata as {"snapshot": "xmin:xmax:xip,...", "before_low": "<lsn>"},
with "readonly": true for a read-only chunk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from capture.events import lsn_text


def widen(xid: int, near: int) -> int:
    """A 32-bit xid of the log as the 64-bit xid (epoch | xid) closest to `near`."""
    full = (near >> 32 << 32) | xid
    if full > near + (1 << 31):
        full -= 1 << 32
    elif full < near - (1 << 31):
        full += 1 << 32
    return full


@dataclass(frozen=True)
class PgSnapshot:
    xmin: int
    xmax: int
    xip: tuple[int, ...]  # in progress when the snapshot was taken (64-bit xids)
    before_low: int  # encoded LSN
    readonly: bool = False  # no LOW row bounds xmax: xids >= xmax are hidden whatever their LSN
    _in_progress: frozenset[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_in_progress", frozenset(self.xip))

    @classmethod
    def parse(cls, snapshot: str, before_low: int, readonly: bool = False) -> PgSnapshot:
        """From PostgreSQL's text form `xmin:xmax:xip1,xip2,...`."""
        xmin, xmax, xip = snapshot.split(":")
        return cls(int(xmin), int(xmax), tuple(int(x) for x in xip.split(",") if x), before_low, readonly)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PgSnapshot:
        return cls.parse(data["snapshot"], int(data["before_low"]), bool(data.get("readonly", False)))

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "snapshot": f"{self.xmin}:{self.xmax}:{','.join(str(x) for x in self.xip)}",
            "before_low": lsn_text(self.before_low),
        }
        if self.readonly:
            data["readonly"] = True
        return data

    @property
    def lookback(self) -> int:
        """Where a reader must start in the log for `hides` to see every candidate of the scan
        stretch (in-progress transactions are looked for back to what the reader has)."""
        return self.before_low

    def hides(self, lsn: int, xid: int | None) -> bool:
        """Whether the log event at `lsn` (before LOW) of transaction `xid` (32-bit; None: unknown)
        was invisible to the snapshot."""
        if xid is None:
            return False
        full = widen(xid, self.xmax)
        return full in self._in_progress or (full >= self.xmax and (self.readonly or lsn >= self.before_low))

    def sees(self, xid: int | None) -> bool | None:
        """Whether the snapshot saw transaction `xid` (32-bit; None: unknown), which committed: an
        xid below xmax and not in progress had ended when the snapshot was taken. Asked about the
        events in a chunk's window, whose commit is after LOW: those the snapshot saw are in the
        chunk's rows, the others happened after the read."""
        if xid is None:
            return None
        full = widen(xid, self.xmax)
        return full < self.xmax and full not in self._in_progress
