"""Test helper: load a generated compose file (and its embedded OTel config) as plain data."""

from __future__ import annotations

from typing import Any

from ruamel.yaml import YAML


def load(text: str) -> Any:
    yaml = YAML(typ="safe", pure=True)
    return yaml.load(text)


def otel_config(doc: dict[str, Any]) -> Any:
    # Compose turns `$$` back into `$` before the collector reads the file.
    return load(doc["configs"]["otelcol_app_config"]["content"].replace("$$", "$"))


def scrape_labels(doc: dict[str, Any], service: str) -> dict[str, str]:
    jobs = otel_config(doc)["receivers"]["prometheus/apps"]["config"]["scrape_configs"]
    (job,) = [j for j in jobs if j["job_name"] == f"sglang-{service}"]
    return job["static_configs"][0]["labels"]


def log_tags(doc: dict[str, Any], service: str) -> dict[str, str]:
    import json
    (entry,) = json.loads(doc["services"][service]["labels"]["com.datadoghq.ad.logs"])
    return dict(tag.split(":", 1) for tag in entry["tags"])


def flatten(value: Any, path: str = "") -> dict[str, Any]:
    """Dotted paths to leaf values; embedded config contents are expanded too."""
    out: dict[str, Any] = {}
    if isinstance(value, dict):
        for k, v in value.items():
            out.update(flatten(v, f"{path}.{k}" if path else str(k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.update(flatten(v, f"{path}[{i}]"))
    else:
        out[path] = value
    return out
