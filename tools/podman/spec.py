"""What to run inside an image, independent of the backend (podman or bubblewrap)."""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass, field
from pathlib import Path

from tools.oci.ocilayout import Image

GIB = 1 << 30
# Limits the runtime must set explicitly on machines of this project's kind (no
# CAP_SYS_RESOURCE: podman's default nofile/nproc requests fail); see environment.md §3.2.
NOFILE = 20000
NPROC = 4096


@dataclass(frozen=True)
class Mount:
    host: Path
    container: str
    read_only: bool = True


@dataclass(frozen=True)
class RunSpec:
    image: Image
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added to / overriding the image's Env
    mounts: list[Mount] = field(default_factory=list)
    memory_bytes: int = 16 * GIB
    # /dev/shm: Docker/podman default to 64 MiB, too small for SGLang's multimodal segments
    # (a real-/dev/shm test of the v3 suite needs ~2.5 GiB). tmpfs, so it costs only what is used.
    shm_bytes: int = 4 * GIB
    workdir: str | None = None  # default: the image's WorkingDir


def default_cache_root() -> Path:
    """~/.cache/glm53-engine of the real user (Bazel tests may point HOME at a temp dir).

    GLM53_ENGINE_CACHE overrides it, e.g. for CI runners with a dedicated disk.
    """
    override = os.environ.get("GLM53_ENGINE_CACHE")
    if override:
        return Path(override)
    return Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "glm53-engine"
