"""The GLM-5.3 production contracts, one per generated compose file, declared independently of the
generator.

The generator writes the compose files from its variant tables; these tables are the second,
separate statement of what production must run. A change that is meant must be made in both
places, so a change that is not meant cannot pass silently. Image digests are not typed here:
each replica names the recipe whose release record (recipes/releases/<recipe>.json) gives its
digest. A file binds its contract by its `nearai.otel.deployment` label (CONTRACTS).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from pins import table as pin_table


@dataclass(frozen=True)
class ReplicaContract:
    index: int
    name: str
    recipe: str  # release record that pins the image
    device_ids: tuple[str, ...]
    chunk: int
    pdi: int
    dist_init: str
    qsplit: bool
    hicache_budget: str | None  # SGLANG_HICACHE_RAM_BUDGET (host-overridable); None: no HiCache
    # The stall dump's per-replica kill switch (v3 releases only), host-overridable.
    stall_dump_secs: str | None = None


@dataclass(frozen=True)
class LongTierOverlay:
    """What the long-context tier adds to the file it derives from, and nothing else may differ:
    the `:8001` discovery stub (its nginx server block and port mapping), the long server name on
    the TLS listener, and the registrar's long-tier settings."""

    nginx_listen: str
    port_mapping: str
    server_name: str
    registrar_env: tuple[str, ...]


@dataclass(frozen=True)
class FileContract:
    """What one generated file must contain; see README for the rule list."""

    deployment: str  # the file's `nearai.otel.deployment` label: which file this contract binds
    services: tuple[str, ...]
    replicas: tuple[ReplicaContract, ...]
    argv_template: str  # placeholders CHUNK, PDI, DIST_INIT
    env_template: Mapping[str, str]  # placeholders HICACHE_BUDGET, QSPLIT
    proxy: str
    backend_urls_var: str
    forbidden_env: tuple[str, ...]
    # Dotted paths that may legitimately differ from the file this one derives from, each with
    # the reason; everything else outside the engines must be equal.
    derived_differences: Mapping[str, str] = field(default_factory=dict)
    overlay: LongTierOverlay | None = None
    # The compose file (by name) this one derives from: outside the engines and the overlay
    # the two must be equal (whole-file rule). None: a file of its own.
    source: str | None = None

    def replica(self, name: str) -> ReplicaContract | None:
        return next((r for r in self.replicas if r.name == name), None)

    def argv(self, replica: ReplicaContract) -> list[str]:
        text = (self.argv_template.replace("CHUNK", str(replica.chunk))
                .replace("PDI", str(replica.pdi)).replace("DIST_INIT", replica.dist_init))
        # Hub revisions are pins (pins/repository_locations.bzl), named here, never typed.
        pins = pin_table.load()
        text = re.sub(r"PIN:([a-z0-9_]+)", lambda m: pins.pins[m.group(1)].revision, text)
        return shlex.split(text)

    def environment(self, replica: ReplicaContract) -> dict[str, str]:
        env = dict(self.env_template)
        if replica.hicache_budget is not None:
            env["SGLANG_HICACHE_RAM_BUDGET"] = replica.hicache_budget
        if replica.qsplit:
            env["SGLANG_DSA_INDEXER_QSPLIT"] = "1"
        if replica.stall_dump_secs is not None:
            env["SGLANG_EVENT_LOOP_STALL_DUMP_SECS"] = replica.stall_dump_secs
        return env


# Admission-reserve knobs that are not rank-deterministic (MIN_WAIT_S crashed the engine) or are
# debug-only: no service may set them.
FORBIDDEN_ENV = (
    "SGLANG_ADMISSION_RESERVE_MIN_WAIT_S",
    "SGLANG_ADMISSION_RESERVE_MIN_ITERS",
    "SGLANG_ADMISSION_RESERVE_FIT",
    "SGLANG_ADMISSION_RESERVE_DEBUG",
)

# Checkpoint and chat-template revisions are the pin table rows PIN:<name> names. Every file
# runs the same argv around its checkpoint; HiCache and the flags of one file follow it.
SHARED_ARGV = """
--served-model-name z-ai/glm-5.3-flash
--tp-size 4
--ep-size 4
--mem-fraction-static 0.80
--max-running-requests 32
--max-queued-requests 8
--enable-priority-scheduling
--disable-priority-preemption
--chunked-prefill-size CHUNK
--prefill-decode-interval PDI
--cuda-graph-max-bs-decode 32
--dsa-prefill-backend tilelang
--dsa-decode-backend tilelang
--kv-cache-dtype bfloat16
--speculative-algorithm EAGLE
--speculative-num-steps 5
--speculative-eagle-topk 1
--speculative-num-draft-tokens 6
--speculative-adaptive
--reasoning-parser glm45
--enable-strict-thinking
--grammar-backend xgrammar
--tool-call-parser glm47
--chat-template /root/.cache/huggingface/hub/models--zai-org--GLM-5.3-Flash/snapshots/PIN:hf_glm53_chat_template/chat_template.jinja
--context-length 1048576
--dist-init-addr DIST_INIT
--watchdog-timeout 1800
--host 0.0.0.0
--port 8000
--enable-metrics
--enable-cache-report
--log-requests-level 0
--disable-fast-image-processor
--limit-mm-data-per-request '{"image": 64}'
"""

W4AFP8_CHECKPOINT = """
sglang serve
--model-path graphistry/GLM-5.3-Flash-W4AFP8
--revision PIN:hf_glm53_flash_w4afp8
"""

FP8_CHECKPOINT = """
sglang serve
--model-path zai-org/GLM-5.3-Flash
--revision PIN:hf_glm53_flash_fp8
"""

W4AFP8_LONG_CONTEXT_ARGV = W4AFP8_CHECKPOINT + SHARED_ARGV + """
--enable-hierarchical-cache
--hicache-write-policy write_through
--hicache-io-backend direct
--hicache-mem-layout page_first_direct
--max-prefill-tokens 32768
"""

W4AFP8_ARGV = W4AFP8_CHECKPOINT + SHARED_ARGV + """
--max-prefill-tokens 32768
"""

FP8_ARGV = FP8_CHECKPOINT + SHARED_ARGV + """
--moe-runner-backend deep_gemm
"""

BASE_ENV = MappingProxyType({
    "HF_TOKEN": "${HUGGING_FACE_HUB_TOKEN:?HUGGING_FACE_HUB_TOKEN must be set}",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "DO_NOT_TRACK": "1",
    "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    "OPENBLAS_L2_SIZE": "2097152",
    "NCCL_DEBUG": "WARN",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "TORCHINDUCTOR_CACHE_DIR": "/root/.cache/kernels/inductor",
    "TRITON_CACHE_DIR": "/root/.cache/kernels/triton",
    "TILELANG_CACHE_DIR": "/root/.cache/tilelang",
    "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "0",
    "SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE": "1",
})

W4AFP8_LONG_CONTEXT_ENV = MappingProxyType({
    **BASE_ENV,
    "SGLANG_HICACHE_CUDA_HOST_MEMORY": "${GLM53_HICACHE_CUDA_HOST_MEMORY:-1}",
    "SGLANG_HICACHE_POOLED_TRANSFERS": "1",
    "SGLANG_HICACHE_STAGING_PAGES": "64",
})

# The base files keep the production base image's admission reserve (the long-context tier
# disables it).
ADMISSION_RESERVE_ENV = MappingProxyType({
    **BASE_ENV,
    "SGLANG_CHUNKED_PREFILL_ADMISSION_RESERVE": "4096",
    "SGLANG_ADMISSION_RESERVE_MAX_FRACTION": "0.75",
})

SERVICES = ("model-downloader", "hf-cleanup", "nginx", "model-proxy-registrar", "proxy-glm53",
            "ENGINE1", "ENGINE2", "glm53-perception-check", "glm53-soak-relay", "dcgm-glm53",
            "otelcol-contrib")


def _services(prefix: str) -> tuple[str, ...]:
    return tuple(s.replace("ENGINE", prefix) for s in SERVICES)

REPLICA_PREFIX = "model-sg-glm53-w4afp8-tp4-r"
FP8_REPLICA_PREFIX = "model-sg-glm53-fp8-tp4-r"

# The file the long-context file derives from (whole-file rule), by its compose file name.
W4AFP8_LONG_CONTEXT_SOURCE = "GLM-5.3-Flash-SGL-TP4-W4AFP8.yaml"

W4AFP8_LONG_CONTEXT = FileContract(
    deployment="glm53-flash-sgl-tp4-w4afp8-long-context",
    services=_services(REPLICA_PREFIX),
    replicas=(
        ReplicaContract(1, f"{REPLICA_PREFIX}1", "//recipes:glm53_v2", ("0", "1", "2", "3"),
                        chunk=8192, pdi=1, dist_init="127.0.0.1:29510", qsplit=True,
                        hicache_budget="${GLM53_HICACHE_RAM_BUDGET:-406GiB}"),
        ReplicaContract(2, f"{REPLICA_PREFIX}2", "//recipes:glm53_v3", ("4", "5", "6", "7"),
                        chunk=8192, pdi=2, dist_init="127.0.0.1:29511", qsplit=True,
                        hicache_budget="${GLM53_R2_HICACHE_RAM_BUDGET:-650GiB}",
                        stall_dump_secs="${GLM53_R2_EVENT_LOOP_STALL_DUMP_SECS:-30}"),
    ),
    argv_template=W4AFP8_LONG_CONTEXT_ARGV,
    env_template=W4AFP8_LONG_CONTEXT_ENV,
    proxy="proxy-glm53",
    backend_urls_var="GLM53_BACKEND_URLS",
    forbidden_env=FORBIDDEN_ENV,
    derived_differences=MappingProxyType({}),
    overlay=LongTierOverlay(
        nginx_listen="8001",
        port_mapping="8001:8001",
        server_name="glm-5-3-flash-long.completions.near.ai",
        registrar_env=("LONG_HTTP_PORT", "LONG_MODEL_NAME", "LONG_SERVER_NAME", "LONG_TIER_ONLY"),
    ),
    source=W4AFP8_LONG_CONTEXT_SOURCE,
)


def _v1_replicas(prefix: str) -> tuple[ReplicaContract, ...]:
    """Two v1 replicas, chunk 4096, pdi 1, no split, no HiCache (the base files)."""
    return tuple(ReplicaContract(i, f"{prefix}{i}", "//recipes:glm53_v1", gpus, chunk=4096,
                                 pdi=1, dist_init=f"127.0.0.1:{29499 + i}", qsplit=False,
                                 hicache_budget=None)
                 for i, gpus in ((1, ("0", "1", "2", "3")), (2, ("4", "5", "6", "7"))))


W4AFP8 = FileContract(
    deployment="glm53-flash-sgl-tp4-w4afp8",
    services=_services(REPLICA_PREFIX),
    replicas=_v1_replicas(REPLICA_PREFIX),
    argv_template=W4AFP8_ARGV,
    env_template=ADMISSION_RESERVE_ENV,
    proxy="proxy-glm53",
    backend_urls_var="GLM53_BACKEND_URLS",
    forbidden_env=FORBIDDEN_ENV,
)

FP8 = FileContract(
    deployment="glm53-flash-sgl-tp4",
    services=_services(FP8_REPLICA_PREFIX),
    replicas=_v1_replicas(FP8_REPLICA_PREFIX),
    argv_template=FP8_ARGV,
    env_template=ADMISSION_RESERVE_ENV,
    proxy="proxy-glm53",
    backend_urls_var="GLM53_BACKEND_URLS",
    forbidden_env=FORBIDDEN_ENV,
)

# Deployment label -> its contract: every generated file binds one (check.py refuses a file
# whose deployment has none).
CONTRACTS: Mapping[str, FileContract] = MappingProxyType(
    {c.deployment: c for c in (W4AFP8_LONG_CONTEXT, W4AFP8, FP8)})
