"""The deployment tier's runtime table, stated independently of the generator.

The generator's tables say what to write; this table says what an H200 engine host must run.
A meant change is made in both places, so an edit of the generator alone cannot pass.
Durations are seconds (Compose prints them normalized, e.g. `5m0s`).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping


@dataclass(frozen=True)
class HostInventory:
    """The GPUs one host has; a device id outside 0..gpus-1 does not exist."""

    model: str
    gpus: int

    def ids(self) -> tuple[str, ...]:
        return tuple(str(i) for i in range(self.gpus))


@dataclass(frozen=True)
class EngineRuntime:
    """Runtime facts every engine replica shares (compared in Compose's canonical form)."""

    ipc: str
    runtime: str
    init: bool
    restart: str
    stop_grace_period_s: float
    ulimits: Mapping[str, Any]
    volumes: tuple[tuple[str, str], ...]  # (volume source, container target)


@dataclass(frozen=True)
class HealthPolicy:
    engine_path: str  # what an engine's healthcheck must request
    proxy_timeout_s: float  # the inference proxy's health-probe timeout; an engine's must be shorter
    max_interval_s: float  # any healthcheck: a longer interval notices a dead service too late
    max_timeout_s: float
    # The proxy drops a replica after this many consecutive missed probes: Docker's verdict
    # (which the registrar's start order and the rollout read) takes as many misses, no more.
    proxy_missed_probes: int = 3
    # interval x retries: how long Docker may keep calling a dead engine healthy.
    engine_max_detect_s: float = 30.0
    # The documented cold start (reference system: up to about 50 min); an engine's
    # start_period must cover it, or Docker calls a loading replica unhealthy.
    engine_cold_start_s: float = 3000.0


@dataclass(frozen=True)
class OffloadMarker:
    """`config_variant` carries `marker` exactly when the image's release carries every patch
    that `series` declares itself (read from patches/<series>/series.json)."""

    marker: str
    series: str


@dataclass(frozen=True)
class Announced:
    """A port the registrar announces to the model-proxy peers (an environment variable)."""

    variable: str
    tls: bool  # the nginx listener behind the published port terminates TLS


@dataclass(frozen=True)
class SidecarClass:
    """What one kind of non-engine service runs, compared with Compose's canonical model.

    A service is of a class by name; a service that is neither an engine nor named by a class
    fails, so a new sidecar is stated here before it ships.
    """

    name: str
    services: tuple[str, ...]
    pin: str  # row of pins/repository_locations.bzl its image must be
    restart: str
    healthcheck: bool  # has one (an exact statement: gaining or losing one is a change)
    memory: str  # mem_limit, e.g. "1g"
    user: str | None = None  # None: the image's own user
    privileged: bool = False
    privileged_reason: str = ""  # required when privileged
    cap_add: tuple[str, ...] = ()
    cap_drop: tuple[str, ...] = ()
    read_only: bool = False
    security_opt: tuple[str, ...] = ()
    optional_env: tuple[str, ...] = ()  # `${VAR:-…}` in the file: the host may leave them unset
    listens: tuple[int, ...] = ()  # ports its image serves on (nginx: read from its configs)
    monitors_all_gpus: bool = False  # reserves every GPU an engine reserves (DCGM)
    announces: tuple[Announced, ...] = ()  # the registrar's announced ports


@dataclass(frozen=True)
class Tier:
    name: str
    inventory: HostInventory
    engine: EngineRuntime
    health: HealthPolicy
    offload: OffloadMarker
    sidecars: tuple[SidecarClass, ...] = ()

    def sidecar_class(self, service: str) -> SidecarClass | None:
        return next((c for c in self.sidecars if service in c.services), None)


GLM53_H200 = Tier(
    name="glm53-h200",
    inventory=HostInventory(model="H200", gpus=8),
    engine=EngineRuntime(
        ipc="host",
        runtime="nvidia",
        init=True,
        restart="unless-stopped",
        stop_grace_period_s=300.0,
        ulimits=MappingProxyType({"memlock": -1, "nofile": {"soft": 65535, "hard": 65535}}),
        volumes=(("huggingface_cache", "/root/.cache/huggingface"),
                 ("kernel_cache", "/root/.cache/kernels")),
    ),
    health=HealthPolicy(engine_path="/health", proxy_timeout_s=3.0, max_interval_s=60.0,
                        max_timeout_s=30.0),
    offload=OffloadMarker(marker="offloop-v3", series="v3"),
    sidecars=(
        SidecarClass("downloader", ("model-downloader",), pin="uv", restart="no",
                     healthcheck=False, memory="8g"),
        SidecarClass("maintenance", ("hf-cleanup",), pin="alpine", restart="no",
                     healthcheck=False, memory="256m"),
        SidecarClass("ingress", ("nginx",), pin="nginx", restart="unless-stopped",
                     healthcheck=False, memory="1g"),
        SidecarClass("registrar", ("model-proxy-registrar",), pin="curl",
                     restart="unless-stopped", healthcheck=True, memory="128m",
                     announces=(Announced("HTTP_PORT", tls=False), Announced("TLS_PORT", tls=True),
                                Announced("LONG_HTTP_PORT", tls=False))),
        SidecarClass("inference-proxy", ("proxy-glm53",), pin="vllm_proxy_rs",
                     restart="unless-stopped", healthcheck=False, memory="4g", privileged=True,
                     privileged_reason=(
                         "the reference deployment runs it privileged: it attests the host's "
                         "GPUs (USE_NV_ATTESTATION_SDK) and talks to dstack's TEE socket, and "
                         "which devices and capabilities that takes is not documented; narrowing "
                         "it needs a run on a GPU TEE host"),
                     listens=(8000,)),
        SidecarClass("perception-check", ("glm53-perception-check",), pin="uv", restart="no",
                     healthcheck=False, memory="512m", user="65534:65534", cap_drop=("ALL",),
                     read_only=True, security_opt=("no-new-privileges:true",)),
        SidecarClass("soak-relay", ("glm53-soak-relay",), pin="nginx", restart="unless-stopped",
                     healthcheck=False, memory="512m"),
        SidecarClass("gpu-metrics", ("dcgm-glm53",), pin="dcgm_exporter",
                     restart="unless-stopped", healthcheck=False, memory="1g",
                     cap_add=("SYS_ADMIN",), listens=(9400,), monitors_all_gpus=True),
        # uid 0 owns Docker's json logs and the storage volume: owner permissions suffice, so
        # no capability (CAP_DAC_OVERRIDE included) is needed. The ingest token is optional, as
        # in the reference system: a host without monitoring still starts.
        SidecarClass("collector", ("otelcol-contrib",), pin="otelcol_contrib",
                     restart="unless-stopped", healthcheck=False, memory="768m", user="0:0",
                     cap_drop=("ALL",), read_only=True, security_opt=("no-new-privileges:true",),
                     optional_env=("OTEL_GATEWAY_TOKEN",), listens=(4317, 4318)),
    ),
)

TIERS = {t.name: t for t in (GLM53_H200,)}
