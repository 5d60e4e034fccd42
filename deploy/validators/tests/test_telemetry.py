"""Telemetry: the collector config is wired, scrape jobs mirror labels, replicas agree."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deploy.validators.compose_doc import load_yaml_text
from deploy.validators.glm53_contract import W4AFP8_LONG_CONTEXT
from deploy.validators.tests.harness import Inputs, run_validator

R1 = W4AFP8_LONG_CONTEXT.replicas[0].name
R2 = W4AFP8_LONG_CONTEXT.replicas[1].name
LOGS = "com.datadoghq.ad.logs"
COLLECTOR = "otelcol_app_config"


def telemetry(*files: Path):
    return run_validator("telemetry", *files)


def collector(doc: dict[str, Any]) -> dict[str, Any]:
    return load_yaml_text(doc["configs"][COLLECTOR]["content"].replace("$$", "$"), "collector")


def set_collector(doc: dict[str, Any], config: dict[str, Any]) -> None:
    doc["configs"][COLLECTOR]["content"] = json.dumps(config, indent=1).replace("${", "$${")


def replica_job(config: dict[str, Any], name: str) -> dict[str, Any]:
    for receiver in config["receivers"].values():
        for job in (receiver.get("config") or {}).get("scrape_configs") or []:
            if any(t.startswith(f"{name}:") for s in job["static_configs"] for t in s["targets"]):
                return job
    raise AssertionError(f"no scrape job for {name}")


def set_log_tag(doc: dict[str, Any], service: str, key: str, value: str) -> None:
    labels = doc["services"][service]["labels"]
    entries = json.loads(labels[LOGS])
    tags = entries[0]["tags"]
    [i] = [i for i, t in enumerate(tags) if t.startswith(f"{key}:")]
    tags[i] = f"{key}:{value}"
    labels[LOGS] = json.dumps(entries)


def test_committed_files_pass(inputs: Inputs) -> None:
    result = telemetry(*inputs.all_files)
    assert result.returncode == 0, result.output


def test_engine_image_changed_in_log_tags_only(inputs: Inputs, mutate) -> None:
    holder: dict[str, str] = {}

    def drift(doc: dict[str, Any]) -> None:
        holder["label"] = doc["services"][R1]["labels"]["nearai.otel.engine_image"]
        set_log_tag(doc, R1, "engine_image", "000000000000")

    copy = mutate(inputs.long_context, drift)
    result = telemetry(copy)
    assert result.returncode == 1
    good = holder["label"]
    assert result.errors() == [
        f"{copy}: services.{R1}.labels: engine_image disagrees across consumers: OTel label "
        f"'{good}', log tag '000000000000', scrape job '{good}'",
        f"{copy}: services.{R1}.labels: engine_image in log tag is '000000000000' but the image "
        f"digest starts '{good}'"]


def test_config_variant_changed_in_scrape_job_only(inputs: Inputs, mutate) -> None:
    holder: dict[str, str] = {}

    def drift(doc: dict[str, Any]) -> None:
        config = collector(doc)
        labels = replica_job(config, R2)["static_configs"][0]["labels"]
        holder["good"], holder["job"] = labels["config_variant"], replica_job(config, R2)["job_name"]
        labels["config_variant"] = labels["config_variant"].replace("pdi2", "pdi1")
        set_collector(doc, config)

    copy = mutate(inputs.long_context, drift)
    result = telemetry(copy)
    assert result.returncode == 1
    good, bad = holder["good"], holder["good"].replace("pdi2", "pdi1")
    assert result.errors() == [
        f"{copy}: services.{R2}.labels.nearai.otel.config_variant: label config_variant: service "
        f"says '{good}', scrape job '{holder['job']}' says '{bad}'",
        f"{copy}: services.{R2}.labels: config_variant disagrees across consumers: OTel label "
        f"'{good}', log tag '{good}', scrape job '{bad}'"]


def test_scraped_service_without_job(inputs: Inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        config = collector(doc)
        job = replica_job(config, "dcgm-glm53")
        for receiver in config["receivers"].values():
            jobs = (receiver.get("config") or {}).get("scrape_configs")
            if jobs and job in jobs:
                jobs.remove(job)
        set_collector(doc, config)

    copy = mutate(inputs.long_context, drift)
    result = telemetry(copy)
    assert result.returncode == 1
    port = load_yaml_text(copy.read_text(), "x")["services"]["dcgm-glm53"]["labels"]["nearai.otel.port"]
    assert result.errors() == [
        f"{copy}: services.dcgm-glm53.labels.nearai.otel.scrape: expected exactly one scrape job "
        f"targeting dcgm-glm53:{port}, found 0; add one to the collector's prometheus receiver"]


def test_required_label_missing(inputs: Inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        del doc["services"]["proxy-glm53"]["labels"]["nearai.otel.deployment"]

    copy = mutate(inputs.long_context, drift)
    result = telemetry(copy)
    assert result.returncode == 1
    assert f"{copy}: services.proxy-glm53.labels.nearai.otel.deployment: service is marked for " \
           "scraping but lacks label nearai.otel.deployment" in result.errors()


def test_pipeline_names_undefined_exporter(inputs: Inputs, mutate) -> None:
    holder: dict[str, str] = {}

    def drift(doc: dict[str, Any]) -> None:
        config = collector(doc)
        name, pipeline = next((n, p) for n, p in config["service"]["pipelines"].items()
                              if n.startswith("metrics"))
        holder["pipeline"] = name
        pipeline["exporters"] = pipeline["exporters"] + ["otlp/missing"]
        set_collector(doc, config)

    copy = mutate(inputs.long_context, drift)
    result = telemetry(copy)
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: configs.{COLLECTOR}.content.service.pipelines.{holder['pipeline']}.exporters: "
        "exporter 'otlp/missing' is not defined under exporters"]


def test_receiver_without_pipeline(inputs: Inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        config = collector(doc)
        config["receivers"]["otlp/unused"] = {"protocols": {"grpc": {}}}
        set_collector(doc, config)

    copy = mutate(inputs.long_context, drift)
    result = telemetry(copy)
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: configs.{COLLECTOR}.content.receivers.otlp/unused: receiver is defined but no "
        "pipeline uses it"]


def test_collector_config_not_yaml(inputs: Inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        doc["configs"][COLLECTOR]["content"] = "receivers: [\n"

    copy = mutate(inputs.long_context, drift)
    result = telemetry(copy)
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: configs.{COLLECTOR}.content: invalid YAML at line 2, column 1: while parsing a "
        "flow node: expected the node content, but found '<stream end>'"]
