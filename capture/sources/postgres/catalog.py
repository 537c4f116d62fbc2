"""Table metadata from the PostgreSQL catalog: column types (through `types`) and the dump key.

The key is the primary key, else the first UNIQUE index (no expressions, no predicate) whose
columns are all NOT NULL, else the one the configuration names (`capture.sources.table_keys`);
the log uses the same key, whatever the table's REPLICA IDENTITY.
Generated columns are left out on both paths, as pgoutput does.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from capture.errors import DumpInputError, table_not_found
from capture.events import Column, TableSchema
from capture.sources.postgres.connection import query
from capture.sources.postgres.types import ColumnBuilder, TypeInfo, builder, column_type, select_as_text
from capture.sources.table_keys import TableKeys, no_key, table_key

KEY_SQL = (
    "SELECT i.indisprimary, i.indexrelid, array_agg(a.attname ORDER BY k.n), bool_and(a.attnotnull)"
    " FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)"
    " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
    " WHERE i.indrelid = %s AND i.indisunique AND i.indisvalid AND i.indimmediate AND i.indpred IS NULL"
    " AND i.indexprs IS NULL GROUP BY i.indisprimary, i.indexrelid ORDER BY i.indisprimary DESC, i.indexrelid"
)
# A column's collation as [provider, lc_collate, locale] (null: not collatable): the database's for
# the default collation. Columns PostgreSQL versions lack (datlocprovider before 15, the locale
# columns' names) are read through to_jsonb, so that the statement runs on every version.
COLLATION_SQL = (
    "CASE a.attcollation WHEN 0 THEN NULL"
    " WHEN 100 THEN (SELECT json_build_array(coalesce(to_jsonb(d) ->> 'datlocprovider', 'c'), d.datcollate,"
    "  coalesce(to_jsonb(d) ->> 'datlocale', to_jsonb(d) ->> 'daticulocale'))"
    "  FROM pg_database d WHERE d.datname = current_database())"
    " ELSE (SELECT json_build_array(o.collprovider, o.collcollate,"
    "  coalesce(to_jsonb(o) ->> 'colllocale', to_jsonb(o) ->> 'colliculocale'))"
    "  FROM pg_collation o WHERE o.oid = a.attcollation) END"
)
# The transaction that last wrote each column's pg_attribute row, as a JSON object of name -> xmin (a dump's
# `generation`, chunks.py), for the relation `{relation}` names; generated columns included, which the
# describe's columns leave out (the generation is what it was when it was a query of its own).
GENERATION_SQL = (
    "SELECT json_object_agg(a.attname, a.xmin::text ORDER BY a.attnum)::text FROM pg_attribute a"
    " WHERE a.attrelid = {relation} AND a.attnum > 0 AND NOT a.attisdropped"
)
# relation, columns, key candidates and the columns' generation in ONE round trip (a dump re-reads them after
# every chunk)
DESCRIBE_SQL = (
    "SELECT c.oid,"
    " (SELECT json_agg(json_build_array(a.attname, a.atttypid, a.atttypmod, format_type(a.atttypid, a.atttypmod),"
    f"  a.attnotnull, {COLLATION_SQL}) ORDER BY a.attnum) FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0"
    "  AND NOT a.attisdropped AND a.attgenerated = ''),"
    " (SELECT json_agg(json_build_array(k.columns, k.not_null, k.indimmediate) ORDER BY k.indisprimary DESC,"
    "  k.indexrelid) FROM ("
    "  SELECT i.indisprimary, i.indexrelid, i.indimmediate, array_agg(a.attname ORDER BY k.n) AS columns,"
    "  bool_and(a.attnotnull) AS not_null"
    "  FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)"
    "  JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
    "  WHERE i.indrelid = c.oid AND i.indisunique AND i.indisvalid AND i.indpred IS NULL AND i.indexprs IS NULL"
    "  GROUP BY i.indisprimary, i.indexrelid, i.indimmediate) k),"
    " getdatabaseencoding(),"
    f" ({GENERATION_SQL.format(relation='c.oid')})"
    " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')"
)
TYPE_SQL = (
    "SELECT t.oid, t.typname, t.typtype, t.typelem, t.typbasetype, t.typtypmod, t.typcategory, t.typdelim"
    " FROM pg_type t WHERE t.oid = %s"
)
TABLES_SQL = (
    "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition"
    " AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'logtide') AND n.nspname NOT LIKE 'pg\\_%%'"
    " ORDER BY 1, 2"
)
# the tables that hold rows, partitions included (a partitioned table holds none), each with the
# top of its partition tree (NULL for a table outside one): changes are published under the
# partition's own name (the publication does not publish via the partition root), so dumps read
# the partitions too, and a partition's targets get both its dumps and its changes
LEAF_TABLES_SQL = (
    "SELECT n.nspname, c.relname, rn.nspname, r.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " LEFT JOIN pg_class r ON c.relispartition AND r.oid = pg_partition_root(c.oid)"
    " LEFT JOIN pg_namespace rn ON rn.oid = r.relnamespace"
    " WHERE c.relkind = 'r'"
    " AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'logtide') AND n.nspname NOT LIKE 'pg\\_%%'"
    " ORDER BY 1, 2"
)
ROOT_SQL = (
    "SELECT n.nspname, r.relname FROM pg_class r JOIN pg_namespace n ON n.oid = r.relnamespace"
    " WHERE r.oid = pg_partition_root(%s::regclass) AND r.oid <> %s::regclass"
)


def leaf_tables(conn: Any) -> list[tuple[str, str, tuple[str, str] | None]]:
    """(schema, table, root) of every table holding rows: `root` the partitioned table at the top
    of a partition's tree, None for a table that is no partition."""
    return [(s, t, (rs, rt) if rt is not None else None) for s, t, rs, rt in query(conn, LEAF_TABLES_SQL)]


def partition_root(conn: Any, relation: int | tuple[str, str]) -> tuple[str, str] | None:
    """The partitioned table at the top of the tree `relation` (an oid, or schema and name) is a
    partition of; None if it is none."""
    name = str(relation) if isinstance(relation, int) else '"{}"."{}"'.format(*(p.replace('"', '""') for p in relation))
    rows = query(conn, ROOT_SQL, (name, name))
    return (str(rows[0][0]), str(rows[0][1])) if rows else None


class TypeCatalog:
    """Type lookups by oid, cached for the life of a connection."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self._cache: dict[tuple[int, int], TypeInfo] = {}

    def info(self, oid: int, typmod: int) -> TypeInfo:
        key = (oid, typmod)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._lookup(oid, typmod)
        return found

    def _lookup(self, oid: int, typmod: int) -> TypeInfo:
        rows = query(self.conn, TYPE_SQL, (oid,))
        if not rows:
            raise DumpInputError(f"type oid {oid} is not in pg_type")
        _, name, kind, element, base, base_typmod, category, delimiter = rows[0]
        if kind == "d":  # a domain: its base type, with the domain's own typmod if it has one
            return self.info(base, base_typmod if base_typmod != -1 else typmod)
        element_info = self.info(element, typmod) if category == "A" and element else None
        return TypeInfo(oid, name, kind, element_info, typmod, delimiter)

    def format_types(self, pairs: list[tuple[int, int]]) -> list[str]:
        rows = query(
            self.conn,
            "SELECT format_type(u.oid, u.mod) FROM unnest(%s::oid[], %s::int[]) WITH ORDINALITY AS u(oid, mod, n)"
            " ORDER BY u.n",
            ([p[0] for p in pairs], [p[1] for p in pairs]),
        )
        return [r[0] for r in rows]


def dump_key(conn: Any, oid: int) -> tuple[str, ...]:
    """Primary key, else the first UNIQUE index on NOT NULL columns; () when there is none."""
    for _primary, _index, columns, not_null in query(conn, KEY_SQL, (oid,)):
        if not_null:
            return tuple(columns)
    return ()


def own_key(candidates: list[list[Any]] | None) -> tuple[str, ...]:
    """The table's own key from DESCRIBE_SQL's candidates: the first on NOT NULL columns that is
    checked at once. A DEFERRABLE constraint lets one statement swap keys (`SET id = 3 - id`),
    which pgoutput sends as two key changes whose second names as old key the row that was there
    before the first: replayed in order it deletes the first's row. PostgreSQL does not take such
    an index as replica identity either."""
    return next((tuple(names) for names, not_null, immediate in candidates or () if not_null and immediate), ())


def _no_key_detail(candidates: list[list[Any]] | None) -> str:
    deferrable = [names for names, not_null, immediate in candidates or () if not_null and not immediate]
    if not deferrable:
        return " (without expressions or predicates)"
    return (
        f" (without expressions or predicates) checked at once: its key ({', '.join(deferrable[0])}) is DEFERRABLE, "
        "so one statement can swap keys (SET k = 3 - k), which the log gives as key changes whose replay in order "
        "deletes a row the source holds; recreate the constraint NOT DEFERRABLE"
    )


def described(
    types: TypeCatalog, schema: str, table: str, rows: list[tuple[Any, ...]], source: str, named: tuple[str, ...] | None
) -> tuple[TableSchema, list[ColumnBuilder], list[bool]]:
    """Schema of `schema.table` from the rows of DESCRIBE_SQL (`named`: the key the configuration
    names for it), a builder per column and whether a SELECT must cast it to text
    (`types.select_as_text`); DumpInputError if it does not exist, UnusableTableError if no key."""
    if not rows:
        raise table_not_found(schema, table)
    oid, attributes, candidates, encoding, _generation = rows[0]
    columns, builders, as_text, exact = [], [], [], {}
    for name, type_oid, typmod, source_type, _not_null, collation in attributes or ():
        info = types.info(type_oid, typmod)
        arrow_type, _ = column_type(info)
        columns.append(Column(name, arrow_type, source_type))
        builders.append(builder(info))
        as_text.append(select_as_text(info))
        exact[name] = exact_order(info, arrow_type, collation, encoding)
    own = own_key(candidates)
    name = f"{schema}.{table}"
    not_null = {a[0]: bool(a[4]) for a in attributes or ()}
    key = table_key(source, name, TableKeys(not_null, own), named)
    if not key:
        raise no_key(source, name, _no_key_detail(candidates), ", and REPLICA IDENTITY FULL")
    exact_key = all(exact[k] for k in key)
    return TableSchema(schema, table, tuple(columns), key, exact_key_order=exact_key, relation=oid), builders, as_text


# Types whose order in PostgreSQL is the order Spark gives their landed values: integers, numeric
# that lands as a decimal (up to 38 digits; NaN lands as NULL, which the dump checks per chunk),
# bool, date, timestamp(tz), bytea, uuid (lands as lower-case hex text: byte order). Not float
# (NaN, -0), interval ('1 mon' = '30 days'), time(tz), char(n) (blank-padded semantics), enums,
# arrays, json, text-like types of extensions.
_EXACT_TYPES = {"int2", "int4", "int8", "oid", "bool", "date", "timestamp", "timestamptz", "bytea", "uuid"}
_TEXT_TYPES = {"text", "varchar"}


def exact_order(info: TypeInfo, arrow_type: pa.DataType, collation: list[Any] | None, encoding: str) -> bool:
    """Whether PostgreSQL orders and compares this (key) column exactly as Spark orders its
    landed values. Text only under a byte-order collation of a UTF8 database ("C" or "POSIX",
    or PostgreSQL 17's builtin C / C.UTF-8, which order by code point): every libc or ICU
    locale, deterministic or not, orders linguistically."""
    if info.element is not None or info.kind != "b":
        return False
    if info.name == "numeric":
        return pa.types.is_decimal(arrow_type)
    if info.name in _TEXT_TYPES:
        if collation is None or encoding != "UTF8":
            return False
        provider, collate, locale = collation
        return (provider == "c" and collate in ("C", "POSIX")) or (provider == "b" and locale in ("C", "C.UTF-8"))
    return info.name in _EXACT_TYPES


def table_keys(conn: Any, schema: str, table: str) -> TableKeys | None:
    """Nullability of the columns and the table's own key; None if there is no such table."""
    rows = query(conn, DESCRIBE_SQL, (schema, table))
    if not rows:
        return None
    _oid, attributes, candidates, _encoding, _generation = rows[0]
    return TableKeys({a[0]: bool(a[4]) for a in attributes or ()}, own_key(candidates))


def base_tables(conn: Any) -> list[tuple[str, str]]:
    return [(schema, table) for schema, table in query(conn, TABLES_SQL)]
