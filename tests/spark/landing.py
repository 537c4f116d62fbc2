"""Landing zones written by capture's own LogWriter without a database, for merge tests that
need exact LSNs, transaction ids and chunks (PostgreSQL's TOAST and visibility cases)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from capture.config import LogtideConfig, parse_config
from capture.events import Change, ChangeBatch, Column, Lsn, Op, TableSchema, TransactionEnd
from capture.landing import Checkpoint, LandingZone
from capture.landing.chunks import ChunkMeta, write_chunk
from capture.landing.log_writer import LogWriter
from capture.sources.base import WATERMARK_SCHEMA, WATERMARK_TABLE
from capture.sources.postgres.read_view import PgSnapshot

DOCS = TableSchema(
    "db",
    "docs",
    (Column("id", pa.int32(), "integer"), Column("title", pa.string(), "text"), Column("body", pa.string(), "text")),
    ("id",),
)
WATERMARKS = TableSchema(
    WATERMARK_SCHEMA,
    WATERMARK_TABLE,
    tuple(
        Column(name, arrow_type, source)
        for name, arrow_type, source in (
            ("slot", pa.string(), "varchar(255)"),
            ("dump_id", pa.string(), "varchar(64)"),
            ("table_name", pa.string(), "varchar(200)"),
            ("chunk", pa.int32(), "int"),
            ("kind", pa.string(), "varchar(4)"),
            ("watermark_id", pa.string(), "char(36)"),
            ("written_at", pa.timestamp("us", tz="UTC"), "timestamp(6)"),
        )
    ),
    ("slot",),
)


class Landing:
    """Source `src`'s landing zone under `tmp_path`, and a config whose merge writes to
    `namespace` of the test's Hadoop catalog. Each `commit` is one transaction and checkpoint."""

    def __init__(self, tmp_path: Path, catalogs: dict[str, Any], namespace: str) -> None:
        self.zone = LandingZone(tmp_path / "landing", "src")
        self._tmp_path = tmp_path
        self._settings = {
            "landing": {"path": str(tmp_path / "landing")},
            "sources": {"src": {"kind": "mariadb", "user": "u", "server_id": 3}},
        }
        self._merge = catalogs["hadoop"].model_copy(update={"namespace": namespace})
        self.config: LogtideConfig = parse_config(
            {**self._settings, "merge": self._merge.model_dump(mode="json")}, require_env=False
        )
        self._writer = LogWriter(self.zone, Checkpoint(Lsn(1), {}), flush_interval_s=0, max_buffer_rows=1_000_000)
        self.now = datetime.now(UTC)

    def config_file(self, **merge: Any) -> Path:
        """The config as `logtide.yaml` in the test's folder, for a `logtide merge` process; `merge`:
        settings over the catalog's (its JDBC password left out: none is needed here)."""
        settings = {**self._merge.model_dump(mode="json", exclude={"jdbc_password"}), **merge}
        path = self._tmp_path / "logtide.yaml"
        path.write_text(yaml.safe_dump({**self._settings, "merge": settings}))
        return path

    def commit(
        self, major: int, table: TableSchema, *changes: Change, xid: int | None = None, watermark: bool = False
    ) -> None:
        """One transaction whose commit ends at `major + 1`; its id is `xid` (default: `major`)."""
        self._writer.add(ChangeBatch(table, str(major if xid is None else xid), self.now, watermark, list(changes)))
        self._writer.end_transaction(TransactionEnd(Lsn(major + 1), {}, self.now))
        self._writer.commit()

    def mark(self, major: int, kind: str, mark_id: str, xid: int | None = None, chunk: int = 1) -> None:
        """The LOW or HIGH watermark `mark_id` of dump d1, `chunk` of db.docs."""
        row = ("d1/db.docs", "d1", "db.docs", chunk, kind, mark_id, self.now)
        self.commit(major, WATERMARKS, Change(Lsn(major), Op.UPDATE, row, row), xid=xid, watermark=True)

    def chunk(
        self,
        rows: list[tuple],
        read_view: PgSnapshot | None = None,
        number: int = 1,
        after: tuple | None = None,
        last: bool = True,
        exact_order: bool = True,
    ) -> None:
        """Chunk `number` of the full dump d1 of db.docs (keys after `after`; `last`: to the end),
        bracketed by watermarks `low-<number>` and `high-<number>`. `exact_order`: as a dump
        records an int key (False: as under a linguistic collation)."""
        meta = ChunkMeta("d1", "db.docs", number, f"low-{number}", f"high-{number}", ("id",), after, None, None, last,
                         None, len(rows), read_view, exact_order=exact_order, clamped_keys=False)  # fmt: skip
        data = pa.array([dict(zip(DOCS.names, r, strict=True)) for r in rows], DOCS.row_type)
        write_chunk(self.zone, DOCS, meta, data)
