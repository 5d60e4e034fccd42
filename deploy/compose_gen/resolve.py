"""Binds a deployment table to its release records and computes every derived value.

Derived values are computed here and only here: image references and `engine_image` labels
from release records, `config_variant` from the replica row and its release, service names,
argv and environment. The compose builders only place them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from deploy.releases import EVENT_LOOP_V3_PATCHES, ReleaseRecord
from tools.release.schema import QSPLIT_PATCH

from .errors import TableError
from .tables import Common, Deployment, Env, FilePin, HfPin, Option, PLACEHOLDER_RE, Replica

HF_CACHE = "/root/.cache/huggingface"
# Host ports of the verification relay: replica i is reachable on SOAK_PORT_BASE + i.
SOAK_PORT_BASE = 8007


@dataclass(frozen=True)
class ResolvedReplica:
    row: Replica
    service: str
    release: ReleaseRecord
    config_variant: str
    command: tuple[str, ...]
    environment: Env  # per-replica entries, added to the shared engine environment
    soak_port: int

    @property
    def image(self) -> str:
        return self.release.image

    @property
    def engine_image(self) -> str:
        return self.release.engine_image


@dataclass(frozen=True)
class ResolvedDeployment:
    common: Common
    deployment: Deployment
    checkpoint: HfPin
    downloads: tuple[HfPin, ...]
    engine_environment: Env
    replicas: tuple[ResolvedReplica, ...]

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(sorted(g for r in self.replicas for g in r.row.gpus))


def hf_cache_file(pin: FilePin) -> str:
    """Where `hf download` leaves a pinned file inside the shared Hugging Face cache."""
    org, name = pin.repository.split("/", 1)
    return f"{HF_CACHE}/hub/models--{org}--{name}/snapshots/{pin.revision}/{pin.path}"


def config_variant(deployment: Deployment, row: Replica, release: ReleaseRecord) -> str:
    """prefix-c<chunk>-[qsplit-][offloop-v3-][markers-]features-pdi<pdi>-suffix."""
    info = deployment.info
    parts = [info.variant_prefix, f"c{row.chunked_prefill_size}"]
    if row.dsa_qsplit:
        parts.append("qsplit")
    if release.has_event_loop_v3:
        parts.append("offloop-v3")
    parts += [*row.telemetry_markers, *info.variant_features,
              f"pdi{row.prefill_decode_interval}", info.variant_suffix]
    return "-".join(parts)


def _release_for(deployment: Deployment, row: Replica,
                 records: Mapping[str, ReleaseRecord]) -> ReleaseRecord:
    record = records.get(row.release)
    if record is None:
        raise TableError(deployment.path, "replicas", row.row,
                         f"release {row.release!r} has no release record bound to the generator "
                         f"(bound: {', '.join(sorted(records)) or 'none'}); add "
                         f"//recipes/releases:{row.release}.json to compose/BUILD.bazel")
    if row.dsa_qsplit and not record.has_qsplit:
        capable = ", ".join(sorted(n for n, r in records.items() if r.has_qsplit)) or "none bound"
        raise TableError(deployment.path, "replicas", row.row,
                         f"dsa_qsplit = true but release {row.release} ({record.source}) lacks the "
                         f"{QSPLIT_PATCH} patch, so SGLANG_DSA_INDEXER_QSPLIT=1 would do nothing; "
                         f"set dsa_qsplit = false or use a release that carries it ({capable})")
    return record


def _command(common: Common, deployment: Deployment, row: Replica) -> tuple[str, ...]:
    ckpt = common.models.checkpoints[deployment.info.checkpoint]
    values = {
        "model_path": ckpt.repository,
        "model_revision": ckpt.revision,
        "served_model_name": common.models.served_model_name,
        "chat_template": hf_cache_file(common.models.chat_template),
        "page_size": str(common.engine.page_size),
        "port": str(common.engine.port),
        "chunked_prefill_size": str(row.chunked_prefill_size),
        "prefill_decode_interval": str(row.prefill_decode_interval),
        "dist_init_addr": row.dist_init_addr,
    }
    options: list[Option] = list(common.engine.argv)
    if deployment.info.hicache:
        options += common.engine.hicache_argv
    options += deployment.engine.argv
    tokens = list(common.engine.command)
    for opt in options:
        tokens.append(opt.flag)
        if opt.value is not None:
            ph = PLACEHOLDER_RE.match(opt.value)
            tokens.append(values[ph.group("name")] if ph else opt.value)
    return tuple(tokens)


def kill_switch_variable(row: Replica, variable: str) -> str:
    """The host variable that overrides one replica's switch: GLM53_R<n>_<variable w/o SGLANG_>."""
    return f"GLM53_R{row.index}_{variable.removeprefix('SGLANG_')}"


def _replica_env(deployment: Deployment, row: Replica, release: ReleaseRecord) -> Env:
    env: list[tuple[str, str]] = []
    if row.hicache_ram_budget is not None:
        # Host-overridable per replica, defaulting to the table's budget. r1 keeps the
        # unnumbered variable the hosts' env maps already carry.
        var = "GLM53_HICACHE_RAM_BUDGET" if row.index == 1 else \
            f"GLM53_R{row.index}_HICACHE_RAM_BUDGET"
        env.append(("SGLANG_HICACHE_RAM_BUDGET", f"${{{var}:-{row.hicache_ram_budget}}}"))
    if row.dsa_qsplit:
        env.append(("SGLANG_DSA_INDEXER_QSPLIT", "1"))
    # A patch that is on by default and turned off by a variable (the stall dump) gets that
    # variable per replica, host-overridable, only where the replica's release carries it.
    for patch in release.patches:
        switch = patch.kill_switch
        if switch is not None:
            variable, default = switch
            env.append((variable, f"${{{kill_switch_variable(row, variable)}:-{default}}}"))
    return tuple(env)


def resolve(common: Common, deployment: Deployment,
            records: Mapping[str, ReleaseRecord]) -> ResolvedDeployment:
    info = deployment.info
    replicas = []
    for row in deployment.replicas:
        record = _release_for(deployment, row, records)
        replicas.append(ResolvedReplica(
            row=row,
            service=f"{info.service_prefix}{row.index}",
            release=record,
            config_variant=config_variant(deployment, row, record),
            command=_command(common, deployment, row),
            environment=_replica_env(deployment, row, record),
            soak_port=SOAK_PORT_BASE + row.index,
        ))
    env = list(common.engine.environment)
    if info.hicache:
        env += common.engine.hicache_environment
    env += deployment.engine.environment
    for r in replicas:
        for name, _ in r.environment:
            if name in dict(env):
                raise TableError(deployment.path, "engine.environment", name,
                                 f"{name} is derived per replica (from the replica rows and the "
                                 f"release's patch switches); remove it from the tables")
    checkpoints = common.models.checkpoints
    return ResolvedDeployment(
        common=common,
        deployment=deployment,
        checkpoint=checkpoints[info.checkpoint],
        downloads=tuple(checkpoints[k] for k in (info.checkpoint, *info.extra_downloads)),
        engine_environment=tuple(env),
        replicas=tuple(replicas),
    )


__all__ = ["EVENT_LOOP_V3_PATCHES", "ResolvedDeployment", "ResolvedReplica", "config_variant",
           "hf_cache_file", "resolve"]
