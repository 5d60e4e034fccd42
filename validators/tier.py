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
    shm_size: str | None  # None: not set (ipc: host shares the host's /dev/shm)
    volumes: tuple[tuple[str, str], ...]  # (volume source, container target)


@dataclass(frozen=True)
class HealthPolicy:
    engine_path: str  # what an engine's healthcheck must request
    proxy_timeout_s: float  # the inference proxy's health-probe timeout; an engine's must be shorter
    max_interval_s: float  # any healthcheck: a longer interval notices a dead service too late
    max_timeout_s: float


@dataclass(frozen=True)
class OffloadMarker:
    """`config_variant` carries `marker` exactly when the image's release carries every patch
    that `series` declares itself (read from patches/<series>/series.json)."""

    marker: str
    series: str


@dataclass(frozen=True)
class Tier:
    name: str
    inventory: HostInventory
    engine: EngineRuntime
    health: HealthPolicy
    offload: OffloadMarker


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
        shm_size=None,
        volumes=(("huggingface_cache", "/root/.cache/huggingface"),
                 ("kernel_cache", "/root/.cache/kernels")),
    ),
    health=HealthPolicy(engine_path="/health", proxy_timeout_s=3.0, max_interval_s=60.0,
                        max_timeout_s=30.0),
    offload=OffloadMarker(marker="offloop-v3", series="v3"),
)

TIERS = {t.name: t for t in (GLM53_H200,)}
