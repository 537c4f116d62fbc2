"""One local Spark session (local[2]) for the merge tests, with two Iceberg catalogs in a
temporary folder: `logtide` (Hadoop, files only) and `logtide_jdbc` (JDBC on SQLite)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from capture.config import LogtideConfig, MergeConfig
from spark_apps.merge import build_session, session_conf
from tests.conftest import ROOT

JARS = ROOT / "var" / "jars"


@pytest.fixture(scope="session")
def iceberg_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("iceberg")


@pytest.fixture(scope="session")
def catalogs(iceberg_dir: Path) -> dict[str, MergeConfig]:
    return {
        "hadoop": MergeConfig(catalog_name="logtide", warehouse=str(iceberg_dir / "warehouse"), jars_dir=JARS),
        "jdbc": MergeConfig(
            catalog="jdbc",
            catalog_name="logtide_jdbc",
            warehouse=str(iceberg_dir / "jdbc-warehouse"),
            jdbc_uri=f"jdbc:sqlite:{iceberg_dir / 'catalog.db'}",
            jars_dir=JARS,
        ),
    }


@pytest.fixture(scope="session")
def spark(catalogs: dict[str, MergeConfig]) -> Iterator:
    conf = {**session_conf(catalogs["hadoop"]), **session_conf(catalogs["jdbc"]), "spark.sql.shuffle.partitions": "4"}
    session = build_session(conf, master="local[2]", app_name="logtide-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def merge_config(catalogs: dict[str, MergeConfig], database: str):
    """The capture's config with a `merge` section: catalog by kind, the test's database as namespace."""

    def make(config: LogtideConfig, kind: str = "hadoop") -> LogtideConfig:
        merge = catalogs[kind].model_copy(update={"namespace": database})
        return config.model_copy(update={"merge": merge})

    return make
