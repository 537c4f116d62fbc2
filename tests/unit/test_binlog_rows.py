"""The binlog row decoder fails closed: a type it does not know, a value it cannot decode or a row
image that does not fill its event stops capture with an error naming the table and column."""

from __future__ import annotations

import pytest
from pymysqlreplication.constants import FIELD_TYPE

from capture.errors import BinlogDecodeError
from capture.sources.mysql.rows import RowDecoder
from capture.sources.mysql.table_maps import BinlogColumn, TableMap


def _table(*columns: BinlogColumn) -> TableMap:
    return TableMap(7, "shop", "orders", columns, ("id",))


def _event(*images: bytes) -> bytes:
    """Column count 2, all columns present, then the row images."""
    return bytes([2, 0b11]) + b"".join(images)


ID = BinlogColumn("id", FIELD_TYPE.LONG)
NAME = BinlogColumn("name", FIELD_TYPE.VARCHAR, max_length=40, character_set_name="utf8")


def test_rows_decode_with_nulls():
    data = _event(b"\x00" + (5).to_bytes(4, "little") + b"\x03abc", b"\x02" + (-1).to_bytes(4, "little", signed=True))
    assert RowDecoder(_table(ID, NAME)).rows(data, 0, len(data)) == [(5, "abc"), (-1, None)]


def test_an_unknown_column_type_is_refused_by_name():
    with pytest.raises(BinlogDecodeError, match=r"shop\.orders: column 'd' has binlog type code 14"):
        RowDecoder(_table(ID, BinlogColumn("d", FIELD_TYPE.NEWDATE)))


def test_an_enum_without_its_members_is_refused():
    with pytest.raises(BinlogDecodeError, match=r"column 'e' .* member list is missing"):
        RowDecoder(_table(ID, BinlogColumn("e", FIELD_TYPE.ENUM, size=1)))


def test_a_charset_python_cannot_decode_is_refused():
    with pytest.raises(BinlogDecodeError, match="column 'name' has charset 'swe7'"):
        RowDecoder(_table(ID, BinlogColumn("name", FIELD_TYPE.VARCHAR, max_length=40, character_set_name="swe7")))


def test_an_undecodable_value_names_its_column():
    data = _event(b"\x00" + (5).to_bytes(4, "little") + b"\x02\xff\xfe")
    with pytest.raises(BinlogDecodeError, match=r"shop\.orders: cannot decode column 'name' \(type code 15\)"):
        RowDecoder(_table(ID, NAME)).rows(data, 0, len(data))


def test_a_row_image_that_does_not_end_with_its_event_is_refused():
    data = _event(b"\x00" + (5).to_bytes(4, "little") + b"\x03abc")
    with pytest.raises(BinlogDecodeError, match="last row ends at"):
        RowDecoder(_table(ID, NAME)).rows(data, 0, len(data) - 1)
    wrong_count = bytes([3]) + data[1:]
    with pytest.raises(BinlogDecodeError, match="rows event has 3 columns, its table map 2"):
        RowDecoder(_table(ID, NAME)).rows(wrong_count, 0, len(wrong_count))


def test_a_table_map_with_metadata_it_does_not_understand_is_refused():
    from capture.sources.mysql.table_maps import parse

    def body(types: bytes, meta: bytes) -> bytes:
        return (
            (7).to_bytes(6, "little")
            + b"\x00\x00\x04shop\x00\x06orders\x00"
            + bytes([len(types)])
            + types
            + bytes([len(meta)])
            + meta
            + b"\x00"
            + b"\x04\x03\x02id"  # COLUMN_NAME: "id"
        )

    table_map = parse(body(bytes([FIELD_TYPE.LONG]), b""), 8, "mariadb")
    assert (table_map.table_id, table_map.schema, table_map.table, table_map.columns[0].name) == (
        7,
        "shop",
        "orders",
        "id",
    )
    with pytest.raises(
        BinlogDecodeError, match=r"shop\.orders: column metadata of types \[3\] is 2 bytes, 0 understood"
    ):
        parse(body(bytes([FIELD_TYPE.LONG]), b"\x01\x02"), 8, "mariadb")
