"""Configuration: clear errors that name the key, secrets from the environment."""

from __future__ import annotations

import pytest

from capture.config import load_config, parse_config
from capture.errors import ConfigError

pytestmark = pytest.mark.unit

MINIMAL = {"sources": {"shop": {"kind": "mariadb", "user": "cdc", "server_id": 7}}}


def test_defaults_and_env_secret(monkeypatch):
    monkeypatch.setenv("SHOP_PW", "s3cret")
    data = {"sources": {"shop": {**MINIMAL["sources"]["shop"], "password": "${SHOP_PW}"}}}
    config = parse_config(data)
    shop = config.source("shop")
    assert shop.password.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(config) and "s3cret" not in str(shop)
    assert shop.port == 3306 and shop.include == ["*.*"] and config.landing.flush_interval_s == 0.5


def test_unset_secret_is_an_error_unless_not_required():
    data = {"sources": {"shop": {**MINIMAL["sources"]["shop"], "password": "${NOPE_NOT_SET}"}}}
    with pytest.raises(ConfigError, match=r"sources\.shop\.password: environment variable NOPE_NOT_SET"):
        parse_config(data)
    assert parse_config(data, require_env=False).source("shop").password.get_secret_value() == ""


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"port": 0}, "sources.shop.port: Input should be greater than or equal to 1"),
        ({"kind": "oracle"}, "sources.shop.kind: Input should be 'mariadb', 'mysql' or 'postgresql'"),
        ({"include": ["orders"]}, "pattern 'orders' must look like 'database.table'"),
        ({"colour": "blue"}, "sources.shop.colour: Extra inputs are not permitted"),
        ({"keys": {"shop.*": ["id"]}}, "sources.shop.keys: Value error, 'shop.*' must be a table named"),
        ({"keys": {"shop.audit": []}}, "sources.shop.keys: Value error, shop.audit: name at least one key column"),
        ({"keys": {"shop.audit": ["a", "a"]}}, "shop.audit: a key column is named twice"),
    ],
)
def test_invalid_values_name_the_key(change, message):
    data = {"sources": {"shop": {**MINIMAL["sources"]["shop"], **change}}}
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert message in str(info.value)


def test_missing_file_and_unknown_source(tmp_path, monkeypatch):
    monkeypatch.delenv("LOGTIDE_CONFIG", raising=False)
    with pytest.raises(ConfigError, match="pass --config FILE or set LOGTIDE_CONFIG"):
        load_config(None)
    with pytest.raises(ConfigError, match="cannot read configuration"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("sources: [")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_config(tmp_path / "bad.yaml")
    with pytest.raises(ConfigError, match=r"no source named 'nope' in the configuration \(known: shop\)"):
        parse_config(MINIMAL).source("nope")


def test_include_and_exclude_patterns():
    data = {"sources": {"shop": {**MINIMAL["sources"]["shop"], "include": ["shop.*"], "exclude": ["shop.tmp_*"]}}}
    shop = parse_config(data).source("shop")
    assert shop.captures("shop", "orders") and not shop.captures("shop", "tmp_x") and not shop.captures("hr", "x")


def test_named_keys():
    data = {"sources": {"shop": {**MINIMAL["sources"]["shop"], "keys": {"shop.audit": ["day", "seq"]}}}}
    shop = parse_config(data).source("shop")
    assert shop.named_key("shop", "audit") == ("day", "seq") and shop.named_key("shop", "orders") is None


def test_postgresql_sources_need_a_database_and_get_their_own_defaults():
    data = {"sources": {"pg-main": {"kind": "postgresql", "user": "cdc", "database": "shop"}}}
    pg = parse_config(data).source("pg-main")
    assert pg.port == 5432 and pg.server_id is None
    assert pg.dump.chunk_size == 20_000  # a chunk's fixed cost: small chunks are slow on PostgreSQL
    own = {**data["sources"]["pg-main"], "dump": {"chunk_size": 500, "delay_s": 1}}
    assert parse_config({"sources": {"pg": own}}).source("pg").dump.chunk_size == 500
    assert parse_config(MINIMAL).source("shop").dump.chunk_size == 1000
    assert pg.slot_name("pg-main") == "logtide_pg_main" and pg.publication_name("pg-main") == "logtide_pg_main"
    with pytest.raises(ConfigError, match="kind 'postgresql' needs database"):
        parse_config({"sources": {"pg": {"kind": "postgresql", "user": "cdc"}}})
    with pytest.raises(ConfigError, match=r"sources\.pg\.slot: String should match pattern"):
        parse_config({"sources": {"pg": {"kind": "postgresql", "user": "cdc", "database": "d", "slot": "Bad-Slot"}}})
    with pytest.raises(ConfigError, match="kind 'mariadb' needs server_id"):
        parse_config({"sources": {"m": {"kind": "mariadb", "user": "cdc"}}})
    with pytest.raises(ConfigError, match="database is for kind 'postgresql' only"):
        parse_config({"sources": {"m": {**MINIMAL["sources"]["shop"], "database": "x"}}})


def test_watermarks_default_to_the_table_and_readonly_is_refused_where_it_is_not_sound():
    assert parse_config(MINIMAL).source("shop").watermarks == "table"
    readonly = {**MINIMAL["sources"]["shop"], "watermarks": "readonly"}
    assert parse_config({"sources": {"shop": readonly}}).source("shop").watermarks == "readonly"
    pg = {"kind": "postgresql", "user": "cdc", "database": "shop", "watermarks": "readonly"}
    assert parse_config({"sources": {"shop": pg}}).source("shop").watermarks == "readonly"
    with pytest.raises(ConfigError, match="watermarks: readonly is not implemented for kind 'mysql'"):
        parse_config({"sources": {"shop": {**readonly, "kind": "mysql"}}})
    output = {"source": "shop", "kind": "webhook", "url": "http://127.0.0.1:9/"}
    with_output = parse_config({"sources": {"shop": readonly, "pg": pg}, "outputs": {"hook": output}})
    assert with_output.outputs["hook"].source == "shop"  # outputs follow read-only dumps too
    assert parse_config({"sources": {"pg": pg}, "outputs": {"hook": {**output, "source": "pg"}}}).outputs
    with pytest.raises(ConfigError, match="Input should be 'table' or 'readonly'"):
        parse_config({"sources": {"shop": {**readonly, "watermarks": "none"}}})


def test_foreign_key_cascades_default_to_refuse_and_accept_is_for_mariadb_and_mysql():
    assert parse_config(MINIMAL).source("shop").foreign_key_cascades == "refuse"
    accept = {**MINIMAL["sources"]["shop"], "foreign_key_cascades": "accept"}
    assert parse_config({"sources": {"shop": accept}}).source("shop").foreign_key_cascades == "accept"
    with pytest.raises(ConfigError, match=r"sources\.shop\.foreign_key_cascades: Input should be 'refuse' or 'accept'"):
        parse_config({"sources": {"shop": {**accept, "foreign_key_cascades": "ignore"}}})
    pg = {"kind": "postgresql", "user": "cdc", "database": "shop"}
    assert parse_config({"sources": {"shop": pg}}).source("shop").foreign_key_cascades == "refuse"
    with pytest.raises(ConfigError, match="foreign_key_cascades is for mariadb/mysql"):
        parse_config({"sources": {"shop": {**pg, "foreign_key_cascades": "accept"}}})


def test_partition_changes_default_to_refuse_and_accept_is_for_mariadb_and_mysql():
    assert parse_config(MINIMAL).source("shop").partition_changes == "refuse"
    accept = {**MINIMAL["sources"]["shop"], "partition_changes": "accept"}
    assert parse_config({"sources": {"shop": accept}}).source("shop").partition_changes == "accept"
    with pytest.raises(ConfigError, match=r"sources\.shop\.partition_changes: Input should be 'refuse' or 'accept'"):
        parse_config({"sources": {"shop": {**accept, "partition_changes": "ignore"}}})
    pg = {"kind": "postgresql", "user": "cdc", "database": "shop"}
    with pytest.raises(ConfigError, match="partition_changes is for mariadb/mysql"):
        parse_config({"sources": {"shop": {**pg, "partition_changes": "accept"}}})
