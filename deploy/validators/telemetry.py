"""Telemetry: the embedded OTel collector config, scrape jobs, and per-replica label agreement.

Rules:
  * the collector config embedded in `configs` parses (after Compose interpolation), defines
    receivers, exporters and service.pipelines; every pipeline has receivers and exporters, every
    component a pipeline names is defined, every defined receiver/exporter is used by a pipeline,
    and nothing exports OTLP to a Datadog agent;
  * every service labelled `nearai.otel.scrape: "true"` has the required `nearai.otel.*` labels
    and exactly one scrape job targeting `<service>:<port>`, whose labels equal the service's
    `nearai.otel.*` labels (both ways) and whose metrics_path matches; no scrape target points at
    a service that is not marked for scraping;
  * the `com.datadoghq.ad.logs` label is valid JSON whose source/service equal the OTel labels;
  * per engine replica, `engine_image` (= the first 12 hex of its image digest) and
    `config_variant` agree across the log tags, the OTel label and the scrape job.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Any, Mapping

from tools.oci.reference import pinned_digest
from deploy.validators import cli
from deploy.validators.compose_doc import (CI_DUMMY_ENV, ComposeFile, Finding, InterpolationError,
                                           LoadError, config_contents, interpolate, join_path,
                                           labels_map, load_yaml_text)
from deploy.validators.topology import engines, image_repository

VALIDATOR = "telemetry"

OTEL = "nearai.otel."
LOGS_LABEL = "com.datadoghq.ad.logs"
REQUIRED_SCRAPE_LABELS = ("service", "port", "metrics_path", "deployment")
# Series labels: when either the service or its scrape job carries one, both carry it, equal.
# Other `nearai.otel.*` labels (role, gpus, enabled, ...) are container metadata only.
MIRRORED = ("service", "source", "deployment", "model", "model_path", "precision", "instance",
            "replica", "gpu_pair", "engine_image", "config_variant")
AGREEING_KEYS = ("engine_image", "config_variant")
SECTIONS = {"receivers": "receivers", "processors": "processors", "exporters": "exporters"}


@dataclass
class ScrapeTarget:
    job: str
    where: str  # dotted path inside the collector config
    host: str
    port: str
    metrics_path: str
    labels: dict[str, str]


def collector_config(compose: ComposeFile) -> tuple[str, str] | None:
    """(config name, text) of the collector config: mounted by an opentelemetry-collector image."""
    contents = config_contents(compose)
    for service in compose.services.values():
        if not isinstance(service, Mapping) or "opentelemetry-collector" not in image_repository(
                str(service.get("image", ""))):
            continue
        for item in service.get("configs") or []:
            source = item if isinstance(item, str) else (item or {}).get("source")
            if source in contents:
                return source, contents[source]
    if "otelcol_app_config" in contents:
        return "otelcol_app_config", contents["otelcol_app_config"]
    return None


def _components(pipeline: Mapping[str, Any], kind: str) -> list[str]:
    value = pipeline.get(kind) or []
    return [str(v) for v in value] if isinstance(value, list) else []


def otel_findings(compose: ComposeFile, name: str, config: Any) -> list[Finding]:
    where = join_path("configs", name, "content")
    findings = []
    if not isinstance(config, Mapping):
        return [compose.finding(where, "collector config must be a mapping")]
    for section in ("receivers", "exporters"):
        if not isinstance(config.get(section), Mapping) or not config.get(section):
            findings.append(compose.finding(join_path(where, section), f"no {section} defined"))
    pipelines = (config.get("service") or {}).get("pipelines") if isinstance(
        config.get("service"), Mapping) else None
    if not isinstance(pipelines, Mapping) or not pipelines:
        return findings + [compose.finding(join_path(where, "service.pipelines"), "no pipelines")]
    used: dict[str, set[str]] = {k: set() for k in SECTIONS}
    for pname, pipeline in pipelines.items():
        ppath = join_path(where, "service", "pipelines", str(pname))
        if not isinstance(pipeline, Mapping):
            findings.append(compose.finding(ppath, "pipeline must be a mapping"))
            continue
        for kind in SECTIONS:
            comps = _components(pipeline, kind)
            if kind != "processors" and not comps:
                findings.append(compose.finding(join_path(ppath, kind), f"pipeline has no {kind}"))
            defined = config.get(kind) if isinstance(config.get(kind), Mapping) else {}
            for comp in comps:
                used[kind].add(comp)
                if comp not in defined:
                    findings.append(compose.finding(join_path(ppath, kind), (
                        f"{kind[:-1]} {comp!r} is not defined under {kind}")))
    for kind in ("receivers", "exporters"):
        defined = config.get(kind) if isinstance(config.get(kind), Mapping) else {}
        for comp in defined:
            if comp not in used[kind]:
                findings.append(compose.finding(join_path(where, kind, str(comp)), (
                    f"{kind[:-1]} is defined but no pipeline uses it")))
    exporters = config.get("exporters") if isinstance(config.get("exporters"), Mapping) else {}
    for ename, exporter in exporters.items():
        endpoint = str((exporter or {}).get("endpoint", "")) if isinstance(exporter, Mapping) else ""
        if "datadog-agent:4317" in endpoint:
            findings.append(compose.finding(join_path(where, "exporters", str(ename)), (
                "OTLP export to datadog-agent:4317 is not allowed; export to the gateway")))
    extensions = ((config.get("service") or {}).get("extensions") or [])
    defined_ext = config.get("extensions") if isinstance(config.get("extensions"), Mapping) else {}
    for ext in extensions if isinstance(extensions, list) else []:
        if ext not in defined_ext:
            findings.append(compose.finding(join_path(where, "service", "extensions"), (
                f"extension {ext!r} is not defined under extensions")))
    return findings


def scrape_targets(config: Any, name: str) -> list[ScrapeTarget]:
    targets = []
    receivers = config.get("receivers") if isinstance(config, Mapping) else None
    for rname, receiver in (receivers or {}).items():
        if not str(rname).startswith("prometheus") or not isinstance(receiver, Mapping):
            continue
        jobs = ((receiver.get("config") or {}).get("scrape_configs") or [])
        for j, job in enumerate(jobs):
            if not isinstance(job, Mapping):
                continue
            for s, static in enumerate(job.get("static_configs") or []):
                labels = {str(k): str(v) for k, v in ((static or {}).get("labels") or {}).items()}
                for t, target in enumerate((static or {}).get("targets") or []):
                    host, _, port = str(target).rpartition(":")
                    targets.append(ScrapeTarget(
                        str(job.get("job_name", "")),
                        join_path("configs", name, "content", "receivers", str(rname), "config",
                                  "scrape_configs", j, "static_configs", s, "targets", t),
                        host, port, str(job.get("metrics_path", "/metrics")), labels))
    return targets


def log_tags(compose: ComposeFile, service: str, labels: Mapping[str, str]) -> tuple[
        dict[str, Any] | None, list[Finding]]:
    raw = labels.get(LOGS_LABEL)
    if raw is None:
        return None, []
    where = join_path("services", service, "labels", LOGS_LABEL)
    try:
        entries = json.loads(raw)
    except json.JSONDecodeError as exc:
        return None, [compose.finding(where, f"not valid JSON: {exc.msg} at column {exc.colno}")]
    if not isinstance(entries, list) or not entries or not isinstance(entries[0], Mapping):
        return None, [compose.finding(where, "must be a JSON list of log configs")]
    return dict(entries[0]), []


def _tag_values(entry: Mapping[str, Any], key: str) -> list[str]:
    return [str(t).split(":", 1)[1] for t in entry.get("tags") or []
            if str(t).startswith(f"{key}:")]


def label_findings(compose: ComposeFile, targets: list[ScrapeTarget]) -> list[Finding]:
    findings = []
    scraped: set[tuple[str, str]] = set()
    engine_names = set(engines(compose))
    for name, service in compose.services.items():
        if not isinstance(service, Mapping):
            continue
        labels = labels_map(service.get("labels"))
        otel = {k[len(OTEL):]: v for k, v in labels.items() if k.startswith(OTEL)}
        base = join_path("services", name, "labels")
        entry, errors = log_tags(compose, name, labels)
        findings += errors
        if entry is not None:
            for key in ("source", "service"):
                if key in otel and entry.get(key) != otel[key]:
                    findings.append(compose.finding(join_path(base, LOGS_LABEL), (
                        f"log {key} {entry.get(key)!r} differs from {OTEL}{key} {otel[key]!r}")))
        job: ScrapeTarget | None = None
        if otel.get("scrape") == "true":
            for key in REQUIRED_SCRAPE_LABELS:
                if not otel.get(key):
                    findings.append(compose.finding(join_path(base, OTEL + key), (
                        f"service is marked for scraping but lacks label {OTEL}{key}")))
            port = otel.get("port", "")
            scraped.add((name, port))
            matches = [t for t in targets if t.host == name and t.port == port]
            if len(matches) != 1:
                findings.append(compose.finding(join_path(base, OTEL + "scrape"), (
                    f"expected exactly one scrape job targeting {name}:{port}, found "
                    f"{len(matches)}" + (f" ({', '.join(m.job for m in matches)})" if matches else
                                         "; add one to the collector's prometheus receiver"))))
            else:
                job = matches[0]
                series = {k: v for k, v in otel.items() if k in MIRRORED}
                for key in sorted(set(series) | set(job.labels)):
                    if series.get(key) != job.labels.get(key):
                        findings.append(compose.finding(join_path(base, OTEL + key), (
                            f"label {key}: service says {series.get(key)!r}, scrape job "
                            f"{job.job!r} says {job.labels.get(key)!r}")))
                if otel.get("metrics_path") and job.metrics_path != otel["metrics_path"]:
                    findings.append(compose.finding(join_path(base, OTEL + "metrics_path"), (
                        f"metrics_path {otel['metrics_path']!r} but scrape job {job.job!r} "
                        f"scrapes {job.metrics_path!r}")))
        if name in engine_names:
            if job is None:  # not marked (reported above or below): still compare its job
                hits = [t for t in targets if t.host == name]
                job = hits[0] if len(hits) == 1 else None
            findings += _agreement(compose, name, service, otel, entry, job)
    for target in targets:
        if target.host in compose.services and (target.host, target.port) not in scraped:
            findings.append(compose.finding(target.where, (
                f"scrape target {target.host}:{target.port} (job {target.job!r}) is not a "
                f"service marked `{OTEL}scrape: \"true\"` with {OTEL}port {target.port!r}")))
    return findings


def _agreement(compose: ComposeFile, name: str, service: Mapping[str, Any], otel: Mapping[str, str],
               entry: Mapping[str, Any] | None, job: ScrapeTarget | None) -> list[Finding]:
    """engine_image and config_variant: one value across log tags, OTel label and scrape job."""
    findings = []
    base = join_path("services", name, "labels")
    digest = pinned_digest(service.get("image"))
    for key in AGREEING_KEYS:
        seen: dict[str, str | None] = {"OTel label": otel.get(key)}
        if entry is not None:
            tags = _tag_values(entry, key)
            if len(tags) != 1:
                findings.append(compose.finding(join_path(base, LOGS_LABEL), (
                    f"expected exactly one `{key}:` log tag, found {len(tags)}")))
            seen["log tag"] = tags[0] if len(tags) == 1 else None
        else:
            seen["log tag"] = None
        seen["scrape job"] = job.labels.get(key) if job else None
        for consumer, value in seen.items():
            if value is None:
                findings.append(compose.finding(base, f"replica has no {key} in its {consumer}"))
        values = {v for v in seen.values() if v is not None}
        if len(values) > 1:
            detail = ", ".join(f"{c} {v!r}" for c, v in seen.items())
            findings.append(compose.finding(base, f"{key} disagrees across consumers: {detail}"))
        if key == "engine_image" and digest:
            expected = digest.split(":", 1)[1][:12]
            for consumer, value in seen.items():
                if value is not None and value != expected:
                    findings.append(compose.finding(base, (
                        f"engine_image in {consumer} is {value!r} but the image digest starts "
                        f"{expected!r}")))
    return findings


def check(compose: ComposeFile, args: argparse.Namespace) -> list[Finding]:
    found = collector_config(compose)
    scraping = any(labels_map((s or {}).get("labels")).get(OTEL + "scrape") == "true"
                   for s in compose.services.values() if isinstance(s, Mapping))
    if found is None:
        return [compose.finding("configs", "no embedded OTel collector config")] if scraping else []
    name, raw = found
    where = join_path("configs", name, "content")
    try:
        text = interpolate(raw, CI_DUMMY_ENV)
    except InterpolationError as exc:
        return [compose.finding(where, f"Compose interpolation fails: {exc}")]
    try:
        config = load_yaml_text(text, where)
    except LoadError as exc:
        return [compose.finding(where, str(exc).removeprefix(f"{where}: "))]
    findings = otel_findings(compose, name, config)
    return findings + label_findings(compose, scrape_targets(config, name))


def main(argv: list[str] | None = None) -> int:
    return cli.main(VALIDATOR, __doc__.splitlines()[0], check, None, argv)


if __name__ == "__main__":
    sys.exit(main())
