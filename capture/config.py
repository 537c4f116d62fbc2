"""One typed configuration, loaded from YAML, with `${VAR}` taken from the environment.

Secrets stay out of the file: write ``password: ${SHOP_DB_PASSWORD}``. Validation errors
name the exact key that is wrong (``sources.shop.port: ...``).
"""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from capture.errors import ConfigError

CONFIG_ENV = "LOGTIDE_CONFIG"
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")

# A change the log cannot carry: refuse (stop with its named error) or accept (warn and go on);
# capture/sources/policy.py applies it
Policy = Literal["refuse", "accept"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MetricsConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(9187, ge=0, le=65535, description="0 turns the HTTP endpoint off")


POSTGRES_CHUNK_SIZE = 20_000  # the default chunk_size of kind postgresql


class DumpConfig(_Strict):
    """Defaults for dumps of a source; a dump request or its runtime control overrides them."""

    chunk_size: int = Field(1000, ge=1, le=1_000_000, description="rows per chunk; postgresql default 20000")
    delay_s: float = Field(0.0, ge=0, le=3600)
    max_rows_per_s: float | None = Field(None, gt=0)
    pool_slots: int = Field(2, ge=1, le=64, description="Airflow pool logtide_<source>: tables dumped at once")
    backfill_schedule: str | None = Field(None, description="cron or preset for logtide_backfill; null: none")
    backfill_tables: list[str] = Field(default_factory=list, description="db.table list; empty: all captured")


class SourceConfig(_Strict):
    """A source database and what to capture from it."""

    kind: Literal["mariadb", "mysql", "postgresql"]
    host: str = "127.0.0.1"
    port: int = Field(3306, ge=1, le=65535, description="default 3306; 5432 for postgresql")
    user: str
    password: SecretStr = SecretStr("")
    server_id: int | None = Field(
        None, ge=1, le=2**32 - 1, description="replica id; unique among the server's replicas (mariadb/mysql)"
    )
    database: str | None = Field(None, min_length=1, description="postgresql: the database to capture (required)")
    slot: str | None = Field(
        None, pattern=r"^[a-z0-9_]{1,63}$", description="postgresql replication slot; default logtide_<source>"
    )
    publication: str | None = Field(None, min_length=1, max_length=63, description="default logtide_<source>")
    retained_warn_bytes: int | None = Field(
        None, ge=1, description="postgresql: warn when the slot holds more WAL than this; null: never"
    )
    include: list[str] = Field(default_factory=lambda: ["*.*"], description="`db.table` patterns (fnmatch) to capture")
    exclude: list[str] = Field(default_factory=list)
    keys: dict[str, list[str]] = Field(
        default_factory=dict,
        description="`db.table` -> key columns, for captured tables without a primary key or usable UNIQUE "
        "index (as Debezium's message.key.columns): unique, NOT NULL columns",
    )
    heartbeat_s: float = Field(0.5, gt=0, le=60)
    watermarks: Literal["table", "readonly"] = Field(
        "table",
        description="table: dumps write LOW/HIGH rows to logtide.watermarks; readonly: dumps write nothing, "
        "each chunk is read in a consistent snapshot placed by the log position (mariadb) or by its snapshot "
        "and WAL positions (postgresql, primary only)",
    )
    foreign_key_cascades: Policy = Field(
        "refuse",
        description="mariadb/mysql: InnoDB writes no binlog rows for the child rows a cascading foreign key "
        "(ON DELETE/UPDATE CASCADE, SET NULL) changes. refuse: capture does not start (and stops at DDL adding "
        "one) while a captured table is such a child; accept: it warns, and those tables diverge until dumped",
    )
    partition_changes: Policy = Field(
        "refuse",
        description="mariadb/mysql: ALTER TABLE ... DROP, TRUNCATE, EXCHANGE or CONVERT PARTITION remove or move "
        "rows without binlog row events. refuse: capture stops at such a statement on a captured table (nothing "
        "of it lands); accept: it warns and goes on, and those tables diverge until dumped",
    )
    table_renames: Policy = Field(
        "refuse",
        description="RENAME TABLE (and ALTER TABLE ... RENAME) bring another table's rows under a name without "
        "row events in the log. refuse: capture stops at a rename into a captured name (nothing of it lands; "
        "postgresql: seen at the renamed table's next change, when capture knew it under its old name); accept: "
        "it warns, empties that table at the rename and goes on, and it misses those rows until dumped",
    )
    column_rewrites: Policy = Field(
        "refuse",
        description="ALTER TABLE ... ADD COLUMN with a DEFAULT (or NOT NULL, generated), RENAME COLUMN, CHANGE a "
        "b (postgresql: also ALTER COLUMN TYPE) give every existing row a new value without row events in the log. "
        "refuse: capture stops at such a change of a captured table (nothing of it lands; postgresql: seen at the "
        "table's next change, compared with the schema landed); accept: it warns and goes on, and those tables "
        "show NULL there until dumped",
    )
    clamped_keys: Policy = Field(
        "refuse",
        description="postgresql: a date or timestamp key value outside 0001-01-01 .. 9999-12-31 (infinity, "
        "-infinity, BC, years past 9999) lands as the nearest end of that range, as other such values and the end "
        "itself do. refuse: capture stops at such a key (nothing of its transaction lands) and a dump refuses the "
        "table; accept: it warns once per table and column and lands them clamped, so rows whose keys land as the "
        "same value become one target row",
    )
    metrics: MetricsConfig = MetricsConfig()
    dump: DumpConfig = DumpConfig()

    @field_validator("include", "exclude")
    @classmethod
    def _qualified(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            if pattern.count(".") != 1:
                raise ValueError(f"pattern {pattern!r} must look like 'database.table' (wildcards allowed)")
        return patterns

    @field_validator("keys")
    @classmethod
    def _named_keys(cls, keys: dict[str, list[str]]) -> dict[str, list[str]]:
        for table, columns in keys.items():
            if table.count(".") != 1 or any(c in table for c in "*?["):
                raise ValueError(f"{table!r} must be a table named 'database.table' (no wildcards)")
            if not columns:
                raise ValueError(f"{table}: name at least one key column")
            if len(set(columns)) != len(columns):
                raise ValueError(f"{table}: a key column is named twice: {columns}")
        return keys

    @model_validator(mode="before")
    @classmethod
    def _postgresql_defaults(cls, data: object) -> object:
        """PostgreSQL: port 5432, and chunks of 20,000 rows unless set (README, PostgreSQL benchmarks:
        a chunk's fixed cost makes 1,000-row chunks run at a tenth of a plain keyset loop)."""
        if isinstance(data, dict) and data.get("kind") == "postgresql":
            dump = data.get("dump")
            if dump is None or (isinstance(dump, dict) and "chunk_size" not in dump):
                data = {**data, "dump": {**(dump or {}), "chunk_size": POSTGRES_CHUNK_SIZE}}
            if "port" not in data:
                data = {**data, "port": 5432}
        return data

    @model_validator(mode="after")
    def _kind_settings(self) -> SourceConfig:
        if self.kind == "postgresql":
            if not self.database:
                raise ValueError("kind 'postgresql' needs database: the database whose tables are captured")
            if self.server_id is not None:
                raise ValueError("server_id is for mariadb/mysql; postgresql uses a replication slot (slot)")
            if "foreign_key_cascades" in self.model_fields_set:
                raise ValueError(
                    "foreign_key_cascades is for mariadb/mysql: PostgreSQL's logical decoding carries the rows "
                    "that foreign-key cascades change, so there is nothing to accept or refuse"
                )
            if "partition_changes" in self.model_fields_set:
                raise ValueError(
                    "partition_changes is for mariadb/mysql, whose binlog has no rows for partition statements; "
                    "on PostgreSQL a partition's rows and its TRUNCATE are in the log under the partition's name"
                )
        else:
            if self.server_id is None:
                raise ValueError(f"kind {self.kind!r} needs server_id: a replica id unique among the server's replicas")
            if self.kind == "mysql" and self.watermarks == "readonly":
                raise ValueError(
                    "watermarks: readonly is not implemented for kind 'mysql' (it needs the binlog position of "
                    "a consistent snapshot, which MariaDB reports and MySQL does not); use watermarks: table"
                )
            for name in ("database", "slot", "publication", "retained_warn_bytes"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} is for kind 'postgresql' only")
        return self

    def slot_name(self, source: str) -> str:
        """The replication slot (postgresql): `slot`, else logtide_<source> in slot-name characters."""
        return self.slot or "logtide_" + re.sub(r"[^a-z0-9_]", "_", source.lower())[:54]

    def publication_name(self, source: str) -> str:
        return self.publication or "logtide_" + re.sub(r"[^a-z0-9_]", "_", source.lower())[:54]

    def named_key(self, schema: str, table: str) -> tuple[str, ...] | None:
        """The key `keys` names for `schema.table`, if any."""
        columns = self.keys.get(f"{schema}.{table}")
        return tuple(columns) if columns else None

    def captures(self, schema: str, table: str) -> bool:
        """True when `schema.table` is selected by include and not by exclude."""
        name = f"{schema}.{table}"
        return any(fnmatch.fnmatchcase(name, p) for p in self.include) and not any(
            fnmatch.fnmatchcase(name, p) for p in self.exclude
        )

    def captures_partition(self, schema: str, table: str, root: tuple[str, str] | None) -> bool:
        """A PostgreSQL table that may be a partition (`root`: its partitioned table, the top of its
        tree; None for any other table): captured by its own name, or as a partition of a captured
        partitioned table unless exclude names it."""
        if self.captures(schema, table):
            return True
        name = f"{schema}.{table}"
        return root is not None and self.captures(*root) and not any(fnmatch.fnmatchcase(name, p) for p in self.exclude)


class LandingConfig(_Strict):
    path: Path = Path("var/landing")
    flush_interval_s: float = Field(0.5, gt=0, le=300, description="max delay from commit to landed")
    max_buffer_rows: int = Field(
        50_000, ge=1, description="rows held in memory before they are written out, even mid-transaction"
    )


class CoordinationConfig(_Strict):
    """Who may capture a source: `local` (a lock file: one instance per machine, the default) or
    `zookeeper` (a lease per source; standbys on other hosts wait and take over)."""

    kind: Literal["local", "zookeeper"] = "local"
    hosts: str | None = Field(None, description="ZooKeeper ensemble, 'h1:2181,h2:2181'; required for zookeeper")
    session_timeout_s: float = Field(
        5.0, ge=0.5, le=600, description="ZooKeeper session timeout: a dead leader is replaced after about this long"
    )
    root: str = Field("/logtide", description="ZooKeeper path under which each source has its lease")

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, hosts: str | None) -> str | None:
        if hosts is None:
            return None
        entries = [h.strip() for h in hosts.split(",")]
        for entry in entries:
            host, sep, port = entry.rpartition(":")
            if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
                raise ValueError(f"{entry!r} is not host:port (expected 'h1:2181,h2:2181')")
        return ",".join(entries)

    @field_validator("root")
    @classmethod
    def _root(cls, root: str) -> str:
        if not re.fullmatch(r"(/[A-Za-z0-9_.-]+)+", root):
            raise ValueError(f"{root!r} must be an absolute ZooKeeper path like '/logtide' (no trailing '/')")
        return root

    @model_validator(mode="after")
    def _zookeeper_needs_hosts(self) -> CoordinationConfig:
        if self.kind == "zookeeper" and not self.hosts:
            raise ValueError("kind 'zookeeper' needs hosts, e.g. hosts: 'zk1:2181,zk2:2181,zk3:2181'")
        return self


class MergeConfig(_Strict):
    """The Spark merge of the landing zone into Apache Iceberg (capture/merge/, `logtide merge`)."""

    catalog: Literal["hadoop", "jdbc"] = Field("hadoop", description="Iceberg catalog: hadoop (files) or jdbc")
    catalog_name: str = Field("logtide", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Spark's name for it")
    warehouse: str = Field("var/warehouse", description="folder or URI of the table files")
    jdbc_uri: str | None = Field(None, description="jdbc:sqlite:var/iceberg.db or jdbc:postgresql://host/db")
    jdbc_user: str | None = None
    jdbc_password: SecretStr = SecretStr("")
    namespace: str | None = Field(None, description="Iceberg namespace of the targets; null: the source name")
    spark_master: str = "local[2]"
    jars_dir: Path = Path("var/jars")
    spark_conf: dict[str, str] = Field(default_factory=dict, description="extra Spark settings")
    class_archive_dir: Path | None = Field(
        Path("var/jvm"), description="the driver JVM's class archive (local masters): faster starts; null: none"
    )
    parallel_tables: int = Field(
        2, ge=1, le=64, description="tables merged at once in one Spark application (each commits alone)"
    )
    schedule: str | None = Field(None, description="cron or preset of the logtide_merge DAG; null: on demand only")
    landed_timeout_s: float = Field(
        600.0, gt=0, le=86_400, description="Airflow: how long a dump's merge waits for capture to land its watermarks"
    )

    @model_validator(mode="after")
    def _jdbc_needs_uri(self) -> MergeConfig:
        if self.catalog == "jdbc" and not self.jdbc_uri:
            raise ValueError("jdbc_uri is required when catalog is jdbc")
        return self


class OutputConfig(_Strict):
    """A real-time output of one source (`logtide relay`): log events and dump chunks' surviving rows,
    interleaved (DBLog's output stream), to NATS JetStream or an HTTP webhook. See README, Outputs."""

    source: str = Field(description="the source whose landing zone it follows")
    kind: Literal["nats", "webhook"]
    url: str = Field(description="nats://host:4222 (several: comma-separated) or the webhook's http(s):// URL")
    format: Literal["logtide", "debezium"] = "logtide"
    start: Literal["checkpoint", "beginning"] = Field(
        "checkpoint", description="first run: from the capture checkpoint (new events) or the whole landing zone"
    )
    tables: list[str] = Field(default_factory=lambda: ["*.*"], description="`db.table` patterns (fnmatch)")
    batch_size: int = Field(
        1000,
        ge=1,
        le=100_000,
        description="messages per delivery (one POST, one position write); when not given: 5000 for nats, 1000 "
        "for a webhook",
    )
    timeout_s: float = Field(10.0, gt=0, le=600, description="per publish or POST")
    max_backoff_s: float = Field(30.0, gt=0, le=3600, description="retries wait 0.2 s doubling up to this")
    poll_interval_s: float = Field(0.1, gt=0, le=60, description="how often the checkpoint is read when idle")
    window_timeout_s: float = Field(
        3600.0, gt=0, description="a LOW watermark without HIGH for this long (log commit time) is dropped"
    )
    lookback: int = Field(10_000, ge=0, description="log events kept for PostgreSQL's visibility rule at a LOW")
    stream: str = Field("LOGTIDE", pattern=r"^[A-Za-z0-9_-]+$", description="nats: the JetStream stream")
    subject_prefix: str = Field(
        "logtide", pattern=r"^[A-Za-z0-9_-]+$", description="nats: subjects <prefix>.<source>.<db>.<table>"
    )
    create_stream: bool = Field(True, description="nats: create the stream (subjects <prefix>.>) when missing")
    duplicate_window_s: float = Field(120.0, gt=0, description="nats: the stream's deduplication window, when created")
    max_inflight: int = Field(5000, ge=1, le=100_000, description="nats: publishes awaiting their ack at once")
    fast_ingest: bool = Field(
        True,
        description="nats: publish each window as one JetStream fast-ingest batch (one flow acknowledgement per up "
        "to 500 messages) when the server is 2.14+ and the stream allows it (allow_batched, set when created); "
        "otherwise, or false: an acknowledgement a message",
    )
    headers: dict[str, str] = Field(default_factory=dict, description="webhook: extra request headers")
    backpressure_rows: int = Field(
        1000,
        ge=0,
        description="dump rows this output may have undelivered before dumps of the source wait for it (in whole "
        "chunks, at least one ahead); 0: dumps never wait for it. See README, Outputs (backpressure)",
    )
    transforms: dict[str, str] = Field(
        default_factory=dict,
        description="`db.table` pattern -> 'module:function' (the enrichment hook): maps an event to an event, "
        "or to None to leave it out; an error stops the output with nothing lost",
    )

    @model_validator(mode="before")
    @classmethod
    def _batch_size(cls, data: Any) -> Any:
        """Larger for NATS: a position write and an acknowledgement round per batch (measured: about 10%
        more throughput at 5,000 than at 1,000, benchmarks/output_latency.py); a webhook's is one POST."""
        if isinstance(data, dict) and "batch_size" not in data and data.get("kind") == "nats":
            return {**data, "batch_size": 5000}
        return data

    @field_validator("transforms")
    @classmethod
    def _callables(cls, transforms: dict[str, str]) -> dict[str, str]:
        for pattern, target in transforms.items():
            if pattern.count(".") != 1:
                raise ValueError(f"pattern {pattern!r} must look like 'database.table' (wildcards allowed)")
            module, sep, function = target.partition(":")
            if not sep or not module or not function.isidentifier():
                raise ValueError(f"{target!r} must name a function as 'package.module:function'")
        return transforms

    def includes(self, schema: str, table: str) -> bool:
        name = f"{schema}.{table}"
        return any(fnmatch.fnmatchcase(name, p) for p in self.tables)


class RelayConfig(_Strict):
    """`logtide relay`: its Prometheus metrics and /health (several relays on one host: `--metrics-port`)."""

    metrics: MetricsConfig = Field(default_factory=lambda: MetricsConfig(port=9190))


class LogtideConfig(_Strict):
    landing: LandingConfig = LandingConfig()
    sources: dict[str, SourceConfig]
    merge: MergeConfig = MergeConfig()
    coordination: CoordinationConfig = CoordinationConfig()
    outputs: dict[str, OutputConfig] = Field(default_factory=dict, description="real-time outputs; none by default")
    relay: RelayConfig = RelayConfig()
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @model_validator(mode="after")
    def _outputs_name_sources(self) -> LogtideConfig:
        for name, output in self.outputs.items():
            if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
                raise ValueError(f"output name {name!r} may only hold letters, digits, '_' and '-'")
            if output.source not in self.sources:
                raise ValueError(f"output {name!r} names source {output.source!r}, which is not in sources")
        return self

    @field_validator("sources")
    @classmethod
    def _names(cls, sources: dict[str, SourceConfig]) -> dict[str, SourceConfig]:
        if not sources:
            raise ValueError("at least one source is required")
        for name in sources:
            if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
                raise ValueError(f"source name {name!r} may only hold letters, digits, '_' and '-'")
        return sources

    def source(self, name: str) -> SourceConfig:
        try:
            return self.sources[name]
        except KeyError:
            known = ", ".join(sorted(self.sources))
            raise ConfigError(f"no source named {name!r} in the configuration (known: {known})") from None


def _expand_env(value: object, where: str, strict: bool) -> object:
    """Replace `${VAR}` / `${VAR:-default}`; unset variables are an error when `strict`, else empty."""
    if isinstance(value, dict):
        return {k: _expand_env(v, f"{where}.{k}" if where else str(k), strict) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_env(v, f"{where}[{i}]", strict) for i, v in enumerate(value)]
    if isinstance(value, str):

        def substitute(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in os.environ:
                return os.environ[name]
            if default is not None:
                return default
            if not strict:
                return ""
            raise ConfigError(f"{where}: environment variable {name} is not set")

        return _ENV_REF.sub(substitute, value)
    return value


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"])
        lines.append(f"  {where}: {item['msg']}")
    return "\n".join(lines)


def parse_config(data: object, origin: str = "<config>", require_env: bool = True) -> LogtideConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: the top level must be a mapping with a 'sources' key")
    try:
        return LogtideConfig.model_validate(_expand_env(data, "", require_env))
    except ValidationError as exc:
        raise ConfigError(f"{origin} is not valid:\n{_describe(exc)}") from None


def load_config(path: str | os.PathLike[str] | None, require_env: bool = True) -> LogtideConfig:
    """Load from `path`, else from $LOGTIDE_CONFIG; relative landing paths stay relative to the CWD.

    Commands that never connect to a database pass `require_env=False`, so reading the
    landing zone does not need the database password in the environment.
    """
    chosen = path or os.environ.get(CONFIG_ENV)
    if not chosen:
        raise ConfigError(f"no configuration given: pass --config FILE or set {CONFIG_ENV}")
    file = Path(chosen)
    try:
        text = file.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read configuration {file}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file} is not valid YAML: {exc}") from None
    return parse_config(data, str(file), require_env)
