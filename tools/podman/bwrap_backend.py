"""Runs a RunSpec with bubblewrap on the image's unpacked layers (the fallback to podman).

The rootfs is mounted read-only, with a tmpfs on /tmp and on $HOME (sglang writes ~/.cache
at import), all namespaces unshared (so no network but loopback), and the image's Env,
WorkingDir and the spec's extras applied. There is no cgroup here, so the memory cap is an
address-space rlimit (RLIMIT_AS), which is stricter than podman's cgroup cap on resident memory.
"""

from __future__ import annotations

import resource
import shutil
import subprocess
from pathlib import Path

from tools.podman import rootfs as rootfs_lib
from tools.podman.spec import NOFILE, NPROC, RunSpec


class BwrapError(Exception):
    """bubblewrap is unusable here."""


def unavailable_reason() -> str | None:
    if shutil.which("bwrap") is None:
        return "bwrap is not installed (apt-get install bubblewrap)"
    return None


def command(spec: RunSpec, root: Path) -> list[str]:
    env = spec.image.env
    env.update(spec.env)
    env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    env.setdefault("HOME", "/root")
    cmd = [
        "bwrap",
        "--ro-bind", str(root), "/",
        "--proc", "/proc",
        "--dev", "/dev",
        "--size", str(spec.shm_bytes), "--tmpfs", "/dev/shm",
        "--tmpfs", "/tmp",
        "--unshare-all",
        "--die-with-parent",
        "--clearenv",
    ]
    if env["HOME"] != "/tmp":
        cmd += ["--tmpfs", env["HOME"]]
    for mount in spec.mounts:
        cmd += ["--ro-bind" if mount.read_only else "--bind", str(mount.host), mount.container]
    for key, value in sorted(env.items()):
        cmd += ["--setenv", key, value]
    cmd += ["--chdir", spec.workdir or spec.image.working_dir]
    return cmd + ["--", *spec.command]


def _limits(memory_bytes: int):
    def apply() -> None:
        for which, value in (
            (resource.RLIMIT_AS, memory_bytes),
            (resource.RLIMIT_NOFILE, NOFILE),
            (resource.RLIMIT_NPROC, NPROC),
        ):
            hard = resource.getrlimit(which)[1]
            # Without CAP_SYS_RESOURCE a limit can only be lowered, never raised past `hard`.
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (value, value))

    return apply


def run(spec: RunSpec, cache_dir: Path) -> int:
    root = rootfs_lib.unpack(spec.image, cache_dir)
    return subprocess.run(command(spec, root), preexec_fn=_limits(spec.memory_bytes), check=False).returncode
