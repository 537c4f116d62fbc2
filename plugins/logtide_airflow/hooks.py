"""`LogtideHook`: the Logtide configuration of one source, as Airflow users expect to set it.

- The config file is the CLI's: the Airflow Variable `logtide_config_path` when set, else
  $LOGTIDE_CONFIG.
- An Airflow connection `logtide_<source>`, when it exists, supplies host, port, login and
  password (and for PostgreSQL its schema field as the database) over the file's, so the
  password can live in Airflow's connections or secrets backend instead of the workers'
  environment.

Only the Airflow parts are here; opening the source and the landing zone is `capture`'s.
The password is never logged (only which fields the connection supplied).
"""

from __future__ import annotations

import os
from typing import Any

from airflow.sdk import BaseHook, Variable
from airflow.sdk.exceptions import AirflowNotFoundException
from pydantic import SecretStr, ValidationError

from capture.config import CONFIG_ENV, DumpConfig, LogtideConfig, SourceConfig, load_config
from capture.errors import ConfigError
from capture.landing import LandingZone
from capture.log import get_logger
from capture.sources import open_chunk_source
from capture.sources.base import ChunkSource

log = get_logger(__name__)

CONFIG_VARIABLE = "logtide_config_path"


def connection_id(source: str) -> str:
    return f"logtide_{source}"


def config_path() -> str:
    """The config file: Variable `logtide_config_path`, else $LOGTIDE_CONFIG."""
    path = Variable.get(CONFIG_VARIABLE, default=None) or os.environ.get(CONFIG_ENV)
    if not path:
        raise ConfigError(
            f"no Logtide configuration: set the Airflow Variable {CONFIG_VARIABLE} to the config file's path "
            f"(or {CONFIG_ENV} in the workers' environment)"
        )
    return path


class LogtideHook(BaseHook):
    """Config, chunk source and landing zone of one source. Built inside `execute`, never at parse time."""

    conn_name_attr = "conn_id"
    default_conn_name = "logtide_<source>"
    conn_type = "mysql"
    hook_name = "Logtide source"

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source
        self.conn_id = connection_id(source)
        self._loaded: tuple[LogtideConfig, SourceConfig] | None = None

    def _connection(self) -> Any | None:
        try:
            return self.get_connection(self.conn_id)
        except AirflowNotFoundException:
            return None

    def _load(self) -> tuple[LogtideConfig, SourceConfig]:
        if self._loaded is not None:
            return self._loaded
        path = config_path()
        conn = self._connection()
        # with a connection, ${VAR}s the worker lacks (typically the password) are not an error:
        # the connection supplies them
        config = load_config(path, require_env=conn is None)
        source = config.source(self.source)
        overrides: dict[str, Any] = {}
        if conn is not None:
            for field, value in (("host", conn.host), ("port", conn.port), ("user", conn.login)):
                if value:
                    overrides[field] = value
            if conn.password:
                overrides["password"] = SecretStr(conn.password)
            if source.kind == "postgresql" and conn.schema:  # a Postgres connection's "schema" is its database
                overrides["database"] = conn.schema
            try:
                source = SourceConfig.model_validate({**source.model_dump(), **overrides})
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                raise ConfigError(f"Airflow connection {self.conn_id} is not valid: {problems}") from None
        log.info(
            "airflow.source_config",
            source=self.source,
            config=path,
            connection=self.conn_id if conn is not None else "none",
            from_connection=",".join(overrides) or "none",
            host=source.host,
            port=source.port,
            user=source.user,
        )
        self._loaded = (config, source)
        return self._loaded

    @property
    def config(self) -> LogtideConfig:
        return self._load()[0]

    @property
    def source_config(self) -> SourceConfig:
        return self._load()[1]

    def chunk_source(self) -> ChunkSource:
        """A connection to the source database for a dump; the caller closes it."""
        return open_chunk_source(self.source, self.source_config)

    def zone(self) -> LandingZone:
        return LandingZone(self.config.landing.path, self.source)

    def dump_defaults(self) -> DumpConfig:
        return self.source_config.dump
