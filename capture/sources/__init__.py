"""Source database families. Each module imports its driver only when chosen."""

from __future__ import annotations

from typing import Any

from capture.config import SourceConfig
from capture.sources.base import ChunkSource, LogSource, ReadView


def open_source(name: str, config: SourceConfig) -> LogSource:
    if config.kind in ("mariadb", "mysql"):
        from capture.sources.mysql.source import MySqlSource

        return MySqlSource(name, config)
    if config.kind == "postgresql":
        from capture.sources.postgres.source import PostgresSource

        return PostgresSource(name, config)
    raise NotImplementedError(f"source kind {config.kind!r}")


def open_chunk_source(name: str, config: SourceConfig) -> ChunkSource:
    if config.kind in ("mariadb", "mysql"):
        from capture.sources.mysql.chunks import MySqlChunkSource

        return MySqlChunkSource(name, config)
    if config.kind == "postgresql":
        from capture.sources.postgres.chunks import PostgresChunkSource

        return PostgresChunkSource(name, config)
    raise NotImplementedError(f"source kind {config.kind!r}")


def read_view_from_json(data: dict[str, Any] | None) -> ReadView | None:
    """A chunk's stored read view (ChunkSource.read_view) as the type of the source that wrote it."""
    if data is None:
        return None
    if "snapshot" in data:
        from capture.sources.postgres.read_view import PgSnapshot

        return PgSnapshot.from_json(data)
    raise ValueError(f"unknown read view {sorted(data)} in chunk metadata")
