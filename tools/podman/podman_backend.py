"""Runs a RunSpec with podman, configured only through files in a project-owned directory.

Nothing machine-wide is read or written: CONTAINERS_CONF, CONTAINERS_STORAGE_CONF and
CONTAINERS_REGISTRIES_CONF point at files this module writes under <cache>/podman/, the
storage (graphroot/runroot) lives there too, and pulls use a local signature policy. The
settings are the ones that work on machines of this project's kind (environment.md §3.2):
runc (crun fails on cgroup v1 hybrid hosts), cgroupfs, file events, explicit ulimits.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tools.oci.materialize import materialize_image
from tools.oci.ocilayout import Image
from tools.podman.spec import NOFILE, NPROC, RunSpec

_CONTAINERS_CONF = """\
# Written by tools/podman/podman_backend.py; regenerated on every run.
[containers]
default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]
netns = "none"
log_driver = "k8s-file"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{root}/events.log"
tmp_dir = "{root}/libpod-tmp"
image_copy_tmp_dir = "{root}/copy-tmp"

[network]
network_config_dir = "{root}/networks"
"""

_STORAGE_CONF = """\
# Written by tools/podman/podman_backend.py; regenerated on every run.
[storage]
driver = "{driver}"
graphroot = "{root}/graphroot"
runroot = "{root}/runroot"
"""

IMAGE_NAME = "localhost/glm53-engine/image"
_REGISTRIES_CONF = "# Written by tools/podman/podman_backend.py: no search registries.\n"
_POLICY = {"default": [{"type": "insecureAcceptAnything"}]}


class PodmanError(Exception):
    """podman is unusable here or a podman command failed."""


@dataclass(frozen=True)
class PodmanConfig:
    root: Path  # <cache>/podman
    driver: str = "overlay"

    @property
    def policy(self) -> Path:
        return self.root / "policy.json"

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["CONTAINERS_CONF"] = str(self.root / "containers.conf")
        env["CONTAINERS_STORAGE_CONF"] = str(self.root / "storage.conf")
        env["CONTAINERS_REGISTRIES_CONF"] = str(self.root / "registries.conf")
        return env

    def write(self) -> None:
        for sub in ("graphroot", "runroot", "libpod-tmp", "copy-tmp", "networks"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        files = {
            "containers.conf": _CONTAINERS_CONF.format(root=self.root, nofile=NOFILE, nproc=NPROC),
            "storage.conf": _STORAGE_CONF.format(root=self.root, driver=self.driver),
            "registries.conf": _REGISTRIES_CONF,
            "policy.json": json.dumps(_POLICY, indent=1) + "\n",
        }
        for name, text in files.items():
            path = self.root / name
            if not path.exists() or path.read_text() != text:
                tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
                tmp.write_text(text)
                tmp.replace(path)


def _podman(
    config: PodmanConfig, *args: str, capture: bool = True, timeout_s: float | None = None
) -> subprocess.CompletedProcess:
    # Global flags repeat the config so a user's own CONTAINERS_* overrides cannot change them.
    cmd = [
        "podman",
        "--runtime", "runc",
        "--cgroup-manager", "cgroupfs",
        "--events-backend", "file",
        *args,
    ]
    return subprocess.run(
        cmd,
        env=config.environment(),
        text=True,
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.PIPE if capture else None,
        timeout=timeout_s,
        check=False,
    )


def command(config: PodmanConfig, *args: str, timeout_s: float) -> subprocess.CompletedProcess:
    """One podman command with this module's configuration, output captured, bounded.

    For callers that manage containers themselves (lab/: detached containers, wait, rm);
    raises subprocess.TimeoutExpired after timeout_s.
    """
    config.write()
    return _podman(config, *args, timeout_s=timeout_s)


def unavailable_reason(config: PodmanConfig) -> str | None:
    """None when podman can run containers here, else why not (for the fallback message)."""
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install podman runc)"
    config.write()
    probe = _podman(config, "info", "--format", "{{.Host.OCIRuntime.Name}}")
    if probe.returncode != 0:
        return f"`podman info` failed: {probe.stderr.strip()[-500:]}"
    return None


def pull(config: PodmanConfig, image: Image, tag: str | None = None, timeout_s: float | None = None) -> str:
    """Loads the image into the project's storage; returns the image id (config digest hex).

    Pulls from a symlink view of the layout, so layer blobs kept outside it are found and
    nothing is copied but what podman stores (layers it already has are skipped). The image
    is named `tag`, default IMAGE_NAME:<manifest digest prefix>.
    """
    config.write()
    # podman names an image pulled from oci:<dir> after the directory's path, which must
    # then be a valid reference ([a-z0-9] components, no leading dots): no ~/.cache, no
    # Bazel temp dirs. So the view lives at /tmp/glm53-engine-<uid>/<digest>-<pid>.
    views = Path("/tmp") / f"glm53-engine-{os.getuid()}"
    views.mkdir(mode=0o700, exist_ok=True)
    view = views / f"{image.manifest_digest.split(':', 1)[1][:16]}-{os.getpid()}"
    shutil.rmtree(view, ignore_errors=True)
    try:
        materialize_image(image, view, "symlink")
        done = _podman(config, "pull", "-q", "--signature-policy", str(config.policy), f"oci:{view}",
                       timeout_s=timeout_s)
    finally:
        shutil.rmtree(view, ignore_errors=True)
    if done.returncode != 0:
        raise PodmanError(f"podman pull of {image.layout} failed:\n{done.stderr}")
    image_id = done.stdout.strip().splitlines()[-1]
    expected = image.config_digest.split(":", 1)[1]
    if image_id != expected:
        raise PodmanError(
            f"podman stored image {image_id}, but the layout's config is {expected};"
            " the layout changed while pulling, rebuild and retry"
        )
    # One stable name per image instead of one per temporary view path.
    tag = tag or f"{IMAGE_NAME}:{image.manifest_digest.split(':', 1)[1][:16]}"
    tagged = _podman(config, "tag", image_id, tag)
    if tagged.returncode != 0:
        raise PodmanError(f"podman tag {image_id} {tag} failed:\n{tagged.stderr}")
    _podman(config, "untag", image_id, f"localhost{view}:latest")
    return image_id


def prune(config: PodmanConfig) -> int:
    """Removes every image of the project's storage that no container uses (no --force: a
    test or lab run in progress keeps its image)."""
    config.write()
    return _podman(config, "rmi", "--all", capture=False).returncode


def run(config: PodmanConfig, spec: RunSpec) -> int:
    """Pulls and runs; streams the container's output; returns its exit code."""
    config.write()
    image_id = pull(config, spec.image)
    args = [
        "run", "--rm", "--pull=never",
        "--network=none",
        f"--memory={spec.memory_bytes}",
        f"--shm-size={spec.shm_bytes}",
        "--ulimit", f"nofile={NOFILE}:{NOFILE}",
        "--ulimit", f"nproc={NPROC}:{NPROC}",
        "--security-opt", "label=disable",
    ]
    if spec.workdir:
        args += ["--workdir", spec.workdir]
    for key, value in sorted(spec.env.items()):
        args += ["--env", f"{key}={value}"]
    for mount in spec.mounts:
        args += ["--volume", f"{os.path.realpath(mount.host)}:{mount.container}:{'ro' if mount.read_only else 'rw'}"]
    args += [image_id, *spec.command]
    return _podman(config, *args, capture=False).returncode
