"""What capture tests of both sources do with landed events: write a watermark through the chunk
source, and reduce events to their operations and keys to compare the order they landed in."""

from __future__ import annotations

from capture.sources import open_chunk_source
from capture.sources.base import Watermark


def write_watermark(capture, mark: Watermark) -> None:
    """Write `mark` the way a dump does (the source's watermark table, made by setup first)."""
    source = open_chunk_source("src", capture.config.source("src"))
    try:
        source.setup()
        source.write_watermark(mark)
    finally:
        source.close()


def op_keys(events: list[dict]) -> list[tuple]:
    """(operation, key before, key after) of each event: a key is the image's `id`, None without one."""

    def key(image: dict | None) -> object:
        return None if image is None else image["id"]

    return [(e["_op"], key(e["before"]), key(e["after"])) for e in events]
