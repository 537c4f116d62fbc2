"""The Iceberg target contract: which tables the merge writes for a landed table, and what it
records there for itself and for `logtide status` (both read it from here; no Spark needed).

For the landed table `db.t` of source S, the merge writes `<catalog_name>.<namespace>.db__t` (the
target) and `...db__t__changelog` (the stream it applied), `namespace` being `merge.namespace` or
S. Each merge commit carries `logtide.frontier` in its snapshot summary: the landing zone's
frontier whose events the table now holds. After its commits the merge also sets it as a table
property, which stays when snapshot expiry removed the summaries (a table the merge creates holds
it from its creation: a property counts only once the table has a snapshot). The applied frontier is the
summary's value of the newest snapshot in the current ancestry that has it, else that property,
else 0 (a table no merge wrote). Values PostgreSQL key changes left out that nothing held are
counted in `logtide.unknown-values` (with the newest few in `logtide.unknown-sample`), the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from capture.config import MergeConfig

FRONTIER = "logtide.frontier"
UNKNOWN_VALUES, UNKNOWN_SAMPLE = "logtide.unknown-values", "logtide.unknown-sample"
CHANGELOG_SUFFIX = "__changelog"


@dataclass(frozen=True)
class Target:
    """An Iceberg table the merge writes: catalog, namespace and table name, unquoted."""

    catalog: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.catalog}.{self.namespace}.{self.name}"

    @property
    def spark(self) -> str:
        """The name in Spark SQL, every part quoted (a namespace or table may hold any character)."""
        return ".".join("`" + p.replace("`", "``") + "`" for p in (self.catalog, self.namespace, self.name))


def namespace(merge: MergeConfig, source: str) -> str:
    return merge.namespace or source


def target_of(merge: MergeConfig, source: str, schema: str, table: str, changelog: bool = False) -> Target:
    """The target table (or its changelog) of the landed table `schema.table`."""
    suffix = CHANGELOG_SUFFIX if changelog else ""
    return Target(merge.catalog_name, namespace(merge, source), f"{schema}__{table}{suffix}")


def recorded(
    summaries: Iterable[Mapping[str, str] | None], properties: Mapping[str, str] | None, key: str
) -> str | None:
    """`key` of the newest snapshot summary that has it (`summaries`: the current ancestry,
    newest first), else of the table properties; `properties` None: the table has no snapshot
    (a property without a snapshot is not a merge's)."""
    for summary in summaries:
        value = None if summary is None else summary.get(key)
        if value is not None:
            return str(value)
    value = None if properties is None else properties.get(key)
    return str(value) if value is not None else None


def frontier_value(value: str | None) -> int:
    """The applied frontier from `recorded(..., FRONTIER)`: 0 for a table no merge wrote."""
    return int(value) if value is not None else 0
