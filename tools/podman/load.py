"""Loads a built image into podman's storage, or writes it as a docker-archive tar (like
rules_oci's oci_load).

    bazel run //recipes:glm53_v3.load                          # into the project's podman storage
    bazel run //recipes:glm53_v3.load -- --format docker-archive --out glm53_v3.tar   # for `docker load`

The podman storage is the project's own (tools/podman: configuration files and graphroot under
~/.cache/glm53-engine/podman/, nothing machine-wide); the command that lists it is printed.
Both paths read a symlink view of the layout, so only what the destination stores is copied.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.oci.materialize import materialize_image
from tools.oci.ocilayout import LayoutError, parse_blob_args, read_layout
from tools.podman.podman_backend import PodmanConfig, PodmanError, pull
from tools.podman.spec import default_cache_root

PODMAN_TIMEOUT_S = 1800


def _user_path(path: Path) -> Path:
    """A relative path from the command line means: relative to where `bazel run` started."""
    if not path.is_absolute() and os.environ.get("BUILD_WORKING_DIRECTORY"):
        return Path(os.environ["BUILD_WORKING_DIRECTORY"]) / path
    return path


def to_docker_archive(view: Path, ref: str, tag: str, out: Path) -> None:
    if shutil.which("skopeo") is None:
        raise LayoutError("skopeo is not installed (tools/bazel installs it)")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    done = subprocess.run(["skopeo", "copy", "--quiet", f"oci:{view}:{ref}", f"docker-archive:{out}:{tag}"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if done.returncode != 0:
        raise LayoutError(f"skopeo copy to docker-archive:{out} failed:\n{done.stdout}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--image", type=Path, required=True, help="the image's (thin) layout directory")
    p.add_argument("--blob", action="append", default=[], metavar="DESCRIPTOR=BLOB")
    p.add_argument("--tag", required=True, help="repository:tag to give the image, e.g. localhost/glm53_v3:latest")
    p.add_argument("--format", choices=("podman", "docker-archive"), default="podman",
                   help="podman: the project's podman storage (default); docker-archive: a tar at --out")
    p.add_argument("--out", type=Path, help="the docker-archive tar to write")
    p.add_argument("--cache", type=Path, default=None, help="cache root holding podman/ (default: tools/podman's)")
    args = p.parse_args(argv)
    if args.format == "docker-archive" and not args.out:
        p.error("--format docker-archive needs --out FILE")
    if args.format == "podman" and args.out:
        p.error("--out is only for --format docker-archive")
    view_root = None
    try:
        image = read_layout(args.image, parse_blob_args(args.blob), require_blobs=True)
        if args.format == "docker-archive":
            view_root = Path(tempfile.mkdtemp(prefix="oci-load."))
            materialize_image(image, view_root / "view", "symlink")
            out = _user_path(args.out)
            to_docker_archive(view_root / "view", image.ref_name, args.tag, out)
            print(f"{out}: docker-archive of {image.manifest_digest} as {args.tag} (docker load -i {shlex.quote(str(out))})")
        else:
            config = PodmanConfig((args.cache or default_cache_root()) / "podman")
            image_id = pull(config, image, tag=args.tag, timeout_s=PODMAN_TIMEOUT_S)
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(config.environment().items())
                           if k.startswith("CONTAINERS_"))
            print(f"loaded {image.manifest_digest} as {args.tag} (image id {image_id[:12]}) into {config.root}")
            print(f"list it with: {env} podman images {args.tag}")
    except (LayoutError, PodmanError, OSError, subprocess.TimeoutExpired) as e:
        print(f"load.py: error: {e}", file=sys.stderr)
        return 1
    finally:
        if view_root is not None:
            shutil.rmtree(view_root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
