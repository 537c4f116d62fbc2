"""The init SQL and server settings of docker-compose.yml, run for real (no container engine here).

Each test starts a private server with the settings of its compose service, runs the service's init
SQL as the image's entrypoint would (mariadb client / psql, with the service's environment), then
uses it exactly as the containers do: capture's own preflight as the capture user, `logtide setup`
and a `logtide dump` through the CLI with config/compose.yaml (only host, port and paths changed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from capture.config import load_config
from tests.servers import MariaDB, PostgreSQL

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SECRET = "init-test-Secret-1"  # never a real password


def service(name: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"][name]


def config_for(tmp_path: Path, source: str, port: int) -> Path:
    """config/compose.yaml for one source on a private server: same users, names and grants."""
    data = yaml.safe_load((ROOT / "config/compose.yaml").read_text())
    data["sources"] = {source: {**data["sources"][source], "host": "127.0.0.1", "port": port}}
    data["sources"][source]["metrics"]["port"] = 0
    data["outputs"] = {k: v for k, v in (data.get("outputs") or {}).items() if v["source"] == source}
    data["landing"]["path"] = str(tmp_path / "landing")
    data["coordination"] = {"kind": "local"}
    path = tmp_path / "logtide.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def cli(config: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "capture.cli", "--config", str(config), *args],
        env={**os.environ, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_mariadb_service_settings_and_grants_serve_capture_and_dumps(tmp_path, monkeypatch):
    spec = service("mariadb")
    server = MariaDB(tmp_path / "mariadb", extra_options=spec["command"])  # the compose flags win
    server.start()
    try:
        env = spec["environment"]
        database, user = env["MARIADB_DATABASE"], env["MARIADB_USER"]
        # what the image's entrypoint does with MARIADB_DATABASE / MARIADB_USER, before the init files
        server.execute(
            f"CREATE DATABASE `{database}`",
            f"CREATE USER '{user}'@'%' IDENTIFIED BY '{SECRET}'",
            f"GRANT ALL ON `{database}`.* TO '{user}'@'%'",
        )
        init = (ROOT / "config/compose-grants.sql").read_text()
        subprocess.run(
            ["mariadb", "--no-defaults", "-h127.0.0.1", f"-P{server.port}", "-uroot", database],
            input=init,
            text=True,
            check=True,
            timeout=60,
        )
        server.execute(
            "CREATE TABLE shop.orders (id INT PRIMARY KEY, note VARCHAR(20))",
            "INSERT INTO shop.orders VALUES (1, 'a'), (2, 'b'), (3, 'c')",
        )
        config_path = config_for(tmp_path, "shop", server.port)
        secrets = {"LOGTIDE_SHOP_PASSWORD": SECRET}
        monkeypatch.setenv("LOGTIDE_SHOP_PASSWORD", SECRET)
        from capture.sources.mysql.connection import connect
        from capture.sources.mysql.preflight import preflight

        source = load_config(config_path).source("shop")
        assert source.user == user
        with connect(source) as conn:
            preflight(conn, source.kind, source.user, "shop")  # raises, listing every problem, if one is missing
        setup = cli(config_path, "setup", "--source", "shop", env=secrets)
        assert setup.returncode == 0, setup.stderr
        dump = cli(config_path, "dump", "--source", "shop", "--table", "shop.orders", env=secrets)
        assert dump.returncode == 0, dump.stderr
        assert json.loads(dump.stdout)["rows"] == 3
        assert SECRET not in setup.stderr + dump.stderr
    finally:
        server.destroy()


def pg_options(spec: dict[str, Any]) -> dict[str, str]:
    args = spec["command"]
    return dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "-c")


def psql(server: PostgreSQL, database: str, file: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return server.psql_file(database, ROOT / "config" / file, env)


@pytest.fixture()
def pg_server() -> Any:
    # not under pytest's temp folder, which is 0700 for root (see tests/conftest.py)
    spec = service("postgres")
    server = PostgreSQL(Path(tempfile.mkdtemp(prefix="logtide-init-")), options=pg_options(spec))
    server.start()
    yield server
    server.destroy()


def test_postgres_service_settings_and_init_sql_serve_capture_and_dumps(pg_server, tmp_path, monkeypatch):
    env = service("postgres")["environment"]
    database = env["POSTGRES_DB"]
    pg_server.execute(f'CREATE DATABASE "{database}"')  # the image creates POSTGRES_DB
    pg_server.execute(
        "CREATE TABLE orders (id int PRIMARY KEY, note text)",
        "INSERT INTO orders VALUES (1, 'a'), (2, 'b')",
        database=database,
    )
    missing = psql(pg_server, database, "compose-postgres.sql", {})
    assert missing.returncode != 0, "an unset password must stop the init"
    done = psql(pg_server, database, "compose-postgres.sql", {"LOGTIDE_SHOP_PG_PASSWORD": SECRET})
    assert done.returncode == 0, done.stderr
    pg_server.execute("CREATE TABLE later (id int PRIMARY KEY)", database=database)  # default privileges cover it

    config_path = config_for(tmp_path, "shop_pg", pg_server.port)
    monkeypatch.setenv("LOGTIDE_SHOP_PG_PASSWORD", SECRET)
    source = load_config(config_path).source("shop_pg")
    from capture.sources.postgres.connection import connect, query
    from capture.sources.postgres.preflight import preflight
    from capture.sources.postgres.publication import Publication

    conn = connect(source)
    try:
        assert query(conn, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user") == [(False,)]
        preflight(conn, source.user, source.slot_name("shop_pg"), Publication("shop_pg", source), "shop_pg")
        assert query(conn, "SELECT count(*) FROM later") == [(0,)]
    finally:
        conn.close()
    secrets = {"LOGTIDE_SHOP_PG_PASSWORD": SECRET}
    setup = cli(config_path, "setup", "--source", "shop_pg", env=secrets)
    assert setup.returncode == 0, setup.stderr
    dump = cli(config_path, "dump", "--source", "shop_pg", "--table", "public.orders", env=secrets)
    assert dump.returncode == 0, dump.stderr
    assert json.loads(dump.stdout)["rows"] == 2


def test_metadb_init_sql_creates_the_airflow_and_iceberg_databases(pg_server):
    env = {"AIRFLOW_DB_PASSWORD": SECRET, "ICEBERG_DB_PASSWORD": SECRET}
    assert set(env) <= set(service("metadb")["environment"])
    missing = psql(pg_server, "postgres", "compose-metadb.sql", {"AIRFLOW_DB_PASSWORD": SECRET})
    assert missing.returncode != 0, "an unset password must stop the init"
    pg_server.execute("DROP DATABASE IF EXISTS airflow", "DROP ROLE IF EXISTS airflow")  # the first file did not finish
    done = psql(pg_server, "postgres", "compose-metadb.sql", env)
    assert done.returncode == 0, done.stderr
    owners = dict(
        pg_server.query(
            "SELECT d.datname, r.rolname FROM pg_database d JOIN pg_roles r ON r.oid = d.datdba "
            "WHERE d.datname IN ('airflow', 'iceberg')"
        )
    )
    assert owners == {"airflow": "airflow", "iceberg": "iceberg"}
    for role in owners.values():  # each owner can create its tables (Airflow's migration, Iceberg's catalog)
        conn = pg_server.connect(role, user=role, password=SECRET)
        try:
            with conn.cursor() as cursor:
                cursor.execute("CREATE TABLE probe (id int)")
                cursor.execute("DROP TABLE probe")
        finally:
            conn.close()
