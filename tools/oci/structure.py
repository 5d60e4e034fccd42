"""Daemon-free structure test of an OCI image: config, labels, env and the merged filesystem.

Reads the image's layout directory and layer tars (headers only, plus the few files it hashes),
applies whiteouts the way a runtime does, and checks:
  * --expect-label / --expect-labels-file: labels present with these values;
  * --expect-env: env entries;
  * --expect-file / --expect-absent: paths in the merged filesystem;
  * --base-image: the image is base + extra layers and its org.opencontainers.image.base.digest
    label names the base's digest; with --expect-inherited also entrypoint, cmd, env, workdir
    and user are the base's.
Every failure is listed; the exit status is 1 if there is any. Other areas add their own
checks of the merged filesystem through run(args, extra) (tools/engine/structure.py).
"""

from __future__ import annotations

import argparse
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tools.oci import layerwalk
from tools.oci.ocilayout import LayoutError, parse_blob_args, read_layout


@dataclass(frozen=True)
class Node:
    layer: int  # index of the layer that last wrote the path
    kind: str  # "file" | "dir" | "symlink" | "other"
    member: str  # member name in that layer's tar


def _kind(member: tarfile.TarInfo) -> str:
    return "file" if member.isreg() else "dir" if member.isdir() else "symlink" if member.issym() else "other"


def merged_view(blobs: list[Path]) -> dict[str, Node]:
    """path -> Node of the merged filesystem, whiteouts applied (bottom layer first)."""
    view: layerwalk.MergedView[Node] = layerwalk.MergedView()
    for index, blob in enumerate(blobs):
        view.apply(layerwalk.read_changes(blob, str(blob)),
                   lambda change, index=index: Node(index, _kind(change.member), change.member.name))
    return view.paths


def read_member(blob: Path, member: str) -> bytes:
    with tarfile.open(blob, mode="r:") as tar:
        f = tar.extractfile(member)
        if f is None:
            raise LayoutError(f"{blob}: {member} is not a regular file")
        return f.read()


class Checker:
    def __init__(self) -> None:
        self.failures: list[str] = []
        self.passed = 0

    def check(self, ok: bool, message: str) -> None:
        if ok:
            self.passed += 1
        else:
            self.failures.append(message)


Extra = Callable[[Checker, "dict[str, Node]", "list[Path]"], None]


def build_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--image", type=Path, required=True, help="the image's layout directory")
    p.add_argument("--blob", action="append", default=[], metavar="DESCRIPTOR=BLOB")
    p.add_argument("--base-image", type=Path, help="the image must extend this base and name its digest")
    p.add_argument("--expect-inherited", action="store_true",
                   help="with --base-image: Entrypoint, Cmd, Env, WorkingDir and User equal the base's")
    p.add_argument("--expect-label", action="append", default=[])
    p.add_argument("--expect-labels-file", type=Path, action="append", default=[])
    p.add_argument("--expect-env", action="append", default=[])
    p.add_argument("--expect-file", action="append", default=[])
    p.add_argument("--expect-absent", action="append", default=[])
    return p


def run(args: argparse.Namespace, extra: Extra | None = None, program: str = "structure.py") -> int:
    """The checks of build_parser's arguments, then `extra(checker, view, blobs)` on the merged
    filesystem (a caller's own checks, e.g. tools/engine's patch chain)."""
    c = Checker()
    try:
        img = read_layout(args.image, parse_blob_args(args.blob))
        cfg = img.config.get("config", {})
        labels = img.labels
        env = img.env
        expected = dict(item.split("=", 1) for item in args.expect_label)
        for f in args.expect_labels_file:
            expected.update(dict(line.split("=", 1) for line in f.read_text().splitlines() if line.strip()))
        for key, value in sorted(expected.items()):
            c.check(labels.get(key) == value, f"label {key}: expected {value!r}, got {labels.get(key)!r}")
        for item in args.expect_env:
            key, _, value = item.partition("=")
            c.check(env.get(key) == value, f"env {key}: expected {value!r}, got {env.get(key)!r}")
        diff_ids = img.diff_ids
        c.check(len(diff_ids) == len(img.layers), "config diff_ids and manifest layers differ in number")
        if args.base_image:
            base = read_layout(args.base_image)
            bcfg = base.config.get("config", {})
            n = len(base.manifest["layers"])
            c.check(img.manifest["layers"][:n] == base.manifest["layers"], "the image does not start with the base's layers")
            c.check(diff_ids[:n] == base.diff_ids, "the image's diff_ids do not start with the base's")
            inherited = ("Entrypoint", "Cmd", "Env", "WorkingDir", "User") if args.expect_inherited else ()
            for key in inherited:
                c.check(cfg.get(key) == bcfg.get(key), f"{key} not inherited from the base: {cfg.get(key)!r} != {bcfg.get(key)!r}")
            c.check(labels.get("org.opencontainers.image.base.digest") == base.manifest_digest,
                    f"label org.opencontainers.image.base.digest is {labels.get('org.opencontainers.image.base.digest')!r}, "
                    f"the base's digest is {base.manifest_digest}")
        if args.expect_file or args.expect_absent or extra:
            missing = img.missing_layers()
            if missing:
                raise LayoutError(f"no blob for layer(s) {', '.join(missing)}: pass --blob for every layer")
            blobs = [layer.path for layer in img.layers]
            view = merged_view(blobs)
            for path in args.expect_file:
                c.check(path.strip("/") in view, f"{path}: expected in the image, missing")
            for path in args.expect_absent:
                c.check(path.strip("/") not in view, f"{path}: expected absent, present")
            if extra:
                extra(c, view, blobs)
    except (LayoutError, OSError, KeyError, ValueError, tarfile.TarError) as e:
        print(f"{program}: error: {e}", file=sys.stderr)
        return 1
    for f in c.failures:
        print(f"FAIL: {f}")
    print(f"{img.ref_name} {img.manifest_digest}: {c.passed} checks passed, {len(c.failures)} failed")
    return 1 if c.failures else 0


def main(argv: list[str] | None = None) -> int:
    return run(build_parser(__doc__).parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
