"""What an engine replica gets from the host: shared memory and GPUs, judged by what it runs.

  engine-shm          an engine's /dev/shm is the host's (ipc: host): no tmpfs, volume or
                      shm_size replaces it. SGLang passes multimodal features through /dev/shm
                      segments; one 64-image request writes ~8.8 GiB there, so a fixed-size
                      /dev/shm fails requests the engine accepts (--limit-mm-data-per-request)
  engine-parallelism  --tp-size x --pp-size (default 1) equals the number of GPUs the replica
                      reserves: TP 8 on 4 GPUs does not start, TP 4 on 8 leaves four idle
"""

from __future__ import annotations

from typing import Any, Mapping

from deploy.validators import topology
from deploy.validators.compose_doc import Finding, command_argv, join_path
from deploy.validators.model import Model
from deploy.validators.tier import Tier

SHM = "/dev/shm"
SHM_WHY = ("ipc: host gives the engine the host's /dev/shm; a 64-image request writes ~8.8 GiB "
           "of shared-memory segments there, so a fixed-size /dev/shm fails it")


def _tmpfs_targets(value: Any) -> list[tuple[int, str]]:
    items = [value] if isinstance(value, str) else list(value or [])
    return [(i, str(t).split(":", 1)[0].rstrip("/")) for i, t in enumerate(items)]


def shm_findings(model: Model, tier: Tier) -> list[Finding]:
    findings = []
    for name in topology.engines(model.as_compose_file()):
        service = model.services[name]
        base = join_path("services", name)
        if service.get("shm_size") not in (None, "", 0):
            findings.append(model.finding(join_path(base, "shm_size"), (
                f"engine-shm: shm_size {service['shm_size']} bytes sizes /dev/shm; {SHM_WHY} "
                f"(remove shm_size and keep ipc: {tier.engine.ipc})")))
        for i, target in _tmpfs_targets(service.get("tmpfs")):
            if target == SHM:
                findings.append(model.finding(join_path(base, "tmpfs", i), (
                    f"engine-shm: a tmpfs replaces /dev/shm; {SHM_WHY} (remove it)")))
        for i, volume in enumerate(service.get("volumes") or []):
            if isinstance(volume, Mapping) and str(volume.get("target")).rstrip("/") == SHM:
                size = ((volume.get("tmpfs") or {}).get("size") if isinstance(
                    volume.get("tmpfs"), Mapping) else None)
                what = f"a {volume.get('type')} mount" + (f" of {size} bytes" if size else "")
                findings.append(model.finding(join_path(base, "volumes", i), (
                    f"engine-shm: {what} replaces /dev/shm; {SHM_WHY} (remove it)")))
    return findings


def _int_option(argv: list[str], flags: tuple[str, ...], default: int) -> int | None:
    for i, token in enumerate(argv):
        name = token.split("=", 1)[0]
        if name not in flags:
            continue
        value = token.split("=", 1)[1] if "=" in token else (argv[i + 1] if i + 1 < len(argv)
                                                             else "")
        return int(value) if value.isdigit() else None
    return default


def parallelism_findings(model: Model, tier: Tier) -> list[Finding]:
    findings = []
    for name in topology.engines(model.as_compose_file()):
        service = model.services[name]
        argv = command_argv(service.get("command"))
        tp = _int_option(argv, ("--tp-size", "--tensor-parallel-size"), 1)
        pp = _int_option(argv, ("--pp-size", "--pipeline-parallel-size"), 1)
        gpus = topology.device_ids(service)
        where = join_path("services", name, "command")
        if tp is None or pp is None:
            findings.append(model.finding(where, (
                "engine-parallelism: --tp-size/--pp-size is not a number")))
        elif tp * pp != len(gpus):
            findings.append(model.finding(where, (
                f"engine-parallelism: --tp-size {tp} x --pp-size {pp} needs {tp * pp} GPUs, "
                f"but the replica reserves {len(gpus)} "
                f"(deploy.resources.reservations.devices: {', '.join(gpus) or 'none'}); make "
                "the sizes and the reservation agree")))
    return findings


RULES = (shm_findings, parallelism_findings)
