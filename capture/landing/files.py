"""Durable, atomic file writes and the LSN-range file names the landing zone is made of."""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path
from typing import IO, Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from capture.errors import FencedError

LSN_DIGITS = 29  # 2**96 has 29 decimal digits: names sort like the LSNs they hold
_NAME = re.compile(r"^(\d{29})-(\d{29})\.parquet$")
TMP_PREFIX = ".tmp-"  # dot files are ignored by Spark and pyarrow datasets


def segment_name(first_lsn: int, last_lsn: int) -> str:
    return f"{first_lsn:0{LSN_DIGITS}d}-{last_lsn:0{LSN_DIGITS}d}.parquet"


def parse_segment_name(name: str) -> tuple[int, int] | None:
    match = _NAME.match(name)
    return (int(match.group(1)), int(match.group(2))) if match else None


class Segment(NamedTuple):
    """One log file: the first and last LSN (encoded) of the events it holds."""

    first: int
    last: int
    path: Path


def list_segments(folder: Path) -> list[Segment]:
    """Every LSN-named file of a log folder, in LSN order (temp files and others left out)."""
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        span = parse_segment_name(path.name)
        if span is not None:
            found.append(Segment(span[0], span[1], path))
    return sorted(found)


def segments(folder: Path, frontier: int, since: int = 0) -> list[Segment]:
    """Files holding events at or after `since` and below `frontier`, in LSN order. With the
    checkpoint's frontier these are exactly the committed files (none reaches past it); with an
    earlier one (a merge "as of" then) the last may reach past it, so readers filter events by LSN."""
    return [s for s in list_segments(folder) if s.first < frontier and s.last >= since]


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _tmp_path(path: Path, tmp_dir: Path | None) -> Path:
    """The temp file beside `path`, or in `tmp_dir`: a writer's staging folder, which a newer
    writer removes to fence it off (its later opens and renames then fail; see `fenced_rename`)."""
    if tmp_dir is None:
        return path.with_name(TMP_PREFIX + path.name)
    return tmp_dir / f"{TMP_PREFIX}{uuid.uuid4().hex}{path.suffix}"


def fenced_rename(source: Path, target: Path, staging: Path | None) -> None:
    """os.rename that reports a vanished staging folder as FencedError (a newer writer took over)."""
    try:
        os.rename(source, target)
    except FileNotFoundError:
        if staging is not None and not staging.is_dir():
            raise _fenced(staging) from None
        raise


def _fenced(staging: Path) -> FencedError:
    return FencedError(
        f"staging folder {staging} was removed by a newer capture leader: this instance was fenced off "
        "and writes nothing more to the landing zone"
    )


def _open_tmp(tmp: Path, mode: str, staging: Path | None) -> IO[Any]:
    try:
        return open(tmp, mode)
    except FileNotFoundError:
        if staging is not None and not staging.is_dir():
            raise _fenced(staging) from None
        raise


def write_parquet_atomic(table: pa.Table, path: Path, tmp_dir: Path | None = None) -> None:
    """Write to a hidden temp file, fsync, rename: readers see the whole file or nothing.

    The caller fsyncs the folder once after a batch of renames. With `tmp_dir` (a capture
    leader's staging folder) the temp file is written there and renamed into `path`.
    """
    tmp = _tmp_path(path, tmp_dir)
    with _open_tmp(tmp, "wb", tmp_dir) as handle:
        pq.write_table(table, handle, compression="snappy")
        handle.flush()
        os.fsync(handle.fileno())
    fenced_rename(tmp, path, tmp_dir)


def write_json_atomic(
    data: dict[str, Any], path: Path, durable: bool = True, tmp_dir: Path | None = None, sync_folder: bool = True
) -> None:
    """Replace `path` atomically; `durable=False` skips the fsyncs where losing the newest
    version after a power cut is harmless (it is redone); `sync_folder=False` keeps the file's
    fsync (never torn) but not the folder's (a power cut may keep the previous version).
    `tmp_dir` as for write_parquet_atomic."""
    tmp = _tmp_path(path, tmp_dir)
    with _open_tmp(tmp, "w", tmp_dir) as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
        handle.write("\n")
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    fenced_rename(tmp, path, tmp_dir)
    if durable and sync_folder:
        fsync_dir(path.parent)
