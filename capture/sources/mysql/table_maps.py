"""Table map events parsed once per distinct table map, not once per transaction.

The binlog carries a table map before the rows of every transaction that touches a table, and
mysql-replication parses each one in full (columns, optional metadata, a Table built twice):
for single-row transactions about half of its decoding time (py-spy and cProfile, README
Benchmarks). A table map's body (table id, schema, table, column types and metadata, with
binlog_row_metadata=FULL, which preflight requires, the names and keys) is all that parse
reads, so an event whose body equals an earlier one's gets that one's attributes (its Table,
columns and metadata, shared) without parsing.

The cache belongs to one binlog stream: it lives on the stream's control connection, and only
connections that carry a `table_maps` dict (Logtide's, `reader._RaisingConnection`) use it;
every other user of mysql-replication in the process gets the library's own parse.
`install()` wraps `TableMapEvent.__init__` once.
"""

from __future__ import annotations

from typing import Any

from pymysqlreplication.event import BinLogEvent
from pymysqlreplication.row_event import TableMapEvent

BODY_START = 20  # in a binlog packet: the OK byte and the 19-byte event header come first
MAX_ENTRIES = 1024  # distinct table maps kept per stream (new table ids, e.g. after FLUSH TABLES)

_parse = TableMapEvent.__init__


def _init(
    self: TableMapEvent, from_packet: Any, event_size: int, table_map: dict, ctl_connection: Any, **kwargs: Any
) -> None:
    cache: dict[bytes, dict[str, Any]] | None = getattr(ctl_connection, "table_maps", None)
    if cache is None:
        _parse(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
        return
    # event_size excludes the header and the checksum: the body alone
    body = from_packet.packet.get_all_data()[BODY_START : BODY_START + event_size]
    parsed = cache.get(body)
    if parsed is None:
        _parse(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
        if self._processed:  # not skipped by a table filter
            if len(cache) >= MAX_ENTRIES:
                cache.clear()
            cache[body] = dict(vars(self))
        return
    BinLogEvent.__init__(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
    for name, value in parsed.items():  # what the parse added to the event's own attributes
        if name not in self.__dict__:
            setattr(self, name, value)
    table_map[self.table_id] = self.table_obj


def install() -> None:
    """Wrap TableMapEvent.__init__ (idempotent)."""
    TableMapEvent.__init__ = _init  # type: ignore[method-assign]
