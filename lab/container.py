"""Long-running lab containers, on the in-image runner's podman configuration.

tools/podman/podman_backend.py owns the configuration (project-owned CONTAINERS_CONF and
storage, runc, cgroupfs, explicit ulimits), the image pull and bounded podman commands
(`command`); this module only adds what the lab needs beyond its run-to-completion `run()`:
a detached container with a name and a label, a bounded wait, its logs, and removal by id, so
the caller can always clean up.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tools.podman import podman_backend
from tools.oci.ocilayout import Image
from tools.podman.spec import GIB, NOFILE, NPROC, Mount

LABEL = "glm53-engine.lab"


class ContainerError(Exception):
    """podman failed; the message carries its stderr."""


@dataclass(frozen=True)
class Container:
    id: str
    name: str


class Podman:
    def __init__(self, cache: Path) -> None:
        self.config = podman_backend.PodmanConfig(cache / "podman")

    def check(self) -> None:
        reason = podman_backend.unavailable_reason(self.config)
        if reason is not None:
            raise ContainerError(f"podman cannot run containers here: {reason}")

    def load(self, image: Image) -> str:
        """Pulls the layout into the project's storage (layers already there are skipped)."""
        try:
            return podman_backend.pull(self.config, image)
        except podman_backend.PodmanError as err:
            raise ContainerError(str(err)) from None

    def _podman(self, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
        try:
            return podman_backend.command(self.config, *args, timeout_s=timeout_s)
        except subprocess.TimeoutExpired:
            raise ContainerError(f"podman {' '.join(args[:2])} did not return within {timeout_s:.0f} s") from None

    def start(
        self,
        image_id: str,
        name: str,
        run_label: str,
        command: list[str],
        mounts: list[Mount],
        env: dict[str, str],
        memory_bytes: int = 12 * GIB,
        shm_bytes: int = 8 * GIB,
    ) -> Container:
        args = [
            "run", "--detach", "--pull=never",
            "--name", name,
            "--label", f"{LABEL}={run_label}",
            "--network=none",
            "--init",  # catatonit as PID 1 reaps the server's orphaned children
            f"--memory={memory_bytes}",
            f"--shm-size={shm_bytes}",
            "--ulimit", f"nofile={NOFILE}:{NOFILE}",
            "--ulimit", f"nproc={NPROC}:{NPROC}",
            "--security-opt", "label=disable",
            # py-spy reads the server's memory (process_vm_readv) from a sibling process.
            "--cap-add", "SYS_PTRACE",
            # The session runs below the servers' priority (--client-nice) and starts them at 0.
            "--cap-add", "SYS_NICE",
        ]
        for key, value in sorted(env.items()):
            args += ["--env", f"{key}={value}"]
        for mount in mounts:
            args += ["--volume", f"{os.path.realpath(mount.host)}:{mount.container}:{'ro' if mount.read_only else 'rw'}"]
        done = self._podman(*args, image_id, *command)
        if done.returncode != 0:
            raise ContainerError(f"podman run {name} failed:\n{done.stderr.strip()}")
        return Container(id=done.stdout.strip().splitlines()[-1], name=name)

    def wait(self, container: Container, timeout_s: float) -> int | None:
        """The container's exit code, or None if it still runs after timeout_s."""
        try:
            done = podman_backend.command(self.config, "wait", container.id, timeout_s=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        if done.returncode != 0:
            raise ContainerError(f"podman wait {container.name} failed:\n{done.stderr.strip()}")
        return int(done.stdout.strip().splitlines()[-1])

    def logs(self, container: Container) -> str:
        done = self._podman("logs", container.id)
        return done.stdout + done.stderr

    def remove(self, container: Container) -> None:
        """Kills and removes the container; a container already gone is fine."""
        done = self._podman("rm", "--force", "--time", "0", "--ignore", container.id)
        if done.returncode != 0:
            raise ContainerError(f"podman rm {container.name} failed:\n{done.stderr.strip()}")

    def ids_with_label(self, run_label: str) -> list[str]:
        done = self._podman("ps", "--all", "--quiet", "--no-trunc", "--filter", f"label={LABEL}={run_label}")
        if done.returncode != 0:
            raise ContainerError(f"podman ps failed:\n{done.stderr.strip()}")
        return done.stdout.split()

