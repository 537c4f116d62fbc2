"""What the harness needs from a source database: one subclass per database (mariadb.py,
postgres.py) holds its DDL, type declarations, connections and how to tell that capture caught up."""

from __future__ import annotations

from typing import Any, ClassVar

from tests.convergence.schema import AI_KEY_TAILS, KEY_TAILS, SqlType, Table


class Kit:
    """A database of the harness on a private server (tests/servers.py)."""

    kind: str  # the harness's name for it: mariadb | postgres
    types: dict[str, SqlType]  # every kind this database declares (schema.COMMON_KINDS and its own)
    # the type changes the DDL workload makes, kind to kind: those capture passes without
    # `column_rewrites: accept` on this database (README, DDL during a dump)
    widenings: ClassVar[dict[str, str]] = {}
    # type changes capture stops at unless `column_rewrites: accept` (then made only before the dump
    # reaches the table: workload.Workload._ddl)
    rewrites: ClassVar[dict[str, str]] = {}
    # `text_ci` under the `ai` collation (Scale.collation): accent- and case-insensitive
    text_ai: ClassVar[SqlType | None] = None

    def __init__(self, server: Any, database: str) -> None:
        self.server = server
        self.database = database
        self.collation = "ci"
        self.key_tails = KEY_TAILS

    def use_collation(self, collation: str) -> None:
        """`ci` (the default) or `ai`: the text keys accent- and case-insensitive, respelt across accents."""
        if collation not in ("ci", "ai"):
            raise ValueError(f"collation {collation!r}: ci or ai")
        self.collation = collation
        if collation == "ai":
            assert self.text_ai is not None
            self.types = {**self.types, "text_ci": self.text_ai}
            self.key_tails = AI_KEY_TAILS

    @property
    def type_kinds(self) -> tuple[str, ...]:
        """The kinds of the `types` table's columns: every declared kind but the big (TOASTed) ones and
        those of its key."""
        return tuple(k for k in self.types if not k.startswith(("big_", "key_", "ddl_")))

    def column_ddl(self, table: Table) -> list[str]:
        """`name TYPE [NOT NULL]` of each of the table's columns."""
        return [
            f"{self.quote(c.name)} {self.types[c.kind].ddl}{'' if c.nullable else ' NOT NULL'}" for c in table.columns
        ]

    def retype_sql(self, table: Table, column: str, kind: str) -> str:
        """ALTER TABLE giving `column` the type of `kind` (its nullability kept)."""
        raise NotImplementedError

    @property
    def schema(self) -> str:
        """The first part of `db.table` in the landing zone and the commands."""
        raise NotImplementedError

    def quote(self, name: str) -> str:
        raise NotImplementedError

    def create(self, tables: list[Table]) -> None:
        """A fresh database holding `tables` (empty)."""
        raise NotImplementedError

    def drop(self) -> None:
        raise NotImplementedError

    def administer(self, tables: list[Table], source: str) -> None:
        """What an administrator does before a read-only source's first start (nothing on MariaDB)."""

    def connect(self) -> Any:
        """A DB-API connection, not autocommit, in UTC, with `%s` parameters."""
        raise NotImplementedError

    def source_config(self, tables: list[Table]) -> dict[str, Any]:
        """The config's `sources.<name>` entry: connection, include/exclude (no `keys`)."""
        raise NotImplementedError

    def is_duplicate(self, error: BaseException) -> bool:
        """The database refused a row because its key exists (under the column's collation)."""
        raise NotImplementedError

    def wait_until_landed(self, capture: Any, timeout: float = 120) -> None:
        """Until capture has landed everything committed so far."""
        raise NotImplementedError

    def upsert(self, cur: Any, table: Table, names: list[str], row: list[Any]) -> bool:
        """Write `row` whether its key exists or not (under the key's collation), the key as spelt in
        `row`: True when it inserted a new row, False when it replaced or updated one."""
        raise NotImplementedError

    def insert_many(self, conn: Any, insert: str, rows: list[tuple[Any, ...]]) -> None:
        """`insert` ("INSERT INTO t (a, b) VALUES ") for every row, in few round trips."""
        with conn.cursor() as cur:
            cur.executemany(insert + "(" + ", ".join(["%s"] * len(rows[0])) + ")", rows)

    def select_sql(self, table: Table) -> str:
        """SELECT of every column as the comparison reads it."""
        exprs = [self.types[c.kind].select.format(self.quote(c.name)) for c in table.columns]
        return f"SELECT {', '.join(exprs)} FROM {self.quote(table.name)}"
