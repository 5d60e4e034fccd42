"""Builds one deterministic OCI layer (uncompressed tar) from a JSON layer spec.

The spec (written by the Bazel rules) maps host files and directories to paths in the image:

    {"created_by": "oci_layer //x:y",
     "files":    [{"src": "path/on/host", "dst": "usr/bin/tool", "mode": 493}],
     "trees":    [{"src": "dir/on/host", "dst": "usr/lib/python3/dist-packages"}],
     "dirs":     [{"dst": "tmp", "mode": 1023}],
     "symlinks": [{"dst": "usr/lib/ssl/certs", "target": "/etc/ssl/certs"}],
     "compile":  ["usr/lib/python3/dist-packages"]}

Everything is copied into a staging directory first (Bazel hands inputs over as symlinks),
Python sources under `compile` are byte-compiled there, and the staged tree is written as a
tar. Outputs: the tar, its descriptor JSON and optionally a contents JSON (path -> sha256 of
every regular file), used by structure tests and provenance.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.oci import ocitar
from tools.oci.python import pycompile
from tools.oci.ocilayout import LayerDescriptor, write_canonical


class SpecError(Exception):
    """The layer spec is malformed."""


@dataclass
class LayerSpec:
    created_by: str = ""
    files: list[dict[str, Any]] = field(default_factory=list)
    trees: list[dict[str, Any]] = field(default_factory=list)
    dirs: list[dict[str, Any]] = field(default_factory=list)
    symlinks: list[dict[str, Any]] = field(default_factory=list)
    compile: list[str] = field(default_factory=list)

    @staticmethod
    def load(path: Path) -> "LayerSpec":
        obj = json.loads(Path(path).read_text())
        unknown = set(obj) - {"created_by", "files", "trees", "dirs", "symlinks", "compile"}
        if unknown:
            raise SpecError(f"{path}: unknown keys {sorted(unknown)}")
        return LayerSpec(**obj)


def stage(spec: LayerSpec, root: Path) -> dict[str, int]:
    """Copies the spec's sources under root; returns explicit modes by layer path."""
    modes: dict[str, int] = {}
    for tree in spec.trees:
        rel = tree["dst"].strip("/")
        dst = root / ocitar.normalise_path(rel) if rel else root
        dst.mkdir(parents=True, exist_ok=True)
        shutil.copytree(tree["src"], dst, symlinks=False, dirs_exist_ok=True)
    for f in spec.files:
        rel = ocitar.normalise_path(f["dst"])
        dst = root / rel
        if dst.exists():
            raise SpecError(f"{rel}: given twice in the layer spec (a file and another file or tree)")
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f["src"], dst)
        if f.get("mode") is not None:
            modes[rel] = int(f["mode"])
    for d in spec.dirs:
        rel = ocitar.normalise_path(d["dst"])
        (root / rel).mkdir(parents=True, exist_ok=True)
        if d.get("mode") is not None:
            modes[rel] = int(d["mode"])
    for s in spec.symlinks:
        rel = ocitar.normalise_path(s["dst"])
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).symlink_to(s["target"])
    return modes


def contents(entries: list[ocitar.Entry]) -> dict[str, Any]:
    files = {}
    for e in entries:
        if e.kind == "file":
            assert e.src is not None
            files[e.path] = ocitar.hash_file(e.src).sha256
    links = {e.path: e.target for e in entries if e.kind == "symlink"}
    return {"files": files, "symlinks": links}


def build(spec: LayerSpec, out_tar: Path, out_descriptor: Path, out_contents: Path | None,
          workers: int = 1) -> LayerDescriptor:
    with tempfile.TemporaryDirectory(prefix="oci-layer-") as tmp:
        root = Path(tmp)
        modes = stage(spec, root)
        if spec.compile:
            pycompile.compile_tree(root, [p.strip("/") for p in spec.compile], workers=workers)
        entries = list(ocitar.walk_tree(root, modes=modes, file_mode=ocitar.FILE_MODE))
        digest = ocitar.write_layer(entries, out_tar)
        if out_contents is not None:
            write_canonical(out_contents, contents(entries))
    desc = LayerDescriptor.uncompressed(digest.digest, digest.size, spec.created_by)
    desc.write(out_descriptor)
    return desc


def describe(tar: Path, out_descriptor: Path, created_by: str) -> LayerDescriptor:
    """Descriptor of an existing uncompressed tar (one hashing pass)."""
    d = ocitar.hash_file(tar)
    desc = LayerDescriptor.uncompressed(d.digest, d.size, created_by)
    desc.write(out_descriptor)
    return desc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build a layer from a JSON spec")
    b.add_argument("--spec", type=Path, required=True)
    b.add_argument("--out", type=Path, required=True, help="layer tar to write")
    b.add_argument("--out-descriptor", type=Path, required=True)
    b.add_argument("--out-contents", type=Path, help="optional path -> sha256 JSON of the layer's files")
    b.add_argument("--workers", type=int, default=1, help="compileall processes (0 = one per CPU)")
    d = sub.add_parser("describe", help="descriptor JSON of an existing uncompressed tar")
    d.add_argument("--tar", type=Path, required=True)
    d.add_argument("--out-descriptor", type=Path, required=True)
    d.add_argument("--created-by", default="")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            build(LayerSpec.load(args.spec), args.out, args.out_descriptor, args.out_contents, args.workers)
        else:
            describe(args.tar, args.out_descriptor, args.created_by)
    except (SpecError, ocitar.LayerError, pycompile.CompileError, OSError) as e:
        print(f"layer.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
