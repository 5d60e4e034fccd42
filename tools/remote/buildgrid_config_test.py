"""The BuildGrid configurations wire the services each mode needs."""

from pathlib import Path

from ruamel.yaml import YAML

from tools.remote.buildgrid_config import ServerConfig


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
