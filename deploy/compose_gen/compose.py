"""Builds the compose document of one deployment from its resolved tables.

Service order, key order and anchors are fixed here so the output is stable. Every value comes
from the tables, the release records or resolve.py; this module only places them.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from ruamel.yaml.comments import CommentedMap

from . import assets, otel
from .resolve import HF_CACHE, ResolvedDeployment, ResolvedReplica, hf_cache_file
from .tables import Env
from .yamlout import anchored, block, cmap, merged, raw, seq

LOG_LABEL = "com.datadoghq.ad.logs"
METRICS_PATH = "/metrics"
PROXY_PORT = 8000
PROXY = "proxy-glm53"
DCGM_CSV = "/etc/dcgm-exporter/nearai-h200.csv"
# Memory ceilings of the sidecars (chosen, not measured), so a leaking sidecar is killed before
# it takes host RAM the engines' HiCache budget counts on. The perception check (512m) and the
# collector (768m, with GOMEMLIMIT below it) set theirs next to their other limits.
SIDECAR_MEMORY = {
    "model-downloader": "8g",  # hf_xet's high-performance mode buffers chunks in RAM
    "hf-cleanup": "256m",
    "nginx": "1g",
    "model-proxy-registrar": "128m",
    PROXY: "4g",  # request bodies up to VLLM_PROXY_MAX_REQUEST_SIZE (100 MiB) per stream
    "glm53-soak-relay": "512m",
    "dcgm-glm53": "1g",
}


def _env(entries: Env) -> CommentedMap:
    return cmap(*entries)


def _gpu_reservation(gpus: tuple[int, ...]) -> CommentedMap:
    device = cmap(("driver", "nvidia"),
                  ("device_ids", seq([str(g) for g in gpus], flow=True)),
                  ("capabilities", seq(["gpu"], flow=True)))
    return cmap(("resources", cmap(("reservations", cmap(("devices", seq([device])),)),)),)


class _Builder:
    def __init__(self, rd: ResolvedDeployment) -> None:
        self.rd = rd
        self.common = rd.common
        self.info = rd.deployment.info
        self.prefix = rd.common.telemetry.label_prefix
        # Filled while services are built; the collector config is rendered from it last.
        self.scrape_targets: list[tuple[str, otel.ScrapeTarget]] = []

    # --- labels -------------------------------------------------------------------------------

    def _labels(self, service: str, role: str, source: str, tags: list[str],
                extra: list[tuple[str, str]], scrape: tuple[str, int] | None = None
                ) -> CommentedMap:
        """Labels of one service; with `scrape` = (job prefix, port) it also gets a scrape job
        whose labels mirror this service's series labels (deployment, service, `extra`)."""
        p = self.prefix
        log = [{"source": source, "service": service, "tags": tags}]
        series = [("deployment", self.info.name), ("service", service), *extra]
        scrape_labels: list[tuple[str, str]] = []
        if scrape is not None:
            role_prefix, port = scrape
            scrape_labels = [("scrape", "true"), ("port", str(port)),
                             ("metrics_path", METRICS_PATH)]
            self.scrape_targets.append((role_prefix, otel.ScrapeTarget(
                service, port, METRICS_PATH, tuple(series))))
        return cmap(
            (LOG_LABEL, json.dumps(log, separators=(", ", ": "))),
            (f"{p}enabled", "true"),
            (f"{p}role", role),
            *((f"{p}{k}", v) for k, v in series),
            *((f"{p}{k}", v) for k, v in scrape_labels),
        )

    def sidecar_labels(self, service: str, role: str,
                       extra: list[tuple[str, str]] | None = None,
                       scrape: tuple[str, int] | None = None) -> CommentedMap:
        return self._labels(service, role, role, [f"deployment:{self.info.name}"], extra or [],
                            scrape)

    def engine_labels(self, r: ResolvedReplica) -> CommentedMap:
        identity = [
            ("model", self.common.models.served_model_name),
            ("model_path", self.rd.checkpoint.repository),
            ("precision", self.info.precision),
            ("instance", str(r.row.index)),
            ("engine_image", r.engine_image),
            ("config_variant", r.config_variant),
        ]
        tags = [f"deployment:{self.info.name}"] + [
            f"{k}:{v}" for k, v in identity if k in
            ("model_path", "precision", "instance", "engine_image", "config_variant")]
        labels = self._labels(r.service, "engine", self.common.telemetry.log_source, tags,
                              identity, ("sglang", self.common.engine.port))
        labels[f"{self.prefix}gpus"] = ",".join(str(g) for g in r.row.gpus)
        return labels

    # --- shared blocks ------------------------------------------------------------------------

    def build(self) -> CommentedMap:
        p = self.prefix
        logging = anchored("logging", cmap(
            ("driver", "json-file"),
            ("options", cmap(
                ("max-size", "100m"),
                ("max-file", "5"),
                # Copied into every log line's attrs for the collector's filelog receiver.
                ("labels", ",".join([LOG_LABEL] + [f"{p}{k}" for k in (
                    "enabled", "deployment", "service", "role", "instance", "model_path",
                    "precision", "engine_image", "config_variant")])),
            )),
        ))
        nvidia = anchored("nvidia", cmap(
            ("runtime", "nvidia"),
            ("ipc", "host"),
            ("ulimits", cmap(("memlock", -1), ("nofile", cmap(("soft", 65535), ("hard", 65535))))),
        ))
        engine_common = anchored("glm53-engine-common", merged(nvidia, cmap(
            ("init", True),
            ("restart", "unless-stopped"),
            ("stop_grace_period", "5m"),
            ("healthcheck", self.engine_healthcheck()),
            ("depends_on", cmap(("model-downloader",
                                 cmap(("condition", "service_completed_successfully"))))),
            ("volumes", seq([f"huggingface_cache:{HF_CACHE}", "kernel_cache:/root/.cache/kernels"])),
            ("logging", logging),
        )))
        engine_env = anchored("glm53-engine-env", _env(self.rd.engine_environment))
        self.logging = logging

        services = cmap()
        services["model-downloader"] = self.downloader()
        services["hf-cleanup"] = self.hf_cleanup()
        services["nginx"] = self.nginx()
        services["model-proxy-registrar"] = self.registrar()
        services[PROXY] = self.proxy()
        for r in self.rd.replicas:
            services[r.service] = self.engine(r, engine_common, engine_env)
        services["glm53-perception-check"] = self.perception()
        services["glm53-soak-relay"] = self.soak_relay()
        services["dcgm-glm53"] = self.dcgm()
        services["otelcol-contrib"] = self.otelcol()

        return cmap(
            ("x-logging", logging),
            ("x-nvidia", nvidia),
            ("x-glm53-engine-common", engine_common),
            ("x-glm53-engine-env", engine_env),
            ("services", services),
            ("networks", cmap(("default", cmap(("name", "dstack_default"), ("external", True))))),
            ("volumes", cmap(
                ("huggingface_cache", cmap()),
                ("kernel_cache", cmap()),
                ("otelcol_app_storage", cmap()),
                ("certs", cmap(("external", True))),
            )),
            ("configs", self.configs()),
        )

    def engine_healthcheck(self) -> CommentedMap:
        # /health answers without a generation (SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0); the
        # timeout stays under the inference proxy's 3 s health probe; start_period is the
        # table's cold start. The program has no space in it: podman's Docker API joins a CMD
        # test's arguments and splits them again on whitespace (and the images have no shell).
        url = f"http://127.0.0.1:{self.common.engine.port}/health"
        program = f"__import__('urllib.request').request.urlopen('{url}',timeout=2)"
        return cmap(
            ("test", seq(["CMD", "python3", "-c", program])),
            ("interval", "10s"),
            ("timeout", "2s"),
            ("retries", 3),
            ("start_period", f"{self.common.engine.cold_start_s}s"),
        )

    def _sidecar(self, name: str) -> Any:
        return self.common.sidecars[name]

    # --- services -----------------------------------------------------------------------------

    def downloader(self) -> CommentedMap:
        sc = self._sidecar("model-downloader")
        client = shlex.quote(self.common.models.hub_client)
        lines = ["set -eu"]
        q = shlex.quote
        for pin in self.rd.downloads:
            lines.append(f"uvx --from {client} hf download {pin.repository} "
                         f"--revision {q(pin.revision)}")
        tpl = self.common.models.chat_template
        lines.append(f"uvx --from {client} hf download {tpl.repository} {tpl.path} "
                     f"--revision {q(tpl.revision)}")
        # The pinned file's sha256 (pin table), checked where the engines will read it.
        lines.append(f"echo {q(tpl.sha256 + '  ' + hf_cache_file(tpl))} | sha256sum -c -")
        return cmap(
            ("container_name", "model-downloader"),
            ("image", sc.image),
            ("restart", "no"),
            ("mem_limit", SIDECAR_MEMORY["model-downloader"]),
            ("entrypoint", seq(["/bin/sh", "-c"])),
            ("command", seq([raw("\n".join(lines))])),
            ("environment", _env(sc.environment)),
            ("volumes", seq([f"huggingface_cache:{HF_CACHE}"])),
            ("labels", self.sidecar_labels("model-downloader", "downloader")),
            ("logging", self.logging),
        )

    def hf_cleanup(self) -> CommentedMap:
        sc = self._sidecar("hf-cleanup")
        protected = " ".join(p.repository for p in self.rd.downloads)
        return cmap(
            ("container_name", "hf-cleanup"),
            ("image", sc.image),
            ("profiles", seq(["maintenance"], flow=True)),
            ("restart", "no"),
            ("mem_limit", SIDECAR_MEMORY["hf-cleanup"]),
            ("entrypoint", seq(["/bin/sh", "-c"])),
            ("command", seq([raw(assets.read("hf-cleanup.sh"))])),
            ("environment", _env((("MODEL_NAME", "${MODEL_NAME:-}"),
                                  ("PROTECTED_MODELS", protected), *sc.environment))),
            ("volumes", seq([f"huggingface_cache:{HF_CACHE}"])),
            ("labels", self.sidecar_labels("hf-cleanup", "maintenance")),
            ("logging", self.logging),
        )

    def nginx(self) -> CommentedMap:
        sc = self._sidecar("nginx")
        ports = ["8000:8000", "8444:443"] + (["8001:8001"] if self.info.long_tier else [])
        return cmap(
            ("container_name", "nginx"),
            ("image", sc.image),
            ("restart", "unless-stopped"),
            ("mem_limit", SIDECAR_MEMORY["nginx"]),
            ("entrypoint", seq(["/bin/sh", "-c"])),
            ("command", seq([raw(assets.read("nginx-entrypoint.sh"))])),
            *((("environment", _env(sc.environment)),) if sc.environment else ()),
            ("ports", seq(ports)),
            ("depends_on", cmap((PROXY, cmap(("condition", "service_started"))))),
            ("volumes", seq(["certs:/etc/nginx/certs:ro"])),
            ("configs", seq([cmap(("source", "nginx_conf"),
                                  ("target", "/etc/nginx/conf.d/default.conf"))])),
            ("labels", self.sidecar_labels("nginx", "ingress")),
            ("logging", self.logging),
        )

    def registrar(self) -> CommentedMap:
        sc = self._sidecar("model-proxy-registrar")
        routing = self.common.routing
        env: list[tuple[str, str]] = [
            ("MODEL_NAME", self.common.models.served_model_name),
            ("SERVER_NAME", routing.server_name),
        ]
        if self.info.long_tier:
            env += [("LONG_TIER_ONLY", "${LONG_TIER_ONLY:-true}"),
                    ("LONG_HTTP_PORT", "${LONG_HTTP_PORT:-8001}"),
                    ("LONG_MODEL_NAME", routing.long_model_name),
                    ("LONG_SERVER_NAME", routing.long_server_name)]
        env += sc.environment
        return cmap(
            ("container_name", "model-proxy-registrar"),
            ("image", sc.image),
            ("restart", "unless-stopped"),
            ("mem_limit", SIDECAR_MEMORY["model-proxy-registrar"]),
            # Time to unregister from every peer on SIGTERM.
            ("stop_grace_period", "45s"),
            ("command", seq(["sh", "/register.sh"])),
            ("environment", _env(tuple(env))),
            # Registers only once every replica is healthy: the proxy answers /v1/models on
            # its own, so the script's own wait cannot tell a loading replica from a ready one.
            ("depends_on", cmap(("nginx", cmap(("condition", "service_started"))), *(
                (r.service, cmap(("condition", "service_healthy"))) for r in self.rd.replicas))),
            ("configs", seq([cmap(("source", "registrar_script"), ("target", "/register.sh"))])),
            ("healthcheck", cmap(
                ("test", seq(["CMD-SHELL",
                              "find /tmp/registrar_alive -mmin -3 2>/dev/null | grep -q ."])),
                ("interval", "30s"),
                ("timeout", "10s"),
                ("retries", 3),
                ("start_period", "1200s"),
            )),
            ("labels", self.sidecar_labels("model-proxy-registrar", "registrar")),
            ("logging", self.logging),
        )

    def backend_urls(self) -> str:
        port = self.common.engine.port
        return ",".join(f"http://{r.service}:{port}" for r in self.rd.replicas)

    def proxy(self) -> CommentedMap:
        sc = self._sidecar(PROXY)
        env = [("MODEL_NAME", self.common.models.served_model_name),
               # Host-overridable pool, e.g. to drain one replica without editing the file.
               ("VLLM_BACKEND_URLS", f"${{GLM53_BACKEND_URLS:-{self.backend_urls()}}}"),
               *sc.environment]
        # No depends_on on the engines: the proxy must come up (and answer health checks)
        # while replicas restart one at a time.
        return cmap(
            ("container_name", PROXY),
            ("image", sc.image),
            ("restart", "unless-stopped"),
            ("mem_limit", SIDECAR_MEMORY[PROXY]),
            # The reason is the table's (privileged_reason); without one, no privilege.
            *((("privileged", True),) if sc.privileged_reason else ()),
            ("environment", _env(tuple(env))),
            ("volumes", seq(["/var/run/dstack.sock:/var/run/dstack.sock",
                             "certs:/etc/certs:ro"])),
            ("labels", self.sidecar_labels(PROXY, "proxy", scrape=("proxy", PROXY_PORT))),
            ("logging", self.logging),
        )

    def engine(self, r: ResolvedReplica, common: CommentedMap, env: CommentedMap) -> CommentedMap:
        own = cmap(
            ("container_name", r.service),
            ("image", r.image),
            ("command", seq(r.command)),
            ("environment", merged(env, _env(r.environment))),
            ("deploy", _gpu_reservation(r.row.gpus)),
            ("labels", self.engine_labels(r)),
        )
        return merged(common, own)

    def perception(self) -> CommentedMap:
        sc = self._sidecar("glm53-perception-check")
        port = self.common.engine.port
        targets = ",".join(f"r{r.row.index}=http://{r.service}:{port}" for r in self.rd.replicas)
        return cmap(
            ("container_name", "glm53-perception-check"),
            ("image", sc.image),
            ("profiles", seq(["verification"], flow=True)),
            ("restart", "no"),
            ("runtime", "runc"),
            ("user", "65534:65534"),
            ("read_only", True),
            ("cap_drop", seq(["ALL"], flow=True)),
            ("security_opt", seq(["no-new-privileges:true"], flow=True)),
            ("mem_limit", "512m"),
            ("cpus", 1),
            ("command", seq(["python3", "/perception_check.py"])),
            ("environment", _env((("NVIDIA_VISIBLE_DEVICES", "void"),
                                  ("MODEL_NAME", self.common.models.served_model_name),
                                  ("PERCEPTION_TARGETS", targets), *sc.environment))),
            ("configs", seq([cmap(("source", "perception_check"),
                                  ("target", "/perception_check.py"))])),
            ("labels", self.sidecar_labels("glm53-perception-check", "verification")),
            ("logging", self.logging),
        )

    def soak_relay(self) -> CommentedMap:
        sc = self._sidecar("glm53-soak-relay")
        return cmap(
            ("container_name", "glm53-soak-relay"),
            ("image", sc.image),
            ("profiles", seq(["verification"], flow=True)),
            ("restart", "unless-stopped"),
            ("mem_limit", SIDECAR_MEMORY["glm53-soak-relay"]),
            ("environment", _env((*sc.environment, ("NGINX_ENVSUBST_FILTER", "PROXY_TOKEN")))),
            ("ports", seq([f"{r.soak_port}:{r.soak_port}" for r in self.rd.replicas])),
            ("volumes", seq(["certs:/etc/nginx/certs:ro"])),
            ("configs", seq([cmap(("source", "glm53_soak_nginx_conf"),
                                  ("target", "/etc/nginx/templates/default.conf.template"))])),
            ("labels", self.sidecar_labels("glm53-soak-relay", "verification")),
            ("logging", self.logging),
        )

    def dcgm(self) -> CommentedMap:
        sc = self._sidecar("dcgm-glm53")
        mount = cmap(("source", "dcgm_h200_metrics"), ("target", DCGM_CSV), ("mode", 0o444))
        mount.yaml_add_eol_comment("0444", "mode")
        labels = self.sidecar_labels("dcgm-glm53", "gpu-metrics",
                                     [("model_path", self.rd.checkpoint.repository)],
                                     scrape=("dcgm", otel.DCGM_PORT))
        return cmap(
            ("container_name", "dcgm-glm53"),
            ("image", sc.image),
            ("restart", "unless-stopped"),
            ("mem_limit", SIDECAR_MEMORY["dcgm-glm53"]),
            ("cap_add", seq(["SYS_ADMIN"], flow=True)),
            ("command", seq(["-f", DCGM_CSV])),
            *((("environment", _env(sc.environment)),) if sc.environment else ()),
            ("deploy", _gpu_reservation(self.rd.gpus)),
            ("configs", seq([mount])),
            ("labels", labels),
            ("logging", self.logging),
        )

    def otelcol(self) -> CommentedMap:
        sc = self._sidecar("otelcol-contrib")
        return cmap(
            ("container_name", "otelcol-contrib"),
            ("image", sc.image),
            ("restart", "unless-stopped"),
            ("mem_limit", "768m"),
            # Reads other containers' log files under /var/lib/docker: uid 0 owns them and the
            # storage volume, so owner permissions suffice and every capability is dropped.
            ("user", "0:0"),
            ("cap_drop", seq(["ALL"], flow=True)),
            ("read_only", True),
            ("security_opt", seq(["no-new-privileges:true"], flow=True)),
            ("command", seq([f"--config={otel.CONFIG_PATH}"])),
            ("environment", _env(sc.environment)),
            ("volumes", seq(["/var/lib/docker/containers:/var/lib/docker/containers:ro",
                             f"otelcol_app_storage:{otel.STORAGE_DIR}"])),
            ("configs", seq([cmap(("source", "otelcol_app_config"),
                                  ("target", otel.CONFIG_PATH))])),
            ("labels", self.sidecar_labels("otelcol-contrib", "telemetry")),
            ("logging", self.logging),
        )

    # --- configs ------------------------------------------------------------------------------

    def configs(self) -> CommentedMap:
        port = str(self.common.engine.port)
        routing = self.common.routing
        extra = ""
        names = routing.server_name
        if self.info.long_tier:
            names += " " + routing.long_server_name
            extra = assets.render("nginx-long-tier.conf.in", PROXY_SERVICE=PROXY,
                                  PROXY_PORT=str(PROXY_PORT), LONG_MODEL_NAME=routing.long_model_name)
        nginx_conf = assets.render("nginx.conf.in", PROXY_SERVICE=PROXY, PROXY_PORT=str(PROXY_PORT),
                                   SERVER_NAMES=names, EXTRA_SERVERS=extra)
        servers = "".join(assets.render("soak-relay-server.conf.in", INDEX=str(r.row.index),
                                        PORT=str(r.soak_port), SERVICE=r.service,
                                        ENGINE_PORT=port)
                          for r in self.rd.replicas)
        relay_conf = assets.render("soak-relay.conf.in", SERVERS=servers)
        return cmap(
            ("nginx_conf", cmap(("content", block(nginx_conf.rstrip("\n") + "\n")))),
            ("registrar_script", cmap(("content", block(assets.read("register.sh"))))),
            ("glm53_soak_nginx_conf", cmap(("content", block(relay_conf)))),
            ("perception_check", cmap(("content", block(assets.read("perception_check.py"))))),
            ("dcgm_h200_metrics", cmap(("content", block(assets.read("dcgm-h200.csv"))))),
            ("otelcol_app_config", cmap(("content", block(
                otel.render(self.rd, self.scrape_targets))))),
        )


def document(rd: ResolvedDeployment) -> CommentedMap:
    return _Builder(rd).build()
