"""docker-compose.yml cannot run here (no container engine): check it by construction.

The compose file against the Compose Specification schema (tests/unit/compose_spec/), its images,
variables, healthchecks and dependencies; the config every container mounts against the project's
own loader, with exactly the environment that container gets; every host, port, path and name of
that config against the services, the init SQL files and the Dockerfile.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

from capture.config import LogtideConfig, load_config

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
SCHEMA = Path(__file__).resolve().parent / "compose_spec" / "compose-spec.json"
CONFIG_MOUNT = "/etc/logtide/logtide.yaml"
LAKEHOUSE = "/var/lib/logtide"
# CLI commands that need every ${VAR} of the config set (capture/cli.py: require_env)
STRICT_COMMANDS = {"capture", "dump", "setup"}


# -- helpers -------------------------------------------------------------------------------------------

_VAR = re.compile(r"\$(?:\$|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's variable interpolation: ${V}, ${V:-default}, ${V-default}, ${V:?error}, ${V?error}, $V, $$."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(4)
        op, arg = match.group(2), match.group(3)
        current = env.get(name)
        missing = current is None or (op is not None and op.startswith(":") and current == "")
        if op in (":?", "?") and missing:
            raise AssertionError(f"compose would refuse to start: {name}: {arg}")
        if op in (":-", "-") and missing:
            return arg
        return current or ""

    return _VAR.sub(substitute, value)


def variables(text: str) -> set[str]:
    return {m.group(1) or m.group(4) for m in _VAR.finditer(text) if m.group(0) != "$$"}


def env_example() -> dict[str, str]:
    """.env.example, each empty secret given a dummy value (as a user fills them in)."""
    values = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip() or f"dummy-{name.strip().lower()}"
    return values


def raw_compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def strings(value: Any) -> list[str]:
    """Every string of a parsed document (keys and values): what Compose interpolates, comments excluded."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in strings(k) + strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """docker-compose.yml as `docker compose config` sees it with .env from .env.example."""
    return interpolate(raw_compose(), env_example())


@pytest.fixture(scope="module")
def services(compose) -> dict[str, dict[str, Any]]:
    return compose["services"]


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """Container path -> source (a named volume or a path relative to the repository)."""
    result = {}
    for volume in service.get("volumes") or []:
        source, target = volume.split(":")[:2]
        result[target] = source
    return result


def command(service: dict[str, Any]) -> list[str]:
    cmd = service.get("command") or []
    return cmd.split() if isinstance(cmd, str) else list(cmd)


def load_for(service: dict[str, Any], monkeypatch: pytest.MonkeyPatch, require_env: bool) -> LogtideConfig:
    """The mounted config, loaded as the container loads it: with the container's environment only."""
    env = environment(service)
    path = env.get("LOGTIDE_CONFIG")
    assert path == CONFIG_MOUNT, f"LOGTIDE_CONFIG is {path!r}"
    local = ROOT / mounts(service)[path]
    assert local.is_file(), f"{local} is mounted but does not exist"
    for name in variables(local.read_text()):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return load_config(local, require_env=require_env)


def config_for_tests(monkeypatch: pytest.MonkeyPatch) -> LogtideConfig:
    for name in variables((ROOT / "config/compose.yaml").read_text()):
        monkeypatch.setenv(name, "x")
    return load_config(ROOT / "config/compose.yaml")


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def pin(requirement_prefix: str) -> str:
    for group in [pyproject()["project"]["dependencies"], *pyproject()["project"]["optional-dependencies"].values()]:
        for requirement in group:
            name, _, version = requirement.partition("==")
            if name.partition("[")[0] == requirement_prefix:  # apache-airflow[postgres]: apache-airflow
                return version
    raise AssertionError(f"{requirement_prefix} is not pinned in pyproject.toml")


def dockerfile_args() -> dict[str, str]:
    text = (ROOT / "Dockerfile").read_text()
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))


def sql(name: str) -> str:
    return "\n".join(line.split("--")[0] for line in (ROOT / "config" / name).read_text().splitlines())


# -- the compose file as a whole -----------------------------------------------------------------------


def test_compose_file_follows_the_compose_specification(compose):
    digest = hashlib.sha256(SCHEMA.read_bytes()).hexdigest()
    assert digest in (SCHEMA.parent / "SOURCE.md").read_text(), "the vendored schema is not the one SOURCE.md names"
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft201909Validator(schema)  # the draft the schema declares
    for document in (raw_compose(), compose):
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]
        assert not errors, errors
    broken = copy.deepcopy(compose)  # the schema does catch a misspelt key
    broken["services"]["mariadb"]["healthchek"] = broken["services"]["mariadb"].pop("healthcheck")
    assert list(validator.iter_errors(broken))


def test_every_variable_is_in_env_example_and_every_secret_is_required():
    text = "\n".join(strings(raw_compose()))
    used, declared = variables(text), set(env_example())
    assert used - declared == set(), "used in docker-compose.yml, missing from .env.example"
    assert declared - used == set(), "in .env.example, used nowhere"
    for name in used:
        if any(word in name for word in ("PASSWORD", "SECRET", "KEY")):
            assert re.search(r"\$\{" + name + r":\?", text), f"{name} must be required (${{{name}:?...}})"
            assert f"${{{name}:-" not in text, f"{name} has a default"
    with pytest.raises(AssertionError, match="compose would refuse to start: MARIADB_ROOT_PASSWORD"):
        interpolate(raw_compose(), {k: v for k, v in env_example().items() if k != "MARIADB_ROOT_PASSWORD"})


def test_every_image_is_pinned_and_in_step_with_pyproject(services):
    version = pyproject()["project"]["version"]
    for name, service in services.items():
        image = service.get("image")
        assert image, f"{name} has no image"
        repository, _, tag = image.rpartition(":")
        assert repository and re.match(r"^\d+(\.\d+)*(-[\w.]+)?$", tag), f"{name}: {image} is not pinned"
        if "build" in service:
            assert tag == version, f"{name}: built image {image} is not tagged with the project version {version}"
    images = {s["image"].rsplit(":", 1)[0]: s["image"].rsplit(":", 1)[1] for s in services.values()}
    assert images["mariadb"] == "10.11" and images["postgres"] == "15" and images["zookeeper"].startswith("3.")
    args = dockerfile_args()
    assert args["AIRFLOW_IMAGE"] == f"apache/airflow:{pin('apache-airflow')}-python3.11"
    assert args["PYSPARK_VERSION"] == pin("pyspark")
    assert args["PYTHON_IMAGE"].startswith("python:3.11-")


def test_healthchecks_and_dependencies(services):
    one_shot = {n for n, s in services.items() if s.get("restart") == "no"}
    for name, service in services.items():
        if name not in one_shot:
            assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
            assert service.get("restart") == "unless-stopped", name
        for target, rule in (service.get("depends_on") or {}).items():
            assert target in services and target != name, f"{name} depends on {target}"
            condition = rule["condition"]
            if condition == "service_healthy":
                assert services[target].get("healthcheck"), f"{name} waits for {target}, which has no healthcheck"
            elif condition == "service_completed_successfully":
                assert target in one_shot, f"{name} waits for {target} to finish, but it is restarted"
            else:
                pytest.fail(f"{name} -> {target}: condition {condition} does not wait for readiness")


# -- the config every container uses --------------------------------------------------------------------


def logtide_services(services) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in services.items() if CONFIG_MOUNT in mounts(s)}


def test_every_container_loads_the_config_with_its_own_environment(services, monkeypatch):
    users = logtide_services(services)
    assert len(users) >= 10, sorted(users)
    for name, service in users.items():
        cmd = command(service)
        # capture and the CLI need every source password; Airflow tasks dump; merge needs the catalog's
        strict = bool(set(cmd) & STRICT_COMMANDS) or name.startswith("airflow") or name == "logtide"
        with monkeypatch.context() as patch:
            config = load_for(service, patch, require_env=strict)
            if name in ("merge", "logtide"):
                assert config.merge.jdbc_password.get_secret_value(), f"{name}: ICEBERG_DB_PASSWORD not set"
        assert str(config.landing.path).startswith(LAKEHOUSE + "/") and mounts(service)[LAKEHOUSE] == "lakehouse"


def test_config_addresses_are_the_services(services, monkeypatch):
    config = config_for_tests(monkeypatch)
    default_ports = {"mariadb": 3306, "postgres": 5432}
    for name, source in config.sources.items():
        server = services[source.host]
        image = server["image"].split(":")[0]
        assert source.port == default_ports[image], f"{name}: port {source.port}, {image} listens on the default"
        env = environment(server)
        if source.kind == "postgresql":
            assert env["POSTGRES_DB"] == source.database
            flags = " ".join(command(server))
            assert "wal_level=logical" in flags and "max_replication_slots=" in flags and "max_wal_senders=" in flags
        else:
            assert env["MARIADB_USER"] == source.user
            assert source.captures(env["MARIADB_DATABASE"], "any_table")
            flags = set(command(server))
            required = {"--binlog-format=ROW", "--binlog-row-image=FULL", "--binlog-row-metadata=FULL"}
            assert required <= flags and any(f.startswith("--log-bin") for f in flags)
            server_id = next(f.split("=")[1] for f in flags if f.startswith("--server-id="))
            assert int(server_id) != source.server_id, "capture's replica id must differ from the server's"
    jdbc = urlsplit(config.merge.jdbc_uri.removeprefix("jdbc:"))
    assert config.merge.catalog == "jdbc" and jdbc.scheme == "postgresql"
    assert jdbc.hostname in services and jdbc.port == 5432 and services[jdbc.hostname]["image"].startswith("postgres:")
    assert jdbc.hostname not in {s.host for s in config.sources.values()}, "catalog on a captured server"
    assert f"CREATE DATABASE {jdbc.path.lstrip('/')} OWNER {config.merge.jdbc_user};" in sql("compose-metadb.sql")
    master = urlsplit(config.merge.spark_master)
    assert master.scheme == "spark" and master.hostname in services
    master_env = environment(services[master.hostname])
    assert master_env["SPARK_LOCAL_HOSTNAME"] == master.hostname and int(master_env["SPARK_MASTER_PORT"]) == master.port
    assert command(services["spark-worker"]) == ["spark-worker", config.merge.spark_master]
    assert config.merge.warehouse.startswith(LAKEHOUSE + "/") and mounts(services["spark-worker"])[LAKEHOUSE]
    assert f"LOGTIDE_JARS_DIR={config.merge.jars_dir}" in (ROOT / "Dockerfile").read_text()
    assert environment(services["merge"])["LOGTIDE_MERGE_SOURCES"].split(",") == sorted(config.sources)


def test_zookeeper_ensemble_of_three(services, monkeypatch):
    config = config_for_tests(monkeypatch)
    assert config.coordination.kind == "zookeeper"
    nodes = {n: s for n, s in services.items() if s["image"].startswith("zookeeper:")}
    assert len(nodes) == 3
    ensemble = {environment(s)["ZOO_SERVERS"] for s in nodes.values()}
    assert len(ensemble) == 1, "every node must list the same ensemble"
    servers = re.findall(r"server\.(\d+)=([\w-]+):2888:3888;(\d+)", ensemble.pop())
    assert len(servers) == 3
    ids = {environment(s)["ZOO_MY_ID"]: n for n, s in nodes.items()}
    assert sorted((i, host) for i, host, _ in servers) == sorted(ids.items()), "ZOO_MY_ID and ZOO_SERVERS disagree"
    assert all(nodes[host].get("hostname") == host for _, host, _ in servers)
    assert len({mounts(s)["/data"] for s in nodes.values()}) == 3, "each node needs its own data volume"
    clients = sorted(f"{host}:{port}" for _, host, port in servers)
    assert sorted(config.coordination.hosts.split(",")) == clients
    tick_s = int(environment(next(iter(nodes.values())))["ZOO_TICK_TIME"]) / 1000
    assert 2 * tick_s <= config.coordination.session_timeout_s <= 20 * tick_s, "the servers would clamp the timeout"


def test_two_capture_instances_per_source_with_zookeeper(services, monkeypatch):
    config = config_for_tests(monkeypatch)
    captures: dict[str, list[str]] = {}
    for name, service in services.items():
        cmd = command(service)
        if cmd[:1] == ["capture"]:
            captures.setdefault(cmd[cmd.index("--source") + 1], []).append(name)
    assert sorted(captures) == sorted(config.sources)
    for source_name, names in captures.items():
        assert len(names) == 2, f"{source_name}: {names}"
        source = config.source(source_name)
        hostnames = set()
        for name in names:
            service = services[name]
            with monkeypatch.context() as patch:
                own = load_for(service, patch, require_env=True)
            assert own.coordination.kind == "zookeeper" and own.coordination.hosts == config.coordination.hosts
            waits = service["depends_on"]
            assert waits[source.host]["condition"] == "service_healthy"
            for node in own.coordination.hosts.split(","):
                assert waits[node.split(":")[0]]["condition"] == "service_healthy"
            probe = " ".join(service["healthcheck"]["test"])
            assert f"127.0.0.1:{source.metrics.port}/health" in probe and source.metrics.host == "0.0.0.0"
            assert service["stop_signal"] == "SIGTERM"
            hostnames.add(service["hostname"])
        assert len(hostnames) == 2


def test_a_relay_per_source_with_outputs_publishing_to_the_nats_service(services, monkeypatch):
    config = config_for_tests(monkeypatch)
    relays = {}
    for service in services.values():
        cmd = command(service)
        if cmd[:1] == ["relay"]:
            relays[cmd[cmd.index("--source") + 1]] = service
    assert sorted(relays) == sorted({o.source for o in config.outputs.values()}) and relays
    for source, service in relays.items():
        with monkeypatch.context() as patch:
            own = load_for(service, patch, require_env=False)
        assert {n for n, o in own.outputs.items() if o.source == source}, f"relay of {source} has no output"
        probe = " ".join(service["healthcheck"]["test"])
        assert f"127.0.0.1:{own.relay.metrics.port}/health" in probe and own.relay.metrics.host == "0.0.0.0"
        assert service["stop_signal"] == "SIGTERM" and mounts(service)[LAKEHOUSE] == "lakehouse"
        assert "PASSWORD" not in " ".join(environment(service)), "a relay reads the landing zone, not the source"
    for name, output in config.outputs.items():
        url = urlsplit(output.url)
        server = services[url.hostname]
        assert output.kind == "nats" and url.port == 4222 and server["image"].startswith("nats:"), name
        assert {"--jetstream", "--store_dir"} <= set(command(server)), "JetStream needs -js and its storage"
        for relay in relays.values():
            assert relay["depends_on"][url.hostname]["condition"] == "service_healthy"


def test_airflow_services_share_one_environment(services):
    airflow = {n: s for n, s in services.items() if s["image"].startswith("logtide-airflow:")}
    commands = {n: command(s)[0] if command(s)[0] != "bash" else "init" for n, s in airflow.items()}
    assert sorted(commands.values()) == ["api-server", "dag-processor", "init", "scheduler", "triggerer"]
    envs = {n: environment(s) for n, s in airflow.items()}
    common = envs["airflow-scheduler"]
    for name, env in envs.items():
        assert {k: env.get(k) for k in common} == common, f"{name} differs from the shared environment"
    assert common["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor" and int(common["AIRFLOW__CORE__PARALLELISM"]) > 1
    database = urlsplit(common["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    assert database.scheme == "postgresql+psycopg2" and database.hostname in services and database.port == 5432
    assert f"CREATE DATABASE {database.path.lstrip('/')} OWNER {database.username};" in sql("compose-metadb.sql")
    assert f"CREATE ROLE {database.username} WITH LOGIN PASSWORD" in sql("compose-metadb.sql")
    api = urlsplit(common["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
    assert commands.get(api.hostname) == "api-server" and api.port == 8080
    dockerfile = (ROOT / "Dockerfile").read_text()
    for key in ("AIRFLOW__CORE__DAGS_FOLDER", "AIRFLOW__CORE__PLUGINS_FOLDER"):
        folder = Path(common[key])
        assert folder.parent == Path("/opt/logtide")
        assert f"COPY --chown=airflow:0 {folder.name} ./{folder.name}" in dockerfile
    assert common["LOGTIDE_CONFIG"] == CONFIG_MOUNT
    for name, service in airflow.items():
        if name != "airflow-init":
            assert service["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"
    assert {"AIRFLOW_ADMIN_USER", "AIRFLOW_ADMIN_PASSWORD"} <= set(envs["airflow-init"])


def test_init_sql_matches_the_config(services, monkeypatch):
    config = config_for_tests(monkeypatch)
    grants = sql("compose-grants.sql")
    shop = config.source("shop")
    assert f"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{shop.user}'@'%';" in grants
    assert f"GRANT ALL ON logtide.* TO '{shop.user}'@'%';" in grants
    pg = config.source("shop_pg")
    text = sql("compose-postgres.sql")
    assert f"CREATE ROLE {pg.user} WITH LOGIN REPLICATION PASSWORD" in text
    assert f"CREATE PUBLICATION {pg.publication_name('shop_pg')} FOR ALL TABLES;" in text
    assert f"GRANT CREATE ON DATABASE {pg.database} TO {pg.user};" in text
    init = {"postgres": "compose-postgres.sql", "metadb": "compose-metadb.sql", "mariadb": "compose-grants.sql"}
    for service_name, file in init.items():
        service = services[service_name]
        mounted = {t: s for t, s in mounts(service).items() if t.startswith("/docker-entrypoint-initdb.d/")}
        assert list(mounted.values()) == [f"./config/{file}"], f"{service_name} must run {file} at first start"
        for name in re.findall(r"^\\getenv \w+ (\w+)$", sql(file), re.M):
            assert environment(service).get(name), f"{service_name}: {file} reads {name}, which is not set"


def test_airflow_pools_come_from_the_config(monkeypatch):
    config = config_for_tests(monkeypatch)
    monkeypatch.syspath_prepend(str(ROOT / "docker"))
    monkeypatch.syspath_prepend(str(ROOT / "plugins"))
    from airflow_pools import pools

    assert pools(config) == {f"logtide_{n}": s.dump.pool_slots for n, s in config.sources.items()}
    assert "airflow_pools.py" in (ROOT / "docker/airflow-init.sh").read_text()


# -- the Dockerfile --------------------------------------------------------------------------------------


def test_dockerfile_copies_what_exists_and_builds_the_targets_compose_asks_for(services):
    text = (ROOT / "Dockerfile").read_text()
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line and line[0] != "#"}
    copies = re.findall(r"^COPY (?!.*--from)(.+)$", text, re.M)
    assert len(copies) >= 8
    for line in copies:
        parts = [p for p in line.split() if not p.startswith("--")]
        for source in parts[:-1]:
            assert (ROOT / source).exists(), f"COPY {source}: no such file"
            assert source.split("/")[0] not in ignored, f"COPY {source}: excluded by .dockerignore"
    stages = set(re.findall(r"^FROM \S+ AS (\w+)$", text, re.M))
    for name, service in services.items():
        if "build" in service:
            assert service["build"]["target"] in stages, name
    entrypoint = (ROOT / "docker/entrypoint.sh").read_text()
    for name, service in services.items():
        first = (command(service) or [""])[0]
        if service["image"].startswith("logtide:") and first in ("spark-master", "spark-worker", "merge-loop"):
            assert f"    {first})" in entrypoint, f"{name}: entrypoint has no case {first}"
    for script in ("entrypoint.sh", "merge-loop.sh", "airflow-init.sh"):
        assert (ROOT / "docker" / script).stat().st_mode & 0o111, f"docker/{script} is not executable"
    assert sys.version_info[:2] == (3, 11)  # the images' Python, as the venv's


def test_merge_loop_health_reports_the_last_round(tmp_path):
    """The merge service's healthcheck: healthy after a round without failures, until it is an hour old."""
    import os
    import subprocess
    import time

    status = tmp_path / "status"
    env = {**os.environ, "LOGTIDE_MERGE_STATUS": str(status), "LOGTIDE_MERGE_INTERVAL_S": "60"}

    def healthy() -> bool:
        script = ROOT / "docker/merge-loop.sh"
        return subprocess.run([str(script), "--health"], env=env, timeout=10).returncode == 0

    assert not healthy()  # no round yet
    status.write_text("failures=0\n")
    assert healthy()
    status.write_text("failures=1\n")
    assert not healthy()
    status.write_text("failures=0\n")
    old = time.time() - 2 * 3600
    os.utime(status, (old, old))
    assert not healthy()
