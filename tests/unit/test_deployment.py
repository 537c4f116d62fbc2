"""docker-compose.yml cannot run here (no container engine): check it agrees with the project."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from capture.config import load_config

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def test_compose_services_use_valid_config_and_the_required_binlog_settings(monkeypatch):
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    flags = set(services["mariadb"]["command"])
    assert {"--binlog-format=ROW", "--binlog-row-image=FULL", "--binlog-row-metadata=FULL"} <= flags
    capture = services["capture-shop"]
    mounted = {v.split(":")[1]: v.split(":")[0] for v in capture["volumes"]}
    monkeypatch.setenv("LOGTIDE_SHOP_PASSWORD", "x")
    config = load_config(ROOT / mounted["/etc/logtide/logtide.yaml"])
    source = config.source(capture["command"][-1])
    assert source.host == "mariadb" and source.kind == "mariadb"
    assert f"{source.metrics.port}:{source.metrics.port}" in capture["ports"]
    assert str(config.landing.path) == "/var/lib/logtide/landing"
    for volume in capture["volumes"] + services["mariadb"]["volumes"]:
        local = volume.split(":")[0]
        assert local in compose["volumes"] or (ROOT / local).exists(), volume
