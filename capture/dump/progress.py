"""Per-table progress of a dump, written after each HIGH watermark: a rerun with the same
dump id continues after the last finished chunk."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from capture.events import Row
from capture.landing.files import write_json_atomic
from capture.landing.keys import decode_key, encode_key
from capture.landing.zone import LandingZone, table_folder


@dataclass(frozen=True)
class TableProgress:
    chunk: int = 0  # last finished chunk
    after: Row | None = None  # key of the last row read, as it landed
    after_source: list[str] | None = None  # that key as the source spells it (ChunkSource.chunk_end)
    keys_done: int = 0  # key-list dumps: keys asked so far
    rows: int = 0
    missing_keys: int = 0
    done: bool = False
    # every run of this dump read the whole table (no key list, no --from/--to): only such a dump converges
    # a table listed not converged (landing.unconverged.pending). False in files written before it existed.
    whole: bool = False
    # the table's columns the chunks so far were read with (engine `_shape`: fingerprint and catalog
    # definitions): a run resumed after the table changed reads it again from its start. None in older files,
    # which cannot tell: read again from its start too (engine `_changed_while_stopped`).
    shape: str | None = None
    # the table's generation then (ChunkSource.generation: PostgreSQL's pg_attribute xmins, which a rewrite
    # such as ALTER COLUMN ... TYPE ... USING changes even where the columns read alike). None, or an earlier
    # format, in older PostgreSQL files: read again from its start too.
    generation: str | None = None


def dump_dir(zone: LandingZone, dump_id: str) -> Path:
    return zone.root / "dumps" / dump_id


class ProgressStore:
    def __init__(self, zone: LandingZone, dump_id: str) -> None:
        self.folder = dump_dir(zone, dump_id)

    def _path(self, schema: str, table: str) -> Path:
        return self.folder / f"{table_folder(schema, table)}.json"

    def load(self, schema: str, table: str) -> TableProgress:
        try:
            data = json.loads(self._path(schema, table).read_text())
        except FileNotFoundError:
            return TableProgress()
        data["after"] = decode_key(data["after"])
        return TableProgress(**data)

    def save(self, schema: str, table: str, progress: TableProgress) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        data = asdict(progress)
        data["after"] = encode_key(progress.after)
        # no fsync: a progress file lost in a power cut only makes its chunk run again
        write_json_atomic(data, self._path(schema, table), durable=False)
