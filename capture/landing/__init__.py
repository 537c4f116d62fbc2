"""The landing zone: Parquet files of change events, one folder per table, and a checkpoint.

Layout under ``<landing.path>/<source>/``::

    checkpoint.json                 frontier + resume position (the commit record)
    capture.lock                    held by the running capture instance
    .epoch-<N>/                     the leader's staging folder: temp files, renamed into place
    log/<db>.<table>/<first>-<last>.parquet      change events, LSN-named
    schema_history/<first>-<last>.parquet        DDL statements and table schema versions
    unconverged.json                tables only a dump converges (landing/unconverged.py)
    covered.json                    what the publication covered at capture's last sync (landing/unconverged.py)

A file whose first LSN is at or past the checkpoint's frontier is not committed: readers
skip it and the next capture start deletes it.
"""

from capture.landing.checkpoint import Checkpoint
from capture.landing.zone import LandingZone

__all__ = ["Checkpoint", "LandingZone"]
