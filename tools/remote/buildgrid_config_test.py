"""The BuildGrid configurations wire the services each mode needs."""

import re
from pathlib import Path

from ruamel.yaml import YAML

from tools.remote.buildgrid_config import ServerConfig, ServerTls, actor_acl


class _Tagged(dict):
    pass


def _load(text: str):
    yaml = YAML(typ="safe")
    # BuildGrid uses custom tags (!channel, !disk-storage, ...); keep them as tagged mappings.
    yaml.constructor.add_multi_constructor("!", lambda loader, tag, node: {"__tag__": tag, **loader.construct_mapping(node, deep=True)})
    return yaml.load(text)


def test_cache_mode_serves_cas_and_action_cache_on_loopback_only() -> None:
    config = _load(ServerConfig(port=50051, storage_dir=Path("/tmp/cas")).render())
    assert config["server"][0]["address"] == "127.0.0.1:50051"
    services = {s["__tag__"] for s in config["instances"][0]["services"]}
    assert services == {"action-cache", "cas", "bytestream"}
    assert "schedulers" not in config


def test_exec_mode_adds_scheduler_with_keepalive_and_container_image_wildcard() -> None:
    config = _load(ServerConfig(port=1, storage_dir=Path("/tmp/cas"), postgres_url="postgresql+psycopg2://bgd@127.0.0.1:5/bgd").render())
    services = {s["__tag__"] for s in config["instances"][0]["services"]}
    assert {"execution", "bots"} <= services
    scheduler = config["schedulers"][0]
    assert scheduler["bot-session-keepalive-timeout"] == 30
    assert scheduler["property-set"]["wildcard-property-keys"] == ["container-image"]
    assert config["connections"][0]["connection-string"].startswith("postgresql+psycopg2://")


def test_tls_mode_requires_a_client_certificate_and_the_header_acl() -> None:
    tls = ServerTls(cert=Path("/t/server.crt"), key=Path("/t/server.key"), client_ca=Path("/t/ca.crt"))
    config = _load(ServerConfig(port=1, storage_dir=Path("/tmp/cas"), tls=tls, acl_config=Path("/t/acl.yml"), instance="i").render())
    channel = config["server"][0]
    assert channel["insecure-mode"] is False
    # tls-client-certs set: BuildGrid's server passes require_client_auth=True to gRPC.
    assert channel["credentials"] == {"tls-server-key": "/t/server.key", "tls-server-cert": "/t/server.crt",
                                      "tls-client-certs": "/t/ca.crt"}
    assert config["authorization"] == {"method": "headers", "acl-config": "/t/acl.yml"}
    assert config["instances"][0]["name"] == "i"


def test_the_actor_acl_allows_exactly_the_token() -> None:
    acl = YAML(typ="safe").load(actor_acl("i", "abc123"))
    pattern = acl["i"]["allow"][0]["actor"]
    assert re.fullmatch(pattern, "abc123") and not re.match(pattern, "abc1234") and not re.match(pattern, "xabc123")
