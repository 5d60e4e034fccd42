"""The OpenTelemetry collector config: log and metric pipelines, one scrape job per engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .resolve import ResolvedDeployment
from .yamlout import dump_plain

CONFIG_PATH = "/etc/otelcol-contrib/config.yaml"
STORAGE_DIR = "/var/lib/otelcol/storage"
DCGM_PORT = 9400


@dataclass(frozen=True)
class ScrapeTarget:
    """A service the collector scrapes; `labels` mirror the service's nearai.otel.* series labels."""
    service: str
    port: int
    metrics_path: str
    labels: tuple[tuple[str, str], ...]


def _job(name: str, target: str, labels: dict[str, str], interval: str, timeout: str,
         path: str = "/metrics") -> dict[str, Any]:
    return {
        "job_name": name,
        "scrape_interval": interval,
        "scrape_timeout": timeout,
        "metrics_path": path,
        "static_configs": [{"targets": [target], "labels": labels}],
    }


def config(rd: ResolvedDeployment, targets: list[tuple[str, ScrapeTarget]]) -> dict[str, Any]:
    """The collector config; `targets` are (job prefix, target) in scrape order."""
    tel = rd.common.telemetry
    info = rd.deployment.info
    prefix = tel.label_prefix
    jobs = [_job(f"{role}-{t.service}", f"{t.service}:{t.port}", dict(t.labels),
                 tel.scrape_interval, tel.scrape_timeout, t.metrics_path)
            for role, t in targets]
    docker = 'attributes["docker"]'
    return {
        "extensions": {
            "health_check": {"endpoint": "127.0.0.1:13133"},
            "file_storage": {"directory": STORAGE_DIR, "create_directory": True},
        },
        "receivers": {
            # Docker's json-file logs; the logging driver copies the nearai.otel.* and
            # Datadog log labels of each container into every line's `attrs`.
            "filelog/docker": {
                "include": ["/var/lib/docker/containers/*/*-json.log"],
                "start_at": "end",
                "include_file_path": True,
                "storage": "file_storage",
                "operators": [
                    {"type": "json_parser",
                     "timestamp": {"parse_from": "attributes.time", "layout_type": "gotime",
                                   "layout": "2006-01-02T15:04:05.999999999Z07:00"}},
                    {"type": "move", "from": "attributes.log", "to": "body"},
                    {"type": "move", "from": "attributes.attrs", "to": "attributes.docker",
                     "if": "attributes.attrs != nil"},
                ],
            },
            "prometheus/apps": {"config": {"scrape_configs": jobs}},
            "prometheus/self": {"config": {"scrape_configs": [
                _job("otelcol-self", "127.0.0.1:8888", {"deployment": info.name},
                     tel.scrape_interval, tel.scrape_timeout)]}},
            "otlp": {"protocols": {"grpc": {"endpoint": "0.0.0.0:4317"},
                                   "http": {"endpoint": "0.0.0.0:4318"}}},
        },
        "processors": {
            "memory_limiter": {"check_interval": "1s", "limit_mib": 640, "spike_limit_mib": 128},
            # Only containers that opted in with nearai.otel.enabled=true.
            "filter/app_logs": {"error_mode": "ignore", "logs": {"log_record": [
                f'{docker} == nil or {docker}["{prefix}enabled"] != "true"']}},
            "transform/docker_metadata": {"error_mode": "ignore", "log_statements": [{
                "context": "log",
                "statements": [
                    f'set(attributes["{key}"], {docker}["{prefix}{key}"]) where '
                    f'{docker}["{prefix}{key}"] != nil'
                    for key in ("service", "deployment", "role", "instance", "model_path",
                                "precision", "engine_image", "config_variant")
                ] + [f'delete_key(attributes, "docker")'],
            }]},
            "resource": {"attributes": [
                {"key": "host.id", "value": "${env:OTEL_HOST_ID}", "action": "upsert"},
                {"key": "deployment.name", "value": info.name, "action": "upsert"},
            ]},
            "batch": {"send_batch_size": 1024, "timeout": "5s"},
        },
        "exporters": {
            "otlphttp/gateway": {
                "endpoint": "${env:OTEL_GATEWAY_ENDPOINT}",
                "headers": {"Authorization": "Bearer ${env:OTEL_GATEWAY_TOKEN}"},
                "sending_queue": {"enabled": True, "num_consumers": 1, "queue_size": 128,
                                  "storage": "file_storage"},
                "retry_on_failure": {"enabled": True, "max_elapsed_time": "10m"},
            },
        },
        "service": {
            "extensions": ["health_check", "file_storage"],
            "telemetry": {"metrics": {"level": "basic", "readers": [
                {"pull": {"exporter": {"prometheus": {"host": "127.0.0.1", "port": 8888}}}}]}},
            "pipelines": {
                "logs/app": {"receivers": ["filelog/docker"],
                             "processors": ["memory_limiter", "filter/app_logs",
                                            "transform/docker_metadata", "resource", "batch"],
                             "exporters": ["otlphttp/gateway"]},
                "metrics/app": {"receivers": ["prometheus/apps"],
                                "processors": ["memory_limiter", "resource", "batch"],
                                "exporters": ["otlphttp/gateway"]},
                "metrics/otlp": {"receivers": ["otlp"],
                                 "processors": ["memory_limiter", "resource", "batch"],
                                 "exporters": ["otlphttp/gateway"]},
                "metrics/self": {"receivers": ["prometheus/self"],
                                 "processors": ["memory_limiter", "resource", "batch"],
                                 "exporters": ["otlphttp/gateway"]},
                "traces": {"receivers": ["otlp"],
                           "processors": ["memory_limiter", "resource", "batch"],
                           "exporters": ["otlphttp/gateway"]},
            },
        },
    }


def render(rd: ResolvedDeployment, targets: list[tuple[str, ScrapeTarget]]) -> str:
    return dump_plain(config(rd, targets))
