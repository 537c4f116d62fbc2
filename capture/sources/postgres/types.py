"""PostgreSQL column types -> Arrow types, and the parsing of their text form.

Both paths see the same text: pgoutput sends every value in its type's text output, and
chunk SELECTs fetch every column as raw text (no driver conversion). Both connections run
with the session settings in `SESSION_SETTINGS` (UTC, ISO dates, ISO 8601 intervals, hex
bytea, exact floats), so one builder per column turns the texts of a column (a list, or an
Arrow string array as the log's column-wise decoder and COPY give them) into an Arrow array,
column by column, on either path:

  smallint/integer/bigint   int16/int32/int64            oid       int64
  numeric(p,s), p <= 38     decimal128(p,s)              numeric without (p,s) or p > 38: exact text
  real / double precision   float32 / float64 (NaN and +-Infinity kept)
  boolean                   bool                         bytea     binary
  text, varchar, char(n), name, citext, uuid, json, jsonb, enums, any other type: string (its text form)
  date                      date32                       time      time64[us]
  timestamp                 timestamp[us]                timestamptz  timestamp[us, UTC]
  interval                  duration[us] (a month counts 30 days, as PostgreSQL compares intervals)
  one-dimensional arrays    list<element type>           domains   their base type
Dates and timestamps outside 0001-01-01 .. 9999-12-31 (what Spark, Python and most Iceberg
readers hold) land as the nearest end of that range: -infinity and BC as 0001-01-01 00:00:00,
infinity and years past 9999 as 9999-12-31 23:59:59.999999 (timestamptz: in UTC); in a key column
such a value is refused (`ClampedKeys`: capture stops, a dump refuses the table) unless the source
sets `clamped_keys: accept`, since keys that differ only there would land as one. Values Arrow
cannot hold land as NULL and are listed in the README: numeric NaN in a numeric(p,s) column,
time '24:00:00', intervals beyond about 292,000 years (in a key refused as clamped dates are, and
so is an array key with such an element; NaN and 24:00 are one value per key, so allowed). A
multi-dimensional array is refused, in a key (`ClampedKeys.check`) and outside it
(`ClampedKeys.check_arrays`), naming source, table, column, value and shape.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from capture.config import Policy
from capture.events import TableSchema
from capture.log import get_logger
from capture.sources.policy import refuse_or_warn

MAX_ARROW_DECIMAL = 38
log = get_logger(__name__)
SESSION_SETTINGS = {
    "TimeZone": "UTC",
    "DateStyle": "ISO, YMD",
    "IntervalStyle": "iso_8601",
    "bytea_output": "hex",
    "extra_float_digits": "3",
}
Texts = list[Any] | pa.Array  # str or None per value
ColumnBuilder = Callable[[Texts], pa.Array]


@dataclass(frozen=True)
class TypeInfo:
    """What the catalog says about a type (pg_type), domains already resolved to their base."""

    oid: int
    name: str  # pg_type.typname of the base type, e.g. int4, numeric, _int4
    kind: str  # typtype: b base, e enum, r range, c composite, ...
    element: TypeInfo | None  # for arrays
    typmod: int  # of the column (or of the domain's base)
    delimiter: str = ","  # pg_type.typdelim: between this type's elements in an array's text (box: ';')


def _text(values: Texts) -> pa.Array:
    if isinstance(values, pa.Array):
        return values if values.type == pa.string() else values.cast(pa.string())
    return pa.array(values, type=pa.string())


def _py(values: Texts) -> list[Any]:
    return values.to_pylist() if isinstance(values, pa.Array) else values


def _cast(arrow_type: pa.DataType, fallback: Callable[[str], Any]) -> ColumnBuilder:
    """Arrow's cast on the whole column; if any value does not parse, value by value with
    `fallback` (which maps what Arrow's cast does not take: NaN, infinity, BC, ...)."""

    def build(values: Texts) -> pa.Array:
        text = _text(values)
        try:
            return text.cast(arrow_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return pa.array([None if v is None else fallback(v) for v in _py(values)], type=arrow_type)

    return build


def _none(_: str) -> None:
    return None


def _decimal_or_none(text: str) -> Decimal | None:
    value = Decimal(text)
    return value if value.is_finite() else None


def _past_9999(text: str) -> bool | None:
    """Whether a date or timestamp text lies past 9999 (True: 'infinity', a year of five digits or
    more) or before year 1 (False: '-infinity', BC); None: within 0001 .. 9999."""
    if text in ("infinity", "-infinity"):
        return text == "infinity"
    if text.endswith(" BC"):
        return False
    year = text.split("-", 1)[0]
    return True if year.isdigit() and len(year) > 4 else None


_OUT_OF_RANGE = r"^-?infinity$| BC$|^[0-9]{5,}-"  # `_past_9999` on a whole column


class ClampedKeys:
    """A source's `clamped_keys` setting (config) over key values that would not land as themselves,
    one landed value per source value: dates and timestamps outside 0001-01-01 .. 9999-12-31 (they
    land as the range's end, as every other value past that end and the end itself do), intervals
    beyond Arrow's durations (about 292,000 years: NULL, as every other such interval does) and
    arrays of these with such an element; keys that differ only there would land as one (README,
    PostgreSQL: types). NaN numeric and time '24:00' are one value each, so they pass. `refuse`:
    `check` raises `error` naming table, column and value; `accept`: it logs
    `capture.clamped_key_accepted` once per table and column (for this object's life: a capture
    run, the source's and not each reader's, so reconnects do not warn again; a dump source) and the
    values land clamped (or NULL), and `check` says so (a dump records it with the chunk:
    `ChunkMeta.clamped_keys`)."""

    def __init__(
        self, source: str, policy: Policy, error: type[Exception], value_error: type[Exception] | None = None
    ) -> None:
        self.source, self.policy, self.error = source, policy, error
        self.value_error = value_error or error  # `check_arrays`: a value outside the key
        self._warned: set[tuple[str, str]] = set()

    def check_arrays(self, table: TableSchema, texts: Sequence[pa.Array]) -> None:
        """Refuse (`value_error`) a multi-dimensional array in any array column outside the key (the
        key's are refused by `check`): a column lands as a list of its element type, which a value of
        more dimensions cannot fill, whatever the policy; called before anything of the chunk or
        transaction lands, so capture and dumps stop at the same value with the same message."""
        keys = set(table.key_indexes)
        for index, (column, text) in enumerate(zip(table.columns, texts, strict=True)):
            if index in keys or not len(text) or not pa.types.is_list(column.arrow_type):
                continue
            found = pc.match_substring_regex(_text(text), _MULTI_DIMENSIONAL)
            if pc.any(found).as_py():
                value = _text(text).filter(found)[0].as_py()
                raise self.value_error(multi_dimensional_message(self.source, table, column.name, column.source_type,
                                                                 value))  # fmt: skip

    def check(self, table: TableSchema, texts: Sequence[pa.Array], indexes: Sequence[int]) -> bool:
        """Check the key columns `indexes` of `table` (their texts, in that order). True: one of them
        lands as another value (accepted), so two of these keys may land as one."""
        clamped = False
        for index, text in zip(indexes, texts, strict=True):
            column = table.columns[index]
            if len(text) and pa.types.is_list(column.arrow_type):
                self._one_dimensional(table, column.name, text)
            if not len(text):
                continue
            found = _unlandable(column.arrow_type, text)
            if found is None:
                continue
            clamped = True
            if (table.qualified_name, column.name) in self._warned:
                continue
            value, lands_as = found
            refuse_or_warn(
                self.policy,
                self.error(clamped_key_message(self.source, table, column.name, value, lands_as)),
                log,
                "capture.clamped_key_accepted",
                source=self.source,
                table=table.qualified_name,
                column=column.name,
                value=value,
                lands_as=lands_as,
                reason="clamped_keys: accept. Such key values land as another value (the nearest end of "
                "0001-01-01 .. 9999-12-31, or NULL), as other such values do: rows whose keys land as the same "
                "value become one target row (warned once per table and column)",
                action="keep one such value a key, or give those rows other keys",
            )
            self._warned.add((table.qualified_name, column.name))
        return clamped

    def _one_dimensional(self, table: TableSchema, column: str, text: pa.Array) -> None:
        """A multi-dimensional array lands as nothing (only one-dimensional arrays land, as lists):
        in a key it is refused whatever the policy, before anything of its chunk or transaction lands."""
        found = pc.match_substring_regex(_text(text), _MULTI_DIMENSIONAL)
        if not pc.any(found).as_py():
            return
        value, name = _text(text).filter(found)[0].as_py(), table.qualified_name
        raise self.error(
            f"source {self.source!r}: {name}: key column {column!r} holds {value!r}, a multi-dimensional array: only "
            "one-dimensional arrays land (as lists), so this key cannot land at all. Ways out: leave "
            f"{name} out of capture (exclude) and restart capture, which then goes on past it; make those keys "
            f"one-dimensional (UPDATE ... SET {column} = ...) or name another unique key for {name} (`keys:`); then "
            f"capture {name} again and dump it (a dump refusal needs only the UPDATE, then the dump again)"
        )


_MULTI_DIMENSIONAL = r"^\{\{|^\[[^=]*\]\["  # '{{1,2},{3,4}}', '[0:1][1:2]={{...}}'


def array_shape(text: str) -> list[int]:
    """The lengths of a (rectangular, as PostgreSQL keeps them) array literal's dimensions, outermost
    first: '{{1,2,3},{4,5,6}}' -> [2, 3] (a bound prefix '[0:1][1:3]=' is skipped)."""
    if text.startswith("["):
        text = text[text.index("=") + 1 :]
    counts: list[int] = []  # elements seen at each depth, in the first sub-array of each
    depth, quoted, i, done = 0, False, 0, set()
    while i < len(text):
        char = text[i]
        if quoted:
            if char == "\\":
                i += 1
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char == "{":
            depth += 1
            if len(counts) < depth:
                counts.append(0)
            if depth > 1 and depth - 1 not in done:
                counts[depth - 2] += 1
        elif char == "}":
            if depth == len(counts) and depth not in done and text[i - 1] != "{":
                counts[depth - 1] += 1
            done.add(depth)
            depth -= 1
        elif char == "," and depth == len(counts) and depth not in done:
            counts[depth - 1] += 1
        i += 1
    return counts


def multi_dimensional_message(source: str, table: TableSchema, column: str, source_type: str, text: str) -> str:
    """Why a multi-dimensional array value outside the key is refused, and the ways out."""
    name, shown = table.qualified_name, text if len(text) <= 200 else text[:200] + "..."
    shape = array_shape(text)
    return (
        f"source {source!r}: {name}: column {column!r} ({source_type}) holds {shown!r}, a {len(shape)}-dimensional "
        f"array ({' x '.join(map(str, shape))}): only one-dimensional arrays land (as lists of the element type), "
        "so nothing of this change lands. Ways out: (1) leave "
        f"{name} out of capture (exclude) and restart capture, which then goes on past it; make the values "
        f"one-dimensional (UPDATE ... SET {column} = ...), or have the column land as the arrays' text "
        f"(ALTER TABLE {name} ALTER COLUMN {column} TYPE text USING {column}::text); then capture {name} again "
        f"and dump it; (2) for a dump refusal the UPDATE or the ALTER alone, then the dump again"
    )


def _unlandable(arrow_type: pa.DataType, text: pa.Array) -> tuple[str, str] | None:
    """The first text of a key column that would not land as itself, and what it lands as; None:
    every value lands as itself."""
    if pa.types.is_date(arrow_type) or pa.types.is_timestamp(arrow_type):
        beyond = pc.match_substring_regex(_text(text), _OUT_OF_RANGE)
        if not pc.any(beyond).as_py():
            return None
        value = _text(text).filter(beyond)[0].as_py()
        return value, _clamped_to(value, pa.types.is_timestamp(arrow_type))
    if pa.types.is_duration(arrow_type):
        for value in _py(text):
            if value is not None and _interval_or_none(value) is None:
                return value, "NULL (Arrow's durations hold about 292,000 years either way)"
        return None
    if pa.types.is_list(arrow_type):
        return _unlandable_list(arrow_type.value_type, text)
    return None


def _unlandable_list(element: pa.DataType, text: pa.Array) -> tuple[str, str] | None:
    """An array key that would not land as itself: one with a lower bound other than 1 (it lands
    without it, as the array of the same elements from 1 does: PostgreSQL tells them apart), or
    one with an element that would not (dates, timestamps, intervals as above; NaN in a
    numeric(p,s) array and time '24:00' land as a NULL element, as NULL itself does)."""
    decimal, times = pa.types.is_decimal(element), pa.types.is_time(element)
    temporal = pa.types.is_date(element) or pa.types.is_timestamp(element) or pa.types.is_duration(element)
    for value in _py(text):
        if value is None:
            continue
        if value.startswith("["):  # only a lower bound other than 1 is written ('[0:2]={1,2,3}')
            bound = value[1 : value.index(":")]
            return value, f"a list without its lower bound {bound}, as {value[value.index('=') + 1 :]!r} does"
        if not (decimal or times or temporal):
            continue
        items = [v for v in parse_array(value) if v is not None]
        if not items:
            continue
        if temporal:
            found = _unlandable(element, pa.array(items, pa.string()))
        else:
            nulls = [v for v in items if (v == "NaN" if decimal else v.startswith("24:"))]
            found = (nulls[0], "NULL") if nulls else None
        if found is not None:
            return value, f"a list whose element {found[0]!r} lands as {found[1]}"
    return None


def array_literal(value: list[Any]) -> str:
    """A landed array key value (a list of the element type's Python values) as PostgreSQL's array
    text, every element quoted: bound as a parameter and cast to the column's type, it names the
    array the value landed from (lower bound 1; clamped elements as their landed value)."""
    return "{" + ",".join("NULL" if v is None else _quoted(_element_text(v)) for v in value) + "}"


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _element_text(value: Any) -> str:
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    if isinstance(value, datetime):
        return value.isoformat(" ")
    if isinstance(value, (date, time)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return f"{value // timedelta(microseconds=1)} microseconds"
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)


def _clamped_to(text: str, timestamp: bool = True) -> str:
    end = "9999-12-31 23:59:59.999999" if _past_9999(text) else "0001-01-01 00:00:00"
    return end if timestamp else end[:10]


def clamped_key_message(source: str, table: TableSchema, column: str, text: str, lands_as: str) -> str:
    """Why a key value is refused, and the ways out that work: in capture the refused change stays in
    the log past the checkpoint, so an UPDATE of the rows cannot get capture past it (and its old
    key holds the same value); excluding the table can, and a dump then brings the fixed rows."""
    name = table.qualified_name
    why = (
        "(a landed list keeps no lower bound)"
        if "lower bound" in lands_as
        else "(Arrow's decimals hold no NaN, its times no 24:00)"
        if lands_as.endswith("lands as NULL")
        else "(Iceberg, Spark and Python hold dates and timestamps from 0001-01-01 to 9999-12-31, Arrow's durations "
        "about 292,000 years)"
    )
    return (
        f"source {source!r}: {name}: key column {column!r} holds {text!r}, which lands as {lands_as} "
        f"{why}, as other such values do: rows whose keys differ only there would land as one "
        "target row. Ways out: (1) set `clamped_keys: accept` on the source, when no two rows' keys differ only "
        "there (as `(id, valid_to)` with one 'infinity' row an id): capture and dumps warn and land such values "
        "clamped (intervals as NULL), and rows whose keys land as the same value become one target row; "
        f"(2) leave {name} out of capture (exclude) and restart capture, which then goes on past it, give those "
        f"rows other keys (UPDATE ... SET {column} = ...), then capture {name} again and dump it; an UPDATE alone "
        "does not get capture past a refused change, which stays in the log, and the UPDATE's old key holds the "
        "same value (a dump refusal needs only the UPDATE, then the dump again)"
    )


def _date(text: str) -> date:
    """A date; outside 0001-01-01 .. 9999-12-31 the nearest end of that range (README)."""
    beyond = _past_9999(text)
    if beyond is None:
        return date.fromisoformat(text)
    return date.max if beyond else date.min


def _timestamp(text: str) -> datetime:
    """A timestamp (timestamptz: with its offset); outside 0001-01-01 .. 9999-12-31 23:59:59.999999
    the nearest end of that range (README)."""
    beyond = _past_9999(text)
    if beyond is None:
        return datetime.fromisoformat(text)
    return datetime.max if beyond else datetime.min


def _timestamptz(values: Texts) -> pa.Array:
    text = _text(values)
    utc = pa.timestamp("us", tz="UTC")
    try:
        if pc.all(pc.ends_with(text, "+00")).as_py() is not False:  # TimeZone=UTC: always '+00'
            return pc.utf8_slice_codeunits(text, 0, -3).cast(pa.timestamp("us")).cast(utc)
        return pc.replace_substring_regex(text, r"([+-]\d\d)$", r"\1:00").cast(utc)
    except pa.ArrowInvalid:  # naive ends of the range (`_timestamp`) are UTC's
        return pa.array([None if v is None else _timestamp(v) for v in _py(values)], type=utc)


def _bool(values: Texts) -> pa.Array:
    text = _text(values)  # pgoutput sends 't'/'f', boolean::text gives 'true'/'false'
    return pc.or_(pc.equal(text, "t"), pc.equal(text, "true"))


def _bytea(values: Texts) -> pa.Array:
    return pa.array([None if v is None else bytes.fromhex(v[2:]) for v in _py(values)], type=pa.binary())


def _time(values: Texts) -> pa.Array:
    micros = []
    for v in _py(values):
        if v is None:
            micros.append(None)
            continue
        h, m, s = v.split(":")
        value = (int(h) * 3600 + int(m) * 60) * 1_000_000 + round(Decimal(s) * 1_000_000)
        micros.append(value if value < _DAY_US else None)  # '24:00:00' is past Arrow's day
    return pa.array(micros, type=pa.int64()).cast(pa.time64("us"))


_INTERVAL = re.compile(
    r"^P(?:(?P<y>-?\d+)Y)?(?:(?P<mo>-?\d+)M)?(?:(?P<w>-?\d+)W)?(?:(?P<d>-?\d+)D)?"
    r"(?:T(?:(?P<h>-?\d+)H)?(?:(?P<mi>-?\d+)M)?(?:(?P<s>-?\d+(?:\.\d+)?)S)?)?$"
)
_DAY_US = 86_400_000_000


def interval_micros(text: str) -> int:
    """ISO 8601 interval text (IntervalStyle iso_8601) -> microseconds; a month is 30 days."""
    match = _INTERVAL.match(text)
    if match is None:
        raise ValueError(f"interval {text!r} is not in ISO 8601 form (IntervalStyle must be iso_8601)")
    part = {k: v or "0" for k, v in match.groupdict().items()}
    months = int(part["y"]) * 12 + int(part["mo"])
    days = months * 30 + int(part["w"]) * 7 + int(part["d"])
    micros = days * _DAY_US + (int(part["h"]) * 3600 + int(part["mi"]) * 60) * 1_000_000
    return micros + round(Decimal(part["s"]) * 1_000_000)


_INT64 = 2**63 - 1


def _interval_or_none(text: str) -> int | None:
    micros = interval_micros(text)
    return micros if -_INT64 <= micros <= _INT64 else None  # beyond about 292,000 years


def _interval(values: Texts) -> pa.Array:
    return pa.array([None if v is None else _interval_or_none(v) for v in _py(values)], type=pa.duration("us"))


def parse_array(text: str, delimiter: str = ",") -> list[str | None]:
    """A one-dimensional array literal ('{1,NULL,"a b"}', '[0:1]={..}') -> element texts; elements
    are separated by their type's `delimiter` (',' but for box: ';')."""
    if text.startswith("["):
        text = text[text.index("=") + 1 :]
    if len(text) < 2 or text[0] != "{" or text[-1] != "}":
        raise ValueError(f"not an array literal: {text[:40]!r}")
    end = len(text) - 1
    items: list[str | None] = []
    i = 1
    if end == 1:
        return items
    while i < end:
        char = text[i]
        if char == "{":
            raise ValueError("multi-dimensional arrays are not supported (only one-dimensional arrays land as lists)")
        if char == '"':
            i += 1
            parts = []
            while text[i] != '"':
                if text[i] == "\\":
                    i += 1
                parts.append(text[i])
                i += 1
            items.append("".join(parts))
            i += 1
        else:
            j = text.find(delimiter, i)
            if j == -1:
                j = end
            token = text[i:j]
            items.append(None if token == "NULL" else token)
            i = j
        i += 1  # the delimiter (or the closing '}')
    return items


def _array(element: ColumnBuilder, arrow_type: pa.DataType, delimiter: str = ",") -> ColumnBuilder:
    def build(values: Texts) -> pa.Array:
        offsets = [0]
        flat: list[str | None] = []
        mask = []
        for v in _py(values):
            if v is not None:
                flat.extend(parse_array(v, delimiter))
            offsets.append(len(flat))
            mask.append(v is None)
        items = element(flat)
        return pa.ListArray.from_arrays(
            pa.array(offsets, type=pa.int32()), items, type=arrow_type, mask=pa.array(mask, type=pa.bool_())
        )

    return build


def _numeric_typmod(typmod: int) -> tuple[int, int] | None:
    if typmod < 4:
        return None
    precision, scale = ((typmod - 4) >> 16) & 0xFFFF, (typmod - 4) & 0x7FF
    if (typmod - 4) & 0x400:  # negative scale (PostgreSQL 15+)
        return None
    return precision, scale


_SIMPLE: dict[str, tuple[pa.DataType, ColumnBuilder | None]] = {
    "int2": (pa.int16(), None),
    "int4": (pa.int32(), None),
    "int8": (pa.int64(), None),
    "oid": (pa.int64(), None),
    "float4": (pa.float32(), None),
    "float8": (pa.float64(), None),
    "bool": (pa.bool_(), _bool),
    "bytea": (pa.binary(), _bytea),
    "date": (pa.date32(), _cast(pa.date32(), _date)),
    "timestamp": (pa.timestamp("us"), _cast(pa.timestamp("us"), _timestamp)),
    "timestamptz": (pa.timestamp("us", tz="UTC"), _timestamptz),
    "time": (pa.time64("us"), _time),
    "interval": (pa.duration("us"), _interval),
}


# psycopg2 converts values of these types (and arrays and ranges) to Python objects by default:
# a chunk SELECT casts them to text (for them an I/O conversion: the output function's text, as
# pgoutput sends; boolean::text says 'true' where the output says 't', which `_bool` accepts).
# Every other type reaches us as the server's text already (in C), and must not be cast:
# char(n)::text drops the padding and inet::text adds a netmask the output leaves out.
_DRIVER_CONVERTS = {
    "int2", "int4", "int8", "oid", "numeric", "float4", "float8", "bool", "date", "time", "timetz",
    "timestamp", "timestamptz", "interval", "bytea", "json", "jsonb",
}  # fmt: skip


def select_as_text(info: TypeInfo) -> bool:
    """True when a chunk SELECT must cast the column to text to get its text form."""
    return info.element is not None or info.kind in ("r", "m") or (info.kind == "b" and info.name in _DRIVER_CONVERTS)


def is_text(arrow_type: pa.DataType) -> bool:
    return arrow_type == pa.string()


def column_type(info: TypeInfo) -> tuple[pa.DataType, ColumnBuilder | None]:
    """Arrow type and the builder from texts (None: the texts are the values, a string column)."""
    if info.element is not None:
        element_type, element_build = column_type(info.element)
        arrow_type = pa.list_(element_type)
        return arrow_type, _array(element_build or _text, arrow_type, info.element.delimiter)
    if info.kind == "b" and info.name == "numeric":
        shape = _numeric_typmod(info.typmod)
        if shape is None or shape[0] > MAX_ARROW_DECIMAL or shape[1] > shape[0]:
            return pa.string(), None
        arrow_type = pa.decimal128(*shape)
        return arrow_type, _cast(arrow_type, _decimal_or_none)
    if info.kind == "b" and info.name in _SIMPLE:
        arrow_type, build = _SIMPLE[info.name]
        return arrow_type, build or _cast(arrow_type, _none)
    return pa.string(), None


def builder(info: TypeInfo) -> ColumnBuilder:
    _arrow_type, build = column_type(info)
    return build or _text
