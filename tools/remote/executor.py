"""Runs one REAPI command inside the execution image its platform names, with bubblewrap.

The platform property `container-image` (`docker://REPO@sha256:<manifest digest>`, the pin
`rbe_image`) is resolved by digest to an image built in this graph (an `image_files` JSON of
tools/podman: layout + layer blobs), unpacked once per layer chain with tools/podman's rootfs
cache. The command then runs on that root, read-only, with the input root bind-mounted
read-write at EXECROOT as its working tree, a private /tmp, every namespace unshared (no
network but loopback) and only the command's environment. Nothing of the host's /usr is
visible: an action that needs a tool the image lacks fails here as it would on a real executor.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tools.podman import rootfs as rootfs_lib
from tools.oci.ocilayout import Image, LayoutError, parse_blob_args, read_layout
from tools.oci.reference import pinned_digest

CONTAINER_IMAGE = "container-image"
TRANSPORT = "docker://"
# Where the input root appears inside the image (under the action's private /tmp: the image's
# root is read-only, so the mount point must be on a writable mount).
EXECROOT = "/tmp/execroot"


class ImageError(Exception):
    """The action names no image, or one this worker does not have."""


class SandboxError(Exception):
    """bubblewrap could not start the command (a worker problem, not the action's exit code)."""


@dataclass(frozen=True)
class Result:
    image_digest: str
    exit_code: int
    stdout: bytes
    stderr: bytes


def load_image_files(path: Path, root: Path) -> Image:
    """The image of an `image_files` JSON whose paths are relative to `root` (a runfiles tree)."""
    try:
        data = json.loads(path.read_text())
        blobs = []
        for item in data["blobs"]:
            descriptor, _, blob = item.partition("=")
            blobs.append(f"{root / descriptor}={root / blob}")
        return read_layout(root / data["layout"], parse_blob_args(blobs), require_blobs=True)
    except (OSError, KeyError, ValueError, LayoutError) as err:
        raise ImageError(f"{path}: not a usable image_files JSON ({err}); build it with image_files() of tools/podman") from err


def image_digest(reference: str) -> str:
    """The manifest digest a `container-image` value pins (docker://REPO@sha256:<hex>)."""
    name = reference[len(TRANSPORT):] if reference.startswith(TRANSPORT) else reference
    digest = pinned_digest(name)
    if digest is None:
        raise ImageError(
            f"container-image {reference!r} is not pinned by digest: expected docker://HOST/REPO@sha256:<64 hex>"
            " (the pin `rbe_image` of pins/repository_locations.bzl)"
        )
    return digest


def platform_image(*platforms) -> str:
    """The `container-image` property of the first platform (Action's, then Command's) that has one."""
    for platform in platforms:
        values = [p.value for p in platform.properties if p.name == CONTAINER_IMAGE]
        if values:
            return values[0]
    raise ImageError(
        f"the action's platform has no {CONTAINER_IMAGE} property; this worker never runs an action on"
        " its host (build with --config=remote, whose platform //tools/remote:rbe_platform names the image)"
    )


class ImageSet:
    """The execution images this worker has, by manifest digest; each unpacked on first use."""

    def __init__(self, images: list[Image], cache_dir: Path) -> None:
        self.images = {image.manifest_digest: image for image in images}
        self.cache_dir = cache_dir
        self._roots: dict[str, Path] = {}
        self._lock = threading.Lock()

    def rootfs(self, reference: str) -> tuple[str, Path]:
        digest = image_digest(reference)
        image = self.images.get(digest)
        if image is None:
            raise ImageError(
                f"container-image {reference} is not an image this worker has (it has "
                f"{', '.join(sorted(self.images)) or 'none'}): build //tools/remote:exec_image and re-pin"
                " `rbe_image` to its digest (docs/remote-execution.md)"
            )
        with self._lock:  # one unpack per image, whatever the number of actions waiting for it
            if digest not in self._roots:
                self._roots[digest] = rootfs_lib.unpack(image, self.cache_dir)
        return digest, self._roots[digest]


def bwrap_argv(rootfs: Path, input_root: Path, tmp: Path, working_directory: str, env: dict[str, str],
               arguments: list[str], status_fd: int) -> list[str]:
    workdir = PurePosixPath(EXECROOT) / working_directory
    argv = [
        "bwrap",
        "--ro-bind", str(rootfs), "/",
        "--proc", "/proc",
        "--dev", "/dev",
        "--bind", str(tmp), "/tmp",
        "--bind", str(input_root), EXECROOT,
        "--unshare-all",
        "--die-with-parent",
        "--clearenv",
        # JSON lines: the command's exit code, only if bwrap got as far as running it.
        "--json-status-fd", str(status_fd),
    ]
    for key, value in sorted(env.items()):
        argv += ["--setenv", key, value]
    return argv + ["--chdir", str(workdir), "--", *arguments]


def run(images: ImageSet, reference: str, input_root: Path, tmp: Path, working_directory: str,
        env: dict[str, str], arguments: list[str], timeout: float | None) -> Result:
    """Runs `arguments` in the image `reference` names; `input_root` is the action's tree."""
    digest, rootfs = images.rootfs(reference)
    tmp.mkdir(parents=True, exist_ok=True)
    read_end, write_end = os.pipe()
    try:
        argv = bwrap_argv(rootfs, input_root, tmp, working_directory, env, arguments, write_end)
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(write_end,))
        os.close(write_end)
        write_end = -1
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()  # --die-with-parent takes the command down with bwrap
            proc.communicate()
            raise
        with os.fdopen(read_end, "rb") as status:
            read_end = -1
            reports = [json.loads(line) for line in status.read().splitlines() if line.strip()]
        # bwrap writes "exit-code" only for a command it started: none means its own setup
        # (a mount) or the exec (no such program in the image) failed.
        started = any("exit-code" in report for report in reports)
    finally:
        for fd in (read_end, write_end):
            if fd >= 0:
                os.close(fd)
    if not started:
        raise SandboxError(f"bwrap did not run {arguments[:1]} in {digest} (exit {proc.returncode}): "
                           f"{stderr.decode(errors='replace').strip()}")
    return Result(digest, proc.returncode, stdout, stderr)
