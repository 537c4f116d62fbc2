"""An outside audit of the binlog decoder against a real MariaDB: every column type at its edges,
charsets, wide tables, NULL bitmaps across byte boundaries, many rows per event. The bar: replaying
the changes the decoder yields gives, table by table, exactly the rows a dump (SELECT) reads, both
as Arrow values (what lands). One setup for the module: the tables are created and written once,
the binlog decoded once."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from capture.config import SourceConfig
from capture.events import ChangeBatch, TableSchema, TransactionEnd
from capture.landing.log_writer import images
from capture.sources import open_chunk_source
from capture.sources.mysql.reader import BinlogReader, position_lsn
from tests.integration.binlog_check import binlog_position

pytestmark = pytest.mark.integration

DATABASE = "t_binlog_audit"
WIDE = 300  # > 250 columns: the rows event's column count is a 3-byte length-encoded integer
ENUM_MEMBERS = [f"m{i}" for i in range(300)]  # > 255 members: 2-byte ENUM values
SET_MEMBERS = [f"s{i}" for i in range(64)]  # 64 members: 8-byte SET values
BITS = (1, 2, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 48, 63, 64)
DECIMALS = ((1, 0), (1, 1), (9, 9), (10, 0), (10, 9), (18, 0), (19, 0), (19, 19), (20, 10), (38, 0), (38, 38))
DECIMALS_TEXT = ((39, 0), (40, 20), (65, 0), (65, 30))  # beyond Arrow's 38 digits: exact text


def _decimal_extremes(p: int, s: int) -> list[str]:
    whole = "9" * (p - s) or "0"
    fraction = "9" * s
    top = f"{whole}.{fraction}" if s else whole
    smallest = f"0.{'0' * (s - 1)}1" if s else "1"
    return [top, f"-{top}", "0", smallest, f"-{smallest}", "-0"]


TABLES: dict[str, str] = {
    "ints": "CREATE TABLE ints (id INT PRIMARY KEY, ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT,"
    " siu SMALLINT UNSIGNED, mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT,"
    " biu BIGINT UNSIGNED)",
    "decimals": "CREATE TABLE decimals (id INT PRIMARY KEY, "
    + ", ".join(f"d{p}_{s} DECIMAL({p},{s})" for p, s in DECIMALS + DECIMALS_TEXT)
    + ")",
    "floats": "CREATE TABLE floats (id INT PRIMARY KEY, f FLOAT, d DOUBLE, fu FLOAT UNSIGNED, du DOUBLE UNSIGNED)",
    "bits": "CREATE TABLE bits (id INT PRIMARY KEY, " + ", ".join(f"b{n} BIT({n})" for n in BITS) + ")",
    "temporals": "CREATE TABLE temporals (id INT PRIMARY KEY, y YEAR, dt DATE, "
    + ", ".join(f"dtm{n} DATETIME({n}), ts{n} TIMESTAMP({n}) NULL, tm{n} TIME({n})" for n in range(7))
    + ")",
    "strings": "CREATE TABLE strings (id INT PRIMARY KEY,"
    " c_l1 CHAR(10) CHARACTER SET latin1, c_u3 CHAR(10) CHARACTER SET utf8mb3,"
    " c_u4 CHAR(10) CHARACTER SET utf8mb4, c_bin CHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,"
    " c_l1bin CHAR(5) CHARACTER SET latin1 COLLATE latin1_bin,"
    " c85_u3 CHAR(85) CHARACTER SET utf8mb3, c64_u4 CHAR(64) CHARACTER SET utf8mb4,"
    " c255_u4 CHAR(255) CHARACTER SET utf8mb4,"
    " v255_l1 VARCHAR(255) CHARACTER SET latin1, v256_l1 VARCHAR(256) CHARACTER SET latin1,"
    " v63_u4 VARCHAR(63) CHARACTER SET utf8mb4, v64_u4 VARCHAR(64) CHARACTER SET utf8mb4,"
    " v85_u3 VARCHAR(85) CHARACTER SET utf8mb3, v86_u3 VARCHAR(86) CHARACTER SET utf8mb3,"
    " v_bin VARCHAR(300) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,"
    " bn1 BINARY(1), bn8 BINARY(8), bn255 BINARY(255), vb VARBINARY(300),"
    " tb TINYBLOB, b BLOB, mb MEDIUMBLOB, lb LONGBLOB, tt TINYTEXT, t TEXT, mt MEDIUMTEXT, lt LONGTEXT,"
    " js JSON)",
    "charsets": "CREATE TABLE charsets (id INT PRIMARY KEY,"
    " cp1251 VARCHAR(20) CHARACTER SET cp1251, gbk VARCHAR(20) CHARACTER SET gbk,"
    " big5 VARCHAR(20) CHARACTER SET big5, greek VARCHAR(20) CHARACTER SET greek,"
    " latin2 VARCHAR(20) CHARACTER SET latin2, koi8r VARCHAR(20) CHARACTER SET koi8r,"
    " ujis VARCHAR(20) CHARACTER SET ujis)",
    "utf16": "CREATE TABLE utf16 (id INT PRIMARY KEY, v VARCHAR(20) CHARACTER SET utf16,"
    " c CHAR(5) CHARACTER SET utf16)",
    "utf16le": "CREATE TABLE utf16le (id INT PRIMARY KEY, v VARCHAR(20) CHARACTER SET utf16le,"
    " c CHAR(5) CHARACTER SET utf16le)",
    "utf32": "CREATE TABLE utf32 (id INT PRIMARY KEY, v VARCHAR(20) CHARACTER SET utf32,"
    " c CHAR(5) CHARACTER SET utf32)",
    "ucs2": "CREATE TABLE ucs2 (id INT PRIMARY KEY, v VARCHAR(20) CHARACTER SET ucs2, c CHAR(5) CHARACTER SET ucs2)",
    "enum_latin1": "CREATE TABLE enum_latin1 (id INT PRIMARY KEY, e ENUM('Ã©', 'é', 'x') CHARACTER SET latin1,"
    " s SET('Ã©', 'é', 'x') CHARACTER SET latin1)",
    "enum_utf16": "CREATE TABLE enum_utf16 (id INT PRIMARY KEY, e ENUM('a', 'ü') CHARACTER SET utf16,"
    " s SET('a', 'ü') CHARACTER SET utf16)",
    "enum_binary": "CREATE TABLE enum_binary (id INT PRIMARY KEY, e ENUM('a', 'é') CHARACTER SET binary,"
    " s SET('a', 'é') CHARACTER SET binary)",
    "latin1_high": "CREATE TABLE latin1_high (id INT PRIMARY KEY, v VARCHAR(40) CHARACTER SET latin1,"
    " c CHAR(5) CHARACTER SET latin1)",
    "enums": "CREATE TABLE enums (id INT PRIMARY KEY, e_small ENUM('a','b','ü'),"
    f" e_big ENUM({', '.join(repr(m) for m in ENUM_MEMBERS)}),"
    f" s_small SET('x','y','z'), s9 SET({', '.join(repr(m) for m in SET_MEMBERS[:9])}),"
    f" s64 SET({', '.join(repr(m) for m in SET_MEMBERS)}))",
    "geo": "CREATE TABLE geo (id INT PRIMARY KEY, g GEOMETRY, p POINT, poly POLYGON)",
    "generated": "CREATE TABLE generated (id INT PRIMARY KEY, a INT, v INT AS (a * 2) VIRTUAL,"
    " s VARCHAR(20) AS (CONCAT('x', a)) PERSISTENT, b INT)",
    "wide": f"CREATE TABLE wide (id INT PRIMARY KEY, {', '.join(f'c{i} TINYINT' for i in range(1, WIDE))})",
    "nulls": "CREATE TABLE nulls (id INT PRIMARY KEY, " + ", ".join(f"n{i} SMALLINT" for i in range(1, 18)) + ")",
    "numeric_order": "CREATE TABLE numeric_order (id INT PRIMARY KEY, y YEAR, b BIT(8), u INT UNSIGNED,"
    " e ENUM('x'), t TINYINT, tu TINYINT UNSIGNED, y2 YEAR, bu BIGINT UNSIGNED, s SMALLINT)",
    "invisible": "CREATE TABLE invisible (id INT PRIMARY KEY, a INT, h INT INVISIBLE DEFAULT 7, `we``ird` INT)",
    "versioned": "CREATE TABLE versioned (id INT PRIMARY KEY, v INT) WITH SYSTEM VERSIONING",
    # period columns named otherwise, one visible; an application-time period; a column without versioning
    "versioned_explicit": "CREATE TABLE versioned_explicit (id INT, v INT, vs TIMESTAMP(6) AS ROW START,"
    " ve TIMESTAMP(6) AS ROW END INVISIBLE, d1 DATE, d2 DATE, n INT WITHOUT SYSTEM VERSIONING,"
    " PERIOD FOR SYSTEM_TIME (vs, ve), PERIOD FOR app (d1, d2), PRIMARY KEY (id)) WITH SYSTEM VERSIONING",
    "versioned_unique": "CREATE TABLE versioned_unique (u INT NOT NULL, v INT, UNIQUE KEY (u)) WITH SYSTEM VERSIONING",
    "many_rows": "CREATE TABLE many_rows (id INT PRIMARY KEY, v VARCHAR(100), n BIGINT)",
}


def _values(rows: list[str]) -> str:
    return ", ".join(f"({r})" for r in rows)


def _statements() -> dict[str, list[str]]:
    ints = [
        "1, -128, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, 0",
        "2, 127, 255, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295, 9223372036854775807,"
        " 18446744073709551615",
        "3, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1",
        "4, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL",
    ]
    columns = DECIMALS + DECIMALS_TEXT
    extremes = [_decimal_extremes(p, s) for p, s in columns]
    decimals = [f"{k}, " + ", ".join(f"'{e[k]}'" for e in extremes) for k in range(6)]
    decimals.append("6, " + ", ".join("'0.5'" if s else "'7'" for _, s in columns))
    decimals.append("7, " + ", ".join("NULL" for _ in columns))
    floats = [
        "1, 3.40282e38, 1.7976931348623157e308, 3.40282e38, 1.7976931348623157e308",
        "2, -3.40282e38, -1.7976931348623157e308, 0, 0",
        "3, 1.17549e-38, 2.2250738585072014e-308, 1e-45, 5e-324",
        "4, 0.1, 0.1, 16777217, 9007199254740993",
        "5, -0.0, -0.0, 1.0000001, 0.30000000000000004",
    ]
    bit_rows = [
        "1, " + ", ".join(f"b'{'1' * n}'" for n in BITS),
        "2, " + ", ".join("b'0'" for _ in BITS),
        "3, " + ", ".join(f"b'{('10' * 32)[:n]}'" for n in BITS),
        "4, " + ", ".join(f"b'1{'0' * (n - 1)}'" for n in BITS),
        "5, " + ", ".join("NULL" for _ in BITS),
    ]
    lows = ["'1000-01-01 00:00:00" + (f".{'0' * (n - 1)}1" if n else "") + "'" for n in range(7)]
    highs = ["'9999-12-31 23:59:59" + (f".{'9' * n}" if n else "") + "'" for n in range(7)]
    ts_lows = ["'1970-01-01 00:00:01" + (f".{'0' * (n - 1)}1" if n else "") + "'" for n in range(7)]
    ts_highs = ["'2038-01-19 03:14:07" + (f".{'9' * n}" if n else "") + "'" for n in range(7)]
    neg_times = ["'-838:59:59" + (f".{'0' * n}" if n else "") + "'" for n in range(7)]
    pos_times = ["'838:59:59" + (f".{'9' * n}" if n else "") + "'" for n in range(7)]
    half = ["'-00:00:00" + (f".{'5'.ljust(n, '0')}" if n else "") + "'" for n in range(7)]
    tiny = ["'-00:00:00" + (f".{'0' * (n - 1)}1" if n else "") + "'" for n in range(7)]
    odd = ["'-01:02:03" + (f".{'123456'[:n]}" if n else "") + "'" for n in range(7)]

    def temporal(row_id: int, year: str, day: str, dtms: list[str], tss: list[str], tms: list[str]) -> str:
        parts = [f"{dtms[n]}, {tss[n]}, {tms[n]}" for n in range(7)]
        return f"{row_id}, {year}, {day}, " + ", ".join(parts)

    zeros = ["'0000-00-00 00:00:00'"] * 7
    temporals = [
        temporal(1, "1901", "'1000-01-01'", lows, ts_lows, neg_times),
        temporal(2, "2155", "'9999-12-31'", highs, ts_highs, pos_times),
        temporal(3, "0", "'0000-00-00'", zeros, zeros, half),
        temporal(4, "2000", "'2020-02-29'", lows, ts_lows, tiny),
        temporal(5, "1999", "'2020-00-10'", ["'2020-05-00 01:00:00'"] * 7, ts_lows, odd),
        temporal(6, "NULL", "NULL", ["NULL"] * 7, ["NULL"] * 7, ["NULL"] * 7),
        temporal(
            7,
            "1970",
            "'0001-01-01'",
            ["'0001-01-01 00:00:00'"] * 7,
            ts_highs,
            ["'-838:59:59" + (f".{'9' * n}" if n else "") + "'" for n in range(7)],
        ),
    ]
    strings = [
        "1, 'a  ', 'ü  ', '𝄞  ', 'B  ', 'é', REPEAT('€', 85), REPEAT('𝄞', 64), REPEAT('𝄞', 255),"
        " REPEAT('ÿ', 255), REPEAT('ÿ', 256), REPEAT('𝄞', 63), REPEAT('𝄞', 64), REPEAT('€', 85), REPEAT('€', 86),"
        " REPEAT('Z', 300), X'00', X'6100000000000000', REPEAT(X'00', 255), CONCAT(REPEAT(X'ff', 299), X'00'),"
        " REPEAT(X'01', 255), REPEAT(X'02', 65535), REPEAT(X'03', 70000), REPEAT(X'04', 300000),"
        " REPEAT('t', 255), REPEAT('ü', 30000), REPEAT('m', 70000), REPEAT('l', 300000),"
        ' \'{"a": [1, 2.5, "ß"], "b": null}\'',
        "2, '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', X'', X'', X'', X'', X'', X'', X'', X'',"
        " '', '', '', '', '[]'",
        "3, ' lead', ' ', '\t', 'tab\t', 'a b', '\\0', 'x', 'y', 'z', 'z\\0', '\\0', '\\n', 'q', 'r', 's',"
        " X'ff', X'0000000000000001', X'01', X'00', X'00', X'0000', X'00', X'00', ' ', '  ', '   ', ' x ', 'null'",
        "4" + ", NULL" * 28,
    ]
    charsets = [
        "1, 'Привет мир', '中文字符', '繁體中文', 'Ελληνικά', 'Zażółć', 'Съешь', 'ｱｲｳ日本'",
        "2, '', '', '', '', '', '', ''",
    ]
    wide_chars = ["1, 'a𝄞ü', 'ab  '", "2, '', ''", "3, 'AB €', 'ü'"]
    bmp_chars = ["1, 'aü€', 'ab  '", "2, '', ''", "3, 'AB', 'ü'"]
    latin1_high = [
        "1, CONCAT('a', X'81', X'8d', X'8f', X'90', X'9d', 'b'), X'81'",
        "2, CONVERT(X'80a0ff' USING latin1), 'ÿ'",
    ]
    enums = [
        "1, 'a', 'm0', 'x', 's0', 's0'",
        "2, 'ü', 'm299', 'x,y,z', 's0,s1,s2,s3,s4,s5,s6,s7,s8', '" + ",".join(SET_MEMBERS) + "'",
        "3, '', 'm255', '', '', 's63'",  # '' : the invalid ENUM value 0 (sql_mode '')
        "4, 'b', 'm256', 'z', 's8', 's7,s8,s31,s32,s62'",
        "5, NULL, NULL, NULL, NULL, NULL",
    ]
    geo = [
        "1, ST_GeomFromText('LINESTRING(0 0, 1 1, 2 3)'), ST_GeomFromText('POINT(-1.5 2.25)'),"
        " ST_GeomFromText('POLYGON((0 0, 4 0, 4 4, 0 0))')",
        "2, ST_GeomFromText('POINT(1 2)', 4326), NULL, NULL",
    ]
    many = [f"{i}, '{'v' * (i % 100)}', {i * 7919}" for i in range(1, 16001)]  # ~ 1 MB in one statement
    wide_cols = ", ".join(f"c{i}" for i in range(1, WIDE))
    return {
        "ints": [f"INSERT INTO ints VALUES {_values(ints)}", "UPDATE ints SET ti = NULL, bi = 5 WHERE id = 1"],
        "decimals": [f"INSERT INTO decimals VALUES {_values(decimals)}"],
        "floats": [f"INSERT INTO floats VALUES {_values(floats)}"],
        "bits": [f"INSERT INTO bits VALUES {_values(bit_rows)}"],
        "temporals": [f"INSERT INTO temporals VALUES {_values(temporals)}"],
        "strings": [
            f"INSERT INTO strings VALUES {_values(strings)}",
            # NULL <-> value in one UPDATE's before and after images
            "UPDATE strings SET b = IF(b IS NULL, X'beef', NULL), t = IF(t IS NULL, 'now', NULL) WHERE id IN (1, 4)",
        ],
        "charsets": [f"INSERT INTO charsets VALUES {_values(charsets)}"],
        "utf16": [f"INSERT INTO utf16 VALUES {_values(wide_chars)}"],
        "utf16le": [f"INSERT INTO utf16le VALUES {_values(wide_chars)}"],
        "utf32": [f"INSERT INTO utf32 VALUES {_values(wide_chars)}"],
        "ucs2": [f"INSERT INTO ucs2 VALUES {_values(bmp_chars)}"],
        "enum_latin1": ["INSERT INTO enum_latin1 VALUES (1, 'Ã©', 'Ã©,x'), (2, 'é', 'é'), (3, 'x', '')"],
        "enum_utf16": ["INSERT INTO enum_utf16 VALUES (1, 'a', 'a,ü'), (2, 'ü', '')"],
        "enum_binary": ["INSERT INTO enum_binary VALUES (1, 'a', 'a,é'), (2, 'é', '')"],
        "latin1_high": [f"INSERT INTO latin1_high VALUES {_values(latin1_high)}"],
        "enums": [f"INSERT INTO enums VALUES {_values(enums)}", "UPDATE enums SET e_big = 'm298' WHERE id = 1"],
        "geo": [f"INSERT INTO geo VALUES {_values(geo)}"],
        "generated": [
            "INSERT INTO generated (id, a, b) VALUES (1, 5, NULL), (2, NULL, 3)",
            "UPDATE generated SET a = a + 1",
        ],
        "wide": [
            f"INSERT INTO wide VALUES (1, {', '.join(str(i % 128) for i in range(1, WIDE))})",
            "INSERT INTO wide (id) VALUES (2)",
            f"UPDATE wide SET c{WIDE - 1} = 7, c249 = NULL, c250 = 1 WHERE id IN (1, 2)",
            "DELETE FROM wide WHERE id = 1",
            f"INSERT INTO wide ({wide_cols.split(', ')[0]}, id) VALUES (3, 3)",
        ],
        "nulls": [
            # every NULL bitmap pattern around the byte boundaries (17 + 1 columns: 3 bytes)
            *(
                "INSERT INTO nulls VALUES ("
                + ", ".join([str(row)] + [("NULL" if row >> i & 1 else str(i)) for i in range(17)])
                + ")"
                for row in (0, 0x7F, 0x80, 0xFF, 0x100, 0x1FF00, 0x1FFFF, 0x10000, 0xAAAA, 0x15555)
            ),
            "UPDATE nulls SET n8 = IF(n8 IS NULL, 8, NULL), n9 = IF(n9 IS NULL, 9, NULL), n17 = NULL",
        ],
        "numeric_order": [
            "INSERT INTO numeric_order VALUES (1, 2001, b'11111111', 4294967295, 'x', -1, 255, 0,"
            " 18446744073709551615, -32768), (2, 1901, 0, 0, '', 127, 0, 2155, 0, 32767)"
        ],
        "invisible": [
            "INSERT INTO invisible (id, a, `we``ird`) VALUES (1, 1, 1)",
            "INSERT INTO invisible (id, a, h) VALUES (2, 2, 2)",
            "UPDATE invisible SET h = NULL WHERE id = 1",
        ],
        "versioned": [
            "INSERT INTO versioned VALUES (1, 1), (2, 2)",
            "UPDATE versioned SET v = 10 WHERE id = 1",
            "DELETE FROM versioned WHERE id = 2",
            "INSERT INTO versioned VALUES (3, 3), (4, 4), (5, 5)",
            "UPDATE versioned SET id = id + 10 WHERE id > 3",
            "UPDATE versioned SET v = v + 1",
            "DELETE HISTORY FROM versioned",
            "DELETE FROM versioned WHERE id = 14",
            "INSERT INTO versioned VALUES (4, 40)",
        ],
        "versioned_explicit": [
            "INSERT INTO versioned_explicit (id, v, d1, d2, n) VALUES (1, 1, '2020-01-01', '2021-01-01', 1),"
            " (2, 2, '2020-01-01', '2021-01-01', 2), (3, 3, '2020-01-01', '2021-01-01', 3)",
            "UPDATE versioned_explicit SET n = 10 WHERE id = 1",
            "UPDATE versioned_explicit SET v = 20, n = 20 WHERE id = 2",
            "UPDATE versioned_explicit SET id = 30 WHERE id = 3",
            "DELETE HISTORY FROM versioned_explicit BEFORE SYSTEM_TIME NOW(6)",
            "DELETE FROM versioned_explicit WHERE id = 1",
            "UPDATE versioned_explicit SET v = v + 1",
        ],
        "versioned_unique": [
            "INSERT INTO versioned_unique VALUES (1, 1), (2, 2), (3, 3)",
            "UPDATE versioned_unique SET u = u + 10 WHERE u < 3",
            "DELETE FROM versioned_unique WHERE u = 3",
            "INSERT INTO versioned_unique VALUES (3, 33)",
        ],
        "many_rows": [
            f"INSERT INTO many_rows VALUES {_values(many)}",
            "UPDATE many_rows SET n = -n, v = NULL WHERE id % 3 = 0",
            "DELETE FROM many_rows WHERE id % 5 = 0",
        ],
    }


def committed_end(mariadb, start: dict[str, Any]):
    """The LSN of the end of the last transaction written so far. Not SHOW MASTER STATUS: after a
    rotation the server adds a Binlog_checkpoint event later on its own, which no transaction
    ends at or after."""
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file = cur.fetchone()[0]
        cur.execute(f"SHOW BINLOG EVENTS IN '{file}' FROM {start['pos'] if start['file'] == file else 4}")
        ends = [row[4] for row in cur.fetchall() if row[2] in ("Xid", "Query")]
    return position_lsn(file, ends[-1])


def source_config(mariadb, database: str, tables: Any = ("*",)) -> SourceConfig:
    include = [f"{database}.{t}" for t in tables]
    return SourceConfig(kind="mariadb", port=mariadb.port, user="root", server_id=4277, include=include)


def decode(
    mariadb, database: str, start: dict[str, Any], end, tables: Any = ("*",)
) -> tuple[dict[str, list], dict[str, Any]]:
    """Every (op, before, after) the decoder yields per table from `start` to `end`, and each
    table's last schema."""
    changes: dict[str, list] = {}
    schemas: dict[str, Any] = {}
    stop = threading.Event()
    timer = threading.Timer(60, stop.set)  # a reader that never reaches `end` fails the test, never hangs it
    timer.start()
    try:
        for item in BinlogReader("src", source_config(mariadb, database, tables), start, stop):
            if isinstance(item, ChangeBatch):
                name = item.table.table
                schemas[name] = item.table
                changes.setdefault(name, []).extend((c.op.value, c.before, c.after) for c in item.changes)
            elif isinstance(item, TransactionEnd) and item.frontier >= end:
                return changes, schemas
    finally:
        timer.cancel()
    raise AssertionError(f"the reader stopped before {end}")


def replay(table: TableSchema, changes: list) -> list[dict]:
    """The table as the changes leave it, as Arrow values (what lands), ordered by key; every
    before image must equal the row it replaces."""
    state: dict[tuple, dict] = {}
    keys = table.key_indexes
    for op, before, after in changes:
        if before is not None:
            old = images([before], table.row_type).to_pylist()[0]
            assert state.pop(tuple(before[i] for i in keys)) == old, f"before image of {op} differs"
        if after is not None:
            state[tuple(after[i] for i in keys)] = images([after], table.row_type).to_pylist()[0]
    return [state[k] for k in sorted(state)]


def dump(mariadb, database: str, table: str) -> tuple[TableSchema, list[dict]]:
    source = open_chunk_source("src", source_config(mariadb, database))
    try:
        described = source.describe(database, table)
        return described, source.select_chunk(described, None, None, None, 10**6).to_pylist()
    finally:
        source.close()


@pytest.fixture(scope="module")
def audit(mariadb):
    mariadb.execute(f"DROP DATABASE IF EXISTS {DATABASE}", f"CREATE DATABASE {DATABASE}")
    mariadb.execute(*TABLES.values(), database=DATABASE)
    start = binlog_position(mariadb)
    outcome: dict[str, Any] = {}
    with mariadb.connect(DATABASE) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("SET SESSION time_zone = '+00:00'")
        for statements in _statements().values():
            for statement in statements:
                cur.execute(statement)
    end = committed_end(mariadb, start)
    outcome["changes"], outcome["schemas"] = decode(mariadb, DATABASE, start, end, CHECKED)
    outcome["range"] = (start, end)
    return outcome


SEPARATE = (
    "utf16",
    "utf16le",
    "utf32",
    "ucs2",
    "latin1_high",
    "enum_latin1",
    "enum_utf16",
)  # each decoded on its own (they may fail)
CHECKED = [t for t in TABLES if t not in SEPARATE]


def _compare(mariadb, changes: dict[str, list], schemas: dict[str, Any], table: str) -> None:
    described, rows = dump(mariadb, DATABASE, table)
    logged = schemas[table]
    assert logged.row_type == described.row_type
    assert logged.key == described.key
    landed = replay(logged, changes[table])
    assert len(landed) == len(rows)
    for mine, theirs in zip(landed, rows, strict=True):
        for name in mine:
            assert mine[name] == theirs[name], (table, mine.get("id"), name)


@pytest.mark.parametrize("table", CHECKED)
def test_replayed_log_equals_dump(mariadb, audit, table):
    _compare(mariadb, audit["changes"], audit["schemas"], table)


@pytest.mark.parametrize("table", SEPARATE)
def test_charsets_python_maps_differently(mariadb, audit, table):
    changes, schemas = decode(mariadb, DATABASE, *audit["range"], [table])
    _compare(mariadb, changes, schemas, table)


def test_versioned_tables_land_without_period_columns(audit):
    """A system-versioned table lands the columns and key its user declared: not the period
    columns (visible, invisible or implicit), not the row end MariaDB appends to its keys."""
    expected = {
        "versioned": (("id", "v"), ("id",)),
        "versioned_explicit": (("id", "v", "d1", "d2", "n"), ("id",)),
        "versioned_unique": (("u", "v"), ("u",)),
    }
    assert {t: (audit["schemas"][t].names, audit["schemas"][t].key) for t in expected} == expected
