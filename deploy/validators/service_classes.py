"""What every key of a service may be, per service class, over Compose's canonical model.

The other rules compare the keys they know; this table closes the list. Each class (the engine
replicas, and every row of the tier's sidecar table, by its row name) states every key its
services may have in `docker compose config --format json` output: what the value may be, that
another rule judges it (named), or that it must be absent and why. A key no entry names fails
(`service-keys`, deploy/validators/service_keys.py), so a new key is stated here, with its reason,
before it ships. Mapping-valued keys (healthcheck, logging, deploy) list their own keys; `*`
stands for any key of a free-form mapping.

Stated independently of the generator (deploy/compose_gen/), like deploy/validators/tier.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

ANY_KEY = "*"


@dataclass(frozen=True)
class Mount:
    """One entry of a service's canonical `volumes` list."""

    type: str  # volume, bind
    source: str
    target: str
    read_only: bool = False

    def render(self) -> str:
        return f"{self.type} {self.source}:{self.target}{':ro' if self.read_only else ''}"


@dataclass(frozen=True)
class Allow:
    """What one key may be. Exactly one of: `absent`, `values`, `judged_by`, `children`,
    `mounts`, or none of them (any value, for the reason given in `why`)."""

    rule: str  # the rule name a finding on this key starts with
    why: str  # the reason, printed with every finding on this key
    absent: bool = False
    required: bool = False
    values: tuple[Any, ...] | None = None  # the allowed canonical values
    judged_by: str = ""  # the rule that judges the value (deploy/validators/README.md)
    children: Mapping[str, "Allow"] | None = None  # the keys a mapping value may have
    mounts: tuple[Mount, ...] | None = None  # the allowed `volumes` entries


@dataclass(frozen=True)
class ServiceClass:
    name: str  # "engine", or the tier's SidecarClass.name
    keys: Mapping[str, Allow]
    # Other services of the file whose own class this class's depends_on names, with the
    # condition: what must have happened before this class starts (`start-order`).
    waits_for: Mapping[str, str] = field(default_factory=dict)


def _absent(rule: str, why: str) -> Allow:
    return Allow(rule, why, absent=True)


def _judged(rule: str, why: str = "") -> Allow:
    return Allow("service-keys", why or f"judged by the {rule} rule", judged_by=rule)


def _free(why: str) -> Allow:
    return Allow("service-keys", why)


def _exact(*values: Any, why: str, required: bool = False, rule: str = "service-keys") -> Allow:
    return Allow(rule, why, values=values, required=required)


def _mapping(keys: Mapping[str, Allow], why: str, required: bool = False,
             rule: str = "service-keys") -> Allow:
    return Allow(rule, why, required=required, children=MappingProxyType(dict(keys)))


def _mounts(*mounts: Mount, why: str, rule: str = "service-mounts") -> Allow:
    return Allow(rule, why, mounts=mounts)


ROTATION_WHY = ("an unrotated json-file log grows until the disk is full (the stall dump alone "
                "writes ~15 KB a minute during a stall)")

LOGGING = _mapping({
    "driver": _exact("json-file", "local", rule="log-rotation", required=True,
                     why="the collector tails Docker's json-file logs; both drivers rotate"),
    "options": _mapping({
        "max-size": Allow("log-rotation", ROTATION_WHY, required=True),
        "max-file": Allow("log-rotation", ROTATION_WHY, required=True),
        "labels": _judged("telemetry", "the labels the collector copies into each log record"),
    }, rule="log-rotation", required=True, why=ROTATION_WHY),
}, rule="log-rotation", required=True, why=ROTATION_WHY)

HEALTHCHECK_KEYS: Mapping[str, Allow] = MappingProxyType({
    **{key: _judged("engine-healthcheck/healthcheck-bounds/healthcheck-can-fail")
       for key in ("test", "interval", "timeout", "retries", "start_period")},
    "disable": _absent("service-keys", "a disabled healthcheck proves nothing; remove the "
                       "healthcheck instead (sidecar-class)"),
})

NO_HOST_NAMESPACE = {
    "network_mode": _absent("service-keys", (
        "services reach each other over the project network; host (or another container's) "
        "networking publishes every port the process opens, bypassing nginx and the proxy")),
    "pid": _absent("service-keys", (
        "a shared PID namespace lets the container see and signal the host's processes")),
    "stop_signal": _exact("SIGTERM", why=(
        "the engines drain and the registrar unregisters on SIGTERM within the grace period; "
        "SIGKILL (or any other signal) skips that")),
}

# Keys every class shares, and what they may be.
COMMON: Mapping[str, Allow] = MappingProxyType({
    "container_name": _free("the generator names containers after their service"),
    "image": _judged("engine-identity/sidecar-class"),
    "command": _judged("prod-contract/mounted-files/model-revision"),
    "entrypoint": _judged("mounted-files"),
    "environment": _judged("secret-by-value/prod-contract"),
    "labels": _judged("telemetry"),
    "logging": LOGGING,
    "networks": _exact({"default": None}, why=(
        "every service is on the project's default network only (dstack_default)")),
    "restart": _judged("engine-runtime/sidecar-class"),
    "configs": _judged("mounted-files/nginx/telemetry"),
    **NO_HOST_NAMESPACE,
})

SIDECAR_COMMON: Mapping[str, Allow] = MappingProxyType({
    **COMMON,
    "mem_limit": _judged("sidecar-memory"),
    "privileged": _judged("sidecar-class"),
    "user": _judged("sidecar-class"),
    "cap_add": _judged("sidecar-class"),
    "cap_drop": _judged("sidecar-class"),
    "read_only": _judged("sidecar-class"),
    "security_opt": _judged("sidecar-class"),
    "healthcheck": _mapping(HEALTHCHECK_KEYS, why=(
        "presence judged by sidecar-class, timings by healthcheck-bounds")),
})

ENGINE_KEYS: Mapping[str, Allow] = MappingProxyType({
    **COMMON,
    "ipc": _judged("engine-runtime"),
    "runtime": _judged("engine-runtime"),
    "init": _judged("engine-runtime"),
    "ulimits": _judged("engine-runtime"),
    "stop_grace_period": _judged("engine-runtime"),
    "volumes": _judged("engine-runtime/engine-shm"),
    "tmpfs": _judged("engine-shm"),
    "shm_size": _judged("engine-shm"),
    "ports": _judged("engine-no-host-port"),
    # Presence and meaning: engine-healthcheck (the proxy and the registrar act on it).
    "healthcheck": _mapping(HEALTHCHECK_KEYS, why="judged by meaning (engine-healthcheck)"),
    "depends_on": _judged("start-order"),
    "deploy": _mapping({
        "resources": _mapping({
            "reservations": _mapping({
                "devices": _judged("gpu-inventory/engine-parallelism/prod-contract"),
            }, why="the engine's GPUs"),
            "limits": _absent("service-keys", (
                "a cgroup limit on an engine (memory, CPUs) kills or throttles it mid-request: "
                "the HiCache host pool alone is 406-650 GiB")),
        }, why="GPU reservations only"),
        "placement": _exact({}, why="one host; Compose prints an empty placement"),
    }, required=True, why="an engine reserves its GPUs here"),
    "privileged": _absent("service-keys", (
        "an engine gets its GPUs from the device reservation and the nvidia runtime; "
        "privileged hands it every host device and capability, and no reason is recorded")),
    "mem_limit": _absent("service-keys", (
        "an engine's memory is the host's: the HiCache host pool (406-650 GiB) and pinned CUDA "
        "memory exceed any fixed limit, and the OOM killer would end a replica mid-request")),
    "memswap_limit": _absent("service-keys", "see mem_limit: engines have no memory limit"),
    "cpus": _absent("service-keys", "a CPU quota throttles the tokenizer and scheduler loops"),
    "user": _absent("service-keys", "the engine image runs as its own user (root in the "
                    "reference deployment); the caches are root's"),
    "cap_add": _absent("service-keys", "no capability beyond Docker's default is needed"),
    "devices": _absent("service-keys", "GPUs come from deploy.resources.reservations"),
})

CERTS_RO_NGINX = Mount("volume", "certs", "/etc/nginx/certs", read_only=True)
HF_CACHE = Mount("volume", "huggingface_cache", "/root/.cache/huggingface")

DOCKER_SOCKET_WHY = ("the Docker socket is root on the host: whoever can reach it can start a "
                     "privileged container")


def _sidecar(name: str, *, volumes: tuple[Mount, ...] = (), volumes_why: str = "",
             ports: Allow | None = None, profiles: tuple[str, ...] = (),
             depends_on: bool = False, extra: Mapping[str, Allow] | None = None,
             waits_for: Mapping[str, str] | None = None) -> ServiceClass:
    keys = dict(SIDECAR_COMMON)
    keys["volumes"] = _mounts(*volumes, why=volumes_why or "no host state is needed")
    keys["ports"] = ports or _absent("service-keys", (
        f"the {name} class serves nothing on the host; only nginx publishes ports"))
    keys["profiles"] = (_exact(list(profiles), why=f"the {name} class runs only on demand")
                        if profiles else _absent("service-keys", (
                            f"the {name} class starts with the host; a profile would leave it "
                            "stopped")))
    if depends_on:
        keys["depends_on"] = _judged("start-order")
    keys.update(extra or {})
    return ServiceClass(name, MappingProxyType(keys), MappingProxyType(dict(waits_for or {})))


PUBLISHED = _judged("host-port-unique/registrar-ports/public-routes")

CLASSES: Mapping[str, ServiceClass] = MappingProxyType({c.name: c for c in (
    ServiceClass("engine", ENGINE_KEYS, MappingProxyType({
        # A replica that starts before its weights are complete loads a partial checkpoint.
        "downloader": "service_completed_successfully"})),
    _sidecar("downloader", volumes=(HF_CACHE,), volumes_why="it fills the shared HF cache"),
    _sidecar("maintenance", volumes=(HF_CACHE,), profiles=("maintenance",),
             volumes_why="it removes models from the shared HF cache"),
    _sidecar("ingress", volumes=(CERTS_RO_NGINX,), ports=PUBLISHED, depends_on=True,
             volumes_why="the TLS certificate, read-only", waits_for={
                 "inference-proxy": "service_started"}),
    _sidecar("registrar", depends_on=True, extra={
        "stop_grace_period": _free("SIGTERM unregisters from every peer (15 s each) first")},
        waits_for={
            # Registering before the replicas serve announces a host that answers 502s.
            "engine": "service_healthy", "ingress": "service_started"}),
    _sidecar("inference-proxy", volumes=(
        Mount("bind", "/var/run/dstack.sock", "/var/run/dstack.sock"),
        Mount("volume", "certs", "/etc/certs", read_only=True)),
        volumes_why="dstack's TEE socket (attestation) and the certificate, read-only"),
    _sidecar("perception-check", profiles=("verification",), extra={
        "runtime": _exact("runc", why="it needs no GPU"),
        "cpus": _free("one CPU is plenty for a stdlib HTTP client")}),
    _sidecar("soak-relay", volumes=(CERTS_RO_NGINX,), ports=PUBLISHED, profiles=("verification",),
             volumes_why="the TLS certificate, read-only"),
    _sidecar("gpu-metrics", extra={
        "deploy": _mapping({
            "resources": _mapping({"reservations": _mapping({
                "devices": _judged("gpu-monitor/gpu-inventory")}, why="every GPU, read")},
                why="GPU reservations only"),
            "placement": _exact({}, why="one host; Compose prints an empty placement"),
        }, why="the monitor reads every GPU")}),
    _sidecar("collector", volumes=(
        Mount("bind", "/var/lib/docker/containers", "/var/lib/docker/containers",
              read_only=True),
        Mount("volume", "otelcol_app_storage", "/var/lib/otelcol/storage")),
        volumes_why=("Docker's json logs, read-only, and the collector's queue; "
                     + DOCKER_SOCKET_WHY + ", so it is never mounted"),
        ports=_absent("collector-exposure", (
            "the collector's OTLP receivers (4317/4318) take unauthenticated telemetry and its "
            "exporter holds the ingest token; the apps reach it on the project network, "
            "nothing on the host or beyond may"))),
)})

# DCGM fields the GPU monitor must export: the signals that say a GPU is failing (the rollout
# and the 24 h qualification watch Xid and ECC). A field list without them hides a dying GPU.
DCGM_REQUIRED_FIELDS: tuple[str, ...] = (
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
)


@dataclass(frozen=True)
class LogPrivacy:
    """nginx variables an access log format may not carry: credentials and bodies."""

    variables: tuple[str, ...]
    name_pattern: str  # any `$http_<header>` whose header name matches is a credential too
    why: str


NGINX_LOG_PRIVACY = LogPrivacy(
    variables=("$http_authorization", "$http_cookie", "$http_proxy_authorization",
               "$request_body", "$request_body_file", "$sent_http_set_cookie",
               "$cookie_", "$arg_token", "$arg_api_key"),
    name_pattern=r"token|secret|api_key|apikey|password|auth",
    why=("a bearer token in a log line is a credential for anyone who reads the logs (the "
         "collector ships them off the host); request bodies are users' prompts and images"),
)
