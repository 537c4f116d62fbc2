"""A column's type before and after `ALTER TABLE ... MODIFY / CHANGE / CONVERT TO CHARACTER SET`,
and whether every value the column can hold shows the same after it.

MariaDB/MySQL convert the stored values of a column whose type an ALTER changes, for every row at
once, and log the statement only. A narrowing or converting change gives rows new values:
`VARCHAR(10)` to `VARCHAR(3)` cuts strings, `INT` to `TINYINT` clips numbers to 127, a DECIMAL
loses scale (rounded), `DOUBLE` to `FLOAT` rounds, `VARCHAR` to `CHAR` drops trailing spaces, a
charset without a character turns it into `?`, an ENUM without a value empties it, NULL becomes the
type's zero under NOT NULL - outside strict mode silently (`SET SESSION sql_mode=''`), and capture
does not read sql_mode: it judges from the types. A change passes when it is provably lossless for
every value the old type can hold (`lossy` returns None): the same type, a wider integer (signed
to unsigned never), a DECIMAL with at least the integer digits and the scale, FLOAT to DOUBLE, a
string type holding at least as many characters in a charset holding every character of the old
one (`_CHARSET_OK`), an ENUM or SET keeping every value (reordered too: the server maps values by
name), more fractional digits of a temporal type, more BIT bits. Anything else is taken as a
rewrite, as a type capture cannot parse is.

The old type comes from the table map the reader read last for the table (binlog_row_metadata=
FULL: lengths, charsets, ENUM values, signedness, nullability), followed through the ALTERs since
(`columns_after` in `column_rewrites`); when the reader has read no row of the table since it
started, from the landed schema history, whose `table` records carry each column's type as the
table map gave it (`definition`; records landed before they did: `from_source_type`, which knows
no string type nor nullability). The new one comes from the clause's text (`parse_definition`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from pymysqlreplication.constants import FIELD_TYPE

_INT_RANK = {FIELD_TYPE.TINY: 1, FIELD_TYPE.SHORT: 2, FIELD_TYPE.INT24: 3, FIELD_TYPE.LONG: 4, FIELD_TYPE.LONGLONG: 5}
_INT_DIGITS = {1: 3, 2: 5, 3: 8, 4: 10, 5: 20}  # decimal digits of the largest value (unsigned or signed)
_INT_NAMES = {
    "TINYINT": 1, "INT1": 1, "BOOL": 1, "BOOLEAN": 1, "SMALLINT": 2, "INT2": 2, "MEDIUMINT": 3, "INT3": 3,
    "MIDDLEINT": 3, "INT": 4, "INTEGER": 4, "INT4": 4, "BIGINT": 5, "INT8": 5,
}  # fmt: skip
_TEXT_BYTES = {"TINYTEXT": 255, "TEXT": 65535, "MEDIUMTEXT": 16777215, "LONGTEXT": 4294967295, "LONG": 16777215}
_BLOB_BYTES = {"TINYBLOB": 255, "BLOB": 65535, "MEDIUMBLOB": 16777215, "LONGBLOB": 4294967295}
_TEMPORAL = {
    FIELD_TYPE.DATETIME: "datetime", FIELD_TYPE.DATETIME2: "datetime", FIELD_TYPE.TIMESTAMP: "timestamp",
    FIELD_TYPE.TIMESTAMP2: "timestamp", FIELD_TYPE.TIME: "time", FIELD_TYPE.TIME2: "time",
}  # fmt: skip
# most bytes a character takes (a charset not listed: 4, the most any takes), fewest
_MAX_BYTES = {"ascii": 1, "latin1": 1, "binary": 1, "utf8mb3": 3, "utf8mb4": 4, "ucs2": 2, "utf16": 4, "utf16le": 4}
_MAX_BYTES |= {"utf32": 4, "big5": 2, "sjis": 2, "cp932": 2, "gbk": 2, "gb2312": 2, "euckr": 2, "ujis": 3}
_MIN_BYTES = {"ucs2": 2, "utf16": 2, "utf16le": 2, "utf32": 4}
_FULL_UNICODE = {"utf8mb4", "utf16", "utf16le", "utf32"}
_BMP = {"utf8mb3", "ucs2"}
_EIGHT_BIT = {
    "ascii", "latin1", "latin2", "latin5", "latin7", "cp1250", "cp1251", "cp1256", "cp1257", "cp850", "cp852",
    "cp866", "koi8r", "koi8u", "greek", "hebrew", "armscii8", "geostd8", "keybcs2", "macce", "macroman", "swe7",
    "dec8", "hp8", "tis620",
}  # fmt: skip
_STRINGS = {"char", "varchar", "text"}
_BYTES = {"binary", "varbinary", "blob"}


@dataclass(frozen=True)
class ColumnType:
    """What decides a column's values: `family` (int, decimal, float, double, char, varchar, text,
    binary, varbinary, blob, enum, set, datetime, timestamp, time, bit, or another type's name),
    `rank` (int: 1 TINYINT .. 5 BIGINT), `length` (char, varchar: characters; text: bytes; binary
    types: bytes; bit: bits), `precision` and `scale` (decimal; scale: a temporal type's fractional
    digits), `charset`, `values` (enum, set), `nullable` (None: not known)."""

    family: str
    rank: int = 0
    unsigned: bool = False
    precision: int = 0
    scale: int = 0
    length: int = 0
    charset: str | None = None
    values: tuple[str, ...] = ()
    nullable: bool | None = True

    def describe(self) -> str:
        if self.family == "int":
            name = {1: "TINYINT", 2: "SMALLINT", 3: "MEDIUMINT", 4: "INT", 5: "BIGINT"}[self.rank]
        elif self.family == "decimal":
            name = f"DECIMAL({self.precision},{self.scale})"
        elif self.family in ("char", "varchar", "binary", "varbinary", "bit"):
            name = f"{self.family.upper()}({self.length})"
        elif self.family in ("text", "blob"):
            name = f"{self.family.upper()} of {self.length} bytes"
        elif self.family in ("enum", "set"):
            name = f"{self.family.upper()}({', '.join(repr(v) for v in self.values)})"
        elif self.family in ("datetime", "timestamp", "time"):
            name = f"{self.family.upper()}({self.scale})"
        else:
            name = self.family.upper()
        name += " UNSIGNED" if self.unsigned else ""
        if self.charset and self.family in _STRINGS | {"enum", "set"}:
            name += f" CHARACTER SET {self.charset}"
        return name


def charset_name(name: str | None) -> str | None:
    """A charset's name as the table map gives it (utf8: utf8mb3)."""
    if name is None:
        return None
    name = name.lower()
    return "utf8mb3" if name == "utf8" else name


class Collations:
    """Each collation's charset as the server's catalog lists them (`load`:
    information_schema.COLLATION_CHARACTER_SET_APPLICABILITY). A name's prefix is not its charset:
    MariaDB 11's `uca1400_ai_ci` applies to many charsets (a column or table given it keeps the
    charset in effect: `charset` None), its full names are `utf8mb4_uca1400_ai_ci`, and so on."""

    def __init__(self, rows: Iterable[tuple[str, str, str | None]]) -> None:
        """`rows`: (COLLATION_NAME, CHARACTER_SET_NAME, FULL_COLLATION_NAME or None where the server
        has no such column: MySQL, MariaDB before 10.10)."""
        named: dict[str, set[str]] = {}
        for name, charset, full in rows:
            for one in {name, full or name}:
                named.setdefault(one.lower(), set()).add(charset.lower())
        self._charsets = {name: next(iter(cs)) if len(cs) == 1 else None for name, cs in named.items()}

    @classmethod
    def load(cls, conn: Any) -> Collations:
        """The server's (`conn`: a DB-API connection)."""
        with conn.cursor() as cursor:
            cursor.execute("SELECT * FROM information_schema.COLLATION_CHARACTER_SET_APPLICABILITY")
            at = {str(d[0]).upper(): n for n, d in enumerate(cursor.description)}
            full = at.get("FULL_COLLATION_NAME")
            rows = cursor.fetchall()
        name, charset = at["COLLATION_NAME"], at["CHARACTER_SET_NAME"]
        return cls((str(r[name]), str(r[charset]), None if full is None else str(r[full])) for r in rows)

    def names(self) -> list[str]:
        return sorted(self._charsets)

    def charset(self, collation: str) -> str | None:
        """The charset `collation` names (`binary`: binary); None when it names none (several apply,
        or the catalog lists no such collation)."""
        name = collation.lower()
        return "binary" if name == "binary" else charset_name(self._charsets.get(name))


def collation_charset(collation: str, collations: Collations | None) -> str | None:
    """The charset a collation names: the catalog's (`Collations`); without one (a caller with no
    server) the name's prefix, which fails for charset-independent names such as `uca1400_ai_ci`."""
    if collations is not None:
        return collations.charset(collation)
    name = collation.lower()
    return charset_name("binary" if name == "binary" else name.split("_")[0])


def from_binlog(col: Any) -> ColumnType:
    """The type of a table map's column (`table_maps.BinlogColumn`)."""
    kind, charset = col.type, charset_name(col.character_set_name)
    nullable = bool(col.nullable)
    if kind in _INT_RANK:
        return ColumnType("int", rank=_INT_RANK[kind], unsigned=col.unsigned, nullable=nullable)
    if kind == FIELD_TYPE.NEWDECIMAL:
        digits = {"precision": col.precision, "scale": col.decimals}
        return ColumnType("decimal", **digits, unsigned=col.unsigned, nullable=nullable)
    if kind in (FIELD_TYPE.FLOAT, FIELD_TYPE.DOUBLE):
        return ColumnType("float" if kind == FIELD_TYPE.FLOAT else "double", unsigned=col.unsigned, nullable=nullable)
    if kind in (FIELD_TYPE.STRING, FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING):
        fixed = kind == FIELD_TYPE.STRING
        if charset == "binary":
            return ColumnType("binary" if fixed else "varbinary", length=col.max_length, nullable=nullable)
        # bytes / the most a character takes: never fewer characters than the column holds
        chars = col.max_length // _MAX_BYTES.get(charset or "", 1)
        return ColumnType("char" if fixed else "varchar", length=chars, charset=charset, nullable=nullable)
    if kind in (FIELD_TYPE.BLOB, FIELD_TYPE.TINY_BLOB, FIELD_TYPE.MEDIUM_BLOB, FIELD_TYPE.LONG_BLOB):
        size = 2 ** (8 * (col.length_size or 4)) - 1
        if charset == "binary":
            return ColumnType("blob", length=size, nullable=nullable)
        return ColumnType("text", length=size, charset=charset, nullable=nullable)
    if kind in (FIELD_TYPE.ENUM, FIELD_TYPE.SET):
        values = tuple(col.enum_values or col.set_values or ())
        family = "enum" if kind == FIELD_TYPE.ENUM else "set"
        return ColumnType(family, values=values, charset=charset, nullable=nullable)
    if kind in _TEMPORAL:
        return ColumnType(_TEMPORAL[kind], scale=col.fsp, nullable=nullable)
    if kind == FIELD_TYPE.BIT:
        return ColumnType("bit", length=col.bits, nullable=nullable)
    if kind in (FIELD_TYPE.DATE, FIELD_TYPE.NEWDATE):
        return ColumnType("date", nullable=nullable)
    if kind == FIELD_TYPE.YEAR:
        return ColumnType("year", nullable=nullable)
    return ColumnType(f"type {kind}", nullable=nullable)


def _args(tokens: list, words: list[str], i: int) -> tuple[list[str], int]:
    """The parenthesized arguments at `i` (numbers as written, strings unquoted) and the index after."""
    if i >= len(words) or words[i] != "(":
        return [], i
    found: list[str] = []
    i += 1
    while i < len(words) and words[i] != ")":
        token = str(tokens[i])
        if token != "," and len(token) >= 2 and token[0] == token[-1] == "'":
            found.append(token[1:-1].replace("''", "'").replace("\\'", "'").replace("\\\\", "\\"))
        elif token != ",":
            found.append(token)
        i += 1
    return found, i + 1


def _number(args: list[str], n: int, default: int) -> int:
    try:
        return int(args[n]) if n < len(args) else default
    except ValueError:
        return -1


def parse_definition(
    tokens: list, words: list[str], default_charset: str | None, collations: Collations | None = None
) -> ColumnType | None:
    """The type a column definition's tokens (`words`: their keywords, `statements._upper`) give,
    from its data type on (`VARCHAR(3) CHARACTER SET latin1 NOT NULL DEFAULT 'x'`); a string type
    naming no charset (nor a collation that names one: `collations`) takes `default_charset` (the
    table's). None when it is no type capture parses."""
    if not words:
        return None
    name, i = words[0], 1
    if name in ("NATIONAL", "LONG", "DOUBLE", "CHARACTER") and i < len(words):
        follow = words[i]
        if (name, follow) in (("NATIONAL", "CHAR"), ("NATIONAL", "CHARACTER"), ("NATIONAL", "VARCHAR")):
            name, i = "N" + ("VARCHAR" if follow == "VARCHAR" else "CHAR"), i + 1
            if words[i : i + 1] == ["VARYING"]:
                name, i = "NVARCHAR", i + 1
        elif (name, follow) in (("LONG", "VARCHAR"), ("LONG", "VARBINARY")):
            name, i = "LONG" if follow == "VARCHAR" else "MEDIUMBLOB", i + 1
        elif (name, follow) == ("DOUBLE", "PRECISION"):
            i += 1
        elif (name, follow) == ("CHARACTER", "VARYING"):
            name, i = "VARCHAR", i + 1
    if name == "NCHAR" and words[i : i + 1] == ["VARCHAR"]:
        name, i = "NVARCHAR", i + 1
    args, i = _args(tokens, words, i)
    unsigned = nullable = charset = None
    while i < len(words):
        word = words[i]
        if word in ("UNSIGNED", "ZEROFILL"):
            unsigned = True
        elif word == "SIGNED":
            unsigned = False
        elif word == "NOT" and words[i + 1 : i + 2] == ["NULL"]:
            nullable, i = False, i + 1
        elif word == "NULL" and nullable is None:
            nullable = True
        elif word == "PRIMARY":
            nullable = False
        elif word in ("CHARSET", "CHARACTER") and i + 1 < len(words):
            i += 1 + (word == "CHARACTER")  # CHARACTER SET x
            charset = charset_name(str(tokens[i]).strip("'")) if i < len(tokens) else None
        elif word == "COLLATE" and i + 1 < len(tokens) and charset is None:
            i += 1
            charset = collation_charset(str(tokens[i]).strip("'"), collations)
        elif word in ("DEFAULT", "COMMENT", "ON", "CHECK", "REFERENCES", "AS", "GENERATED", "INVISIBLE"):
            if word == "DEFAULT" and i + 1 < len(words) and words[i + 1] == "(":
                _, i = _args(tokens, words, i + 1)
                continue
            i += 1  # one argument: a value, a comment, ... (NOT NULL may still follow)
        i += 1
    if nullable is None:  # a TIMESTAMP not declared NULL is NOT NULL under explicit_defaults_for_timestamp=OFF
        nullable = name != "TIMESTAMP"
    if name == "SERIAL":
        return ColumnType("int", rank=5, unsigned=True, nullable=False)
    if name in _INT_NAMES:
        return ColumnType("int", rank=_INT_NAMES[name], unsigned=bool(unsigned), nullable=nullable)
    if name in ("DECIMAL", "DEC", "NUMERIC", "FIXED"):
        precision, scale = _number(args, 0, 10), _number(args, 1, 0)
        return ColumnType("decimal", precision=precision, scale=scale, unsigned=bool(unsigned), nullable=nullable)
    if name in ("FLOAT", "FLOAT4", "DOUBLE", "REAL", "FLOAT8"):
        wide = name in ("DOUBLE", "REAL", "FLOAT8") or (name == "FLOAT" and len(args) == 1 and _number(args, 0, 0) > 24)
        if len(args) == 2:  # FLOAT(M,D), DOUBLE(M,D): rounded to D digits
            return ColumnType(f"{name.lower()}({args[0]},{args[1]})", nullable=nullable)
        return ColumnType("double" if wide else "float", unsigned=bool(unsigned), nullable=nullable)
    text_charset = charset or default_charset
    if name in ("NCHAR", "NVARCHAR"):
        name, text_charset = name[1:], "utf8mb3"
    if name in ("CHAR", "CHARACTER", "VARCHAR", "VARCHAR2"):
        fixed = name != "VARCHAR" and name != "VARCHAR2"
        length = _number(args, 0, 1 if fixed else -1)
        if text_charset == "binary":
            return ColumnType("binary" if fixed else "varbinary", length=length, nullable=nullable)
        return ColumnType("char" if fixed else "varchar", length=length, charset=text_charset, nullable=nullable)
    if name in ("BINARY", "VARBINARY"):
        length = _number(args, 0, 1 if name == "BINARY" else -1)
        return ColumnType(name.lower(), length=length, nullable=nullable)
    if name in _TEXT_BYTES or name == "JSON":
        size = _TEXT_BYTES.get(name, _TEXT_BYTES["LONGTEXT"])
        if name == "JSON":
            text_charset = "utf8mb4"
        elif name == "TEXT" and args:  # TEXT(n): the smallest type holding n characters
            wanted = _number(args, 0, 0) * _MAX_BYTES.get(text_charset or "", 4)
            size = min((s for s in _TEXT_BYTES.values() if s >= wanted), default=_TEXT_BYTES["LONGTEXT"])
        if text_charset == "binary":
            return ColumnType("blob", length=size, nullable=nullable)
        return ColumnType("text", length=size, charset=text_charset, nullable=nullable)
    if name in _BLOB_BYTES:
        size = _BLOB_BYTES[name]
        if name == "BLOB" and args:
            wanted = _number(args, 0, 0)
            size = min((s for s in _BLOB_BYTES.values() if s >= wanted), default=_BLOB_BYTES["LONGBLOB"])
        return ColumnType("blob", length=size, nullable=nullable)
    if name in ("ENUM", "SET"):
        return ColumnType(name.lower(), values=tuple(args), charset=text_charset, nullable=nullable)
    if name in ("DATETIME", "TIMESTAMP", "TIME"):
        return ColumnType(name.lower(), scale=_number(args, 0, 0), nullable=nullable)
    if name == "BIT":
        return ColumnType("bit", length=_number(args, 0, 1), nullable=nullable)
    if name in ("DATE", "YEAR"):
        return ColumnType(name.lower(), nullable=nullable)
    return None


def converted(old: ColumnType, charset: str) -> ColumnType:
    """A column after CONVERT TO CHARACTER SET `charset` (string, ENUM and SET columns; a TEXT grows
    to the type that holds as many characters, as the server does)."""
    charset = charset_name(charset) or charset
    if old.family not in _STRINGS | {"enum", "set"}:
        return old
    if charset == "binary":
        return replace(old, family={"char": "binary", "varchar": "varbinary", "text": "blob"}.get(old.family, "binary"))
    if old.charset == charset:
        return old
    if old.family == "text":  # the server's count: bytes / the most a character takes
        chars = old.length // _MAX_BYTES.get(old.charset or "", 1)
        wanted = chars * _MAX_BYTES.get(charset, 4)
        size = min((s for s in _TEXT_BYTES.values() if s >= wanted), default=_TEXT_BYTES["LONGTEXT"])
        return replace(old, charset=charset, length=max(size, old.length))
    return replace(old, charset=charset)


def _charset_holds(old: str | None, new: str | None) -> bool:
    """Every character of charset `old` exists in `new`."""
    if old is None or new is None:
        return False
    if old == new or (old == "ascii" and new != "binary"):
        return True
    if new in _FULL_UNICODE:
        return old != "binary"
    return new in _BMP and (old in _BMP or old in _EIGHT_BIT)


def _characters(t: ColumnType) -> int:
    """The most characters a string column's value has."""
    if t.family == "text":
        return t.length // _MIN_BYTES.get(t.charset or "", 1)
    return t.length


def _holds_string(old: ColumnType, new: ColumnType) -> bool:
    if not _charset_holds(old.charset, new.charset):
        return False
    if new.family == "char" and old.family != "char":
        return False  # CHAR drops trailing spaces
    if new.family in ("char", "varchar"):
        return new.length >= _characters(old)
    if old.family == "text" and old.charset == new.charset:
        return new.length >= old.length
    return new.length >= _characters(old) * _MAX_BYTES.get(new.charset or "", 4)


def lossy(old: ColumnType, new: ColumnType) -> str | None:
    """Why `new` may show a value of `old` otherwise (None: every value shows the same)."""
    change = f"{old.describe()} to {new.describe()}"
    if old.nullable is not False and new.nullable is False:
        return f"{change} NOT NULL: a NULL becomes the type's zero"
    same = replace(new, nullable=old.nullable)
    if same == old:
        return None
    kept = False
    if old.family == "int" and new.family == "int":
        kept = (new.unsigned == old.unsigned and new.rank >= old.rank) or (
            old.unsigned and not new.unsigned and new.rank > old.rank
        )
    elif old.family == "int" and new.family == "decimal":
        kept = new.precision - new.scale >= _INT_DIGITS[old.rank] and (old.unsigned or not new.unsigned)
    elif old.family == "decimal" and new.family == "decimal":
        kept = (
            new.scale >= old.scale
            and new.precision - new.scale >= old.precision - old.scale
            and (old.unsigned or not new.unsigned)
        )
    elif old.family in ("float", "double") and new.family in ("float", "double"):
        kept = new.family == "double" or old.family == "float"
        kept = kept and (old.unsigned or not new.unsigned)
    elif old.family in _STRINGS and new.family in _STRINGS:
        kept = _holds_string(old, new)
    elif old.family in _BYTES and new.family in _BYTES:
        if new.family == "binary":  # BINARY(n) pads with zero bytes up to n
            kept = old.family == "binary" and new.length == old.length
        else:
            kept = new.length >= old.length
    elif old.family == new.family and old.family in ("enum", "set"):
        kept = set(old.values) <= set(new.values) and _charset_holds(old.charset, new.charset)
    elif old.family == new.family and old.family in ("datetime", "timestamp", "time"):
        kept = new.scale >= old.scale
    elif old.family == new.family == "bit":
        kept = new.length >= old.length
    elif old.family == new.family:
        kept = old.family in ("date", "year")
    return None if kept else change


_DEFAULTS = {f.name: f.default for f in fields(ColumnType)}


def definition(t: ColumnType) -> str:
    """A column type as JSON text, for the schema history's `table` records (`Column.definition`):
    its fields other than their defaults, `family` always (`{"family": "varchar", "length": 320,
    "charset": "utf8mb4", "nullable": false}`); `from_definition` reads it back."""
    found = {k: v for k, v in asdict(t).items() if k == "family" or v != _DEFAULTS[k]}
    if "values" in found:
        found["values"] = list(found["values"])
    return json.dumps(found, separators=(",", ":"), ensure_ascii=False)


def from_definition(text: str) -> ColumnType | None:
    """The type `definition` wrote (None for text it did not write)."""
    try:
        found = json.loads(text)
        if not isinstance(found, dict) or not isinstance(found.get("family"), str) or set(found) - set(_DEFAULTS):
            return None
        if "values" in found:
            found["values"] = tuple(str(v) for v in found["values"])
        return ColumnType(**found)
    except (ValueError, TypeError):
        return None


def from_source_type(source_type: str) -> ColumnType | None:
    """The type a landed `table` record's source type names, where it is the whole type (integers,
    DECIMAL, FLOAT, DOUBLE, temporal types, BIT: `types.column_type`); None for the string types,
    whose record names neither length nor charset. Nullability is not recorded: not known."""
    words = source_type.lower().replace("(", " ").replace(")", " ").replace(",", " ").split()
    if not words:
        return None
    name, numbers = words[0], [int(w) for w in words[1:] if w.isdigit()]
    unsigned = "unsigned" in words
    ints = {"tinyint": 1, "smallint": 2, "mediumint": 3, "int": 4, "bigint": 5}
    if name in ints:
        return ColumnType("int", rank=ints[name], unsigned=unsigned, nullable=None)
    if name == "decimal" and len(numbers) == 2:
        return ColumnType("decimal", precision=numbers[0], scale=numbers[1], nullable=None)
    if name in ("float", "double"):
        return ColumnType(name, nullable=None)
    if name in ("datetime", "timestamp", "time") and len(numbers) == 1:
        return ColumnType(name, scale=numbers[0], nullable=None)
    if name in ("date", "year"):
        return ColumnType(name, nullable=None)
    if name == "bit" and len(numbers) == 1:
        return ColumnType("bit", length=numbers[0], nullable=None)
    return None
