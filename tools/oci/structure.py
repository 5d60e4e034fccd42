"""Daemon-free structure test of an OCI image: config, labels, env and the merged filesystem.

Reads the image's layout directory and layer tars (headers only, plus the few files it hashes),
applies whiteouts the way a runtime does, and checks:
  * --expect-label / --expect-labels-file: labels present with these values;
  * --expect-env: env entries;
  * --expect-file / --expect-absent: paths in the merged filesystem;
  * --base-image: the image is base + extra layers and its org.opencontainers.image.base.digest
    label names the base's digest; with --expect-inherited also entrypoint, cmd, env, workdir
    and user are the base's;
  * --provenance (a patch chain's PROVENANCE.json) with --site/--recipe: every output file of
    the chain is at <site>/<path> and hashes to its after-hash, its unchecked .pyc comes from
    the same or a higher layer and was compiled from exactly that source, files the chain
    deletes are gone, and the recipe files are under /usr/share/glm53-engine/<recipe>/.
Every failure is listed; the exit status is 1 if there is any.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.oci.ocilayout import LayerDescriptor, LayoutError, env_list_to_dict, read_layout  # noqa: E402

PYC_TAG = "cpython-311"
RECIPE_FILES = ("series.json", "PROVENANCE", "PROVENANCE.json", "patches.json")


@dataclass(frozen=True)
class Node:
    layer: int  # index of the layer that last wrote the path
    kind: str  # "file" | "dir" | "symlink" | "other"
    member: str  # member name in that layer's tar


def _norm(name: str) -> str:
    return name.lstrip("./").rstrip("/") if name not in (".", "./") else ""


def merged_view(blobs: list[Path]) -> dict[str, Node]:
    """path -> Node of the merged filesystem, whiteouts applied (bottom layer first)."""
    view: dict[str, Node] = {}
    for index, blob in enumerate(blobs):
        with tarfile.open(blob, mode="r:") as tar:
            members = tar.getmembers()
        for m in members:
            path = _norm(m.name)
            parent, _, base = path.rpartition("/")
            if base == ".wh..wh..opq":
                prefix = parent + "/"
                for p in [p for p in view if p.startswith(prefix)]:
                    del view[p]
                continue
            if base.startswith(".wh."):
                gone = (parent + "/" if parent else "") + base[4:]
                for p in [p for p in view if p == gone or p.startswith(gone + "/")]:
                    del view[p]
                continue
            kind = "file" if m.isreg() else "dir" if m.isdir() else "symlink" if m.issym() else "other"
            if kind != "dir" and path in view and view[path].kind == "dir":
                for p in [p for p in view if p.startswith(path + "/")]:
                    del view[p]
            view[path] = Node(index, kind, m.name)
    return view


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


def check_chain(c: Checker, view: dict[str, Node], blobs: list[Path], provenance: dict, site: str, recipe: str) -> None:
    site = site.strip("/")
    outputs: dict[str, str] = provenance.get("outputs", {})
    c.check(bool(outputs), "the chain's PROVENANCE.json lists no output files")
    for rel, after in sorted(outputs.items()):
        path = f"{site}/{rel}"
        node = view.get(path)
        if node is None or node.kind != "file":
            c.check(False, f"/{path}: patched file missing from the image (chain output {rel})")
            continue
        data = read_member(blobs[node.layer], node.member)
        actual = hashlib.sha256(data).hexdigest()
        c.check(actual == after, f"/{path}: sha256 {actual}, but the chain's after-hash is {after}")
        if path.endswith(".py"):
            d, _, name = path.rpartition("/")
            pyc = f"{d}/__pycache__/{name[:-3]}.{PYC_TAG}.pyc"
            pnode = view.get(pyc)
            if pnode is None:
                continue  # no .pyc at all: the interpreter compiles the source; correct, just slower
            c.check(pnode.layer >= node.layer,
                    f"/{pyc} comes from layer {pnode.layer}, below the patched source's layer {node.layer}: "
                    "a stale bytecode file would shadow the patch")
            header = read_member(blobs[pnode.layer], pnode.member)[:16]
            flags = int.from_bytes(header[4:8], "little")
            if flags & 0b1:  # hash-based: bytes 8..16 are the source hash
                c.check(header[8:16] == importlib.util.source_hash(data),
                        f"/{pyc} was compiled from another source than /{path}")
    for rel in provenance.get("deleted", []):
        c.check(f"{site}/{rel}" not in view, f"/{site}/{rel}: the chain deletes it, but the image still has it")
    rdir = f"usr/share/glm53-engine/{recipe}"
    for name in RECIPE_FILES:
        c.check(view.get(f"{rdir}/{name}", Node(0, "", "")).kind == "file", f"/{rdir}/{name} missing")
    tests = [p for p in view if p.startswith(f"{rdir}/tests/") and p.endswith(".py")]
    c.check(bool(tests), f"/{rdir}/tests/ holds no test files")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--image", type=Path, required=True, help="the image's layout directory")
    p.add_argument("--blob", action="append", default=[], metavar="DESCRIPTOR=BLOB")
    p.add_argument("--base-image", type=Path, help="the image must extend this base and name its digest")
    p.add_argument("--expect-inherited", action="store_true",
                   help="with --base-image: Entrypoint, Cmd, Env, WorkingDir and User equal the base's")
    p.add_argument("--provenance", type=Path)
    p.add_argument("--site", default="/usr/lib/python3/dist-packages")
    p.add_argument("--recipe", default="")
    p.add_argument("--expect-label", action="append", default=[])
    p.add_argument("--expect-labels-file", type=Path, action="append", default=[])
    p.add_argument("--expect-env", action="append", default=[])
    p.add_argument("--expect-file", action="append", default=[])
    p.add_argument("--expect-absent", action="append", default=[])
    args = p.parse_args(argv)
    c = Checker()
    try:
        img = read_layout(args.image)
        cfg = img.config.get("config", {})
        labels = cfg.get("Labels") or {}
        env = env_list_to_dict(cfg.get("Env") or [])
        expected = dict(item.split("=", 1) for item in args.expect_label)
        for f in args.expect_labels_file:
            expected.update(dict(line.split("=", 1) for line in f.read_text().splitlines() if line.strip()))
        for key, value in sorted(expected.items()):
            c.check(labels.get(key) == value, f"label {key}: expected {value!r}, got {labels.get(key)!r}")
        for item in args.expect_env:
            key, _, value = item.partition("=")
            c.check(env.get(key) == value, f"env {key}: expected {value!r}, got {env.get(key)!r}")
        diff_ids = img.config.get("rootfs", {}).get("diff_ids", [])
        c.check(len(diff_ids) == len(img.manifest["layers"]), "config diff_ids and manifest layers differ in number")
        if args.base_image:
            base = read_layout(args.base_image)
            bcfg = base.config.get("config", {})
            n = len(base.manifest["layers"])
            c.check(img.manifest["layers"][:n] == base.manifest["layers"], "the image does not start with the base's layers")
            c.check(diff_ids[:n] == base.config["rootfs"]["diff_ids"], "the image's diff_ids do not start with the base's")
            inherited = ("Entrypoint", "Cmd", "Env", "WorkingDir", "User") if args.expect_inherited else ()
            for key in inherited:
                c.check(cfg.get(key) == bcfg.get(key), f"{key} not inherited from the base: {cfg.get(key)!r} != {bcfg.get(key)!r}")
            c.check(labels.get("org.opencontainers.image.base.digest") == base.manifest_digest,
                    f"label org.opencontainers.image.base.digest is {labels.get('org.opencontainers.image.base.digest')!r}, "
                    f"the base's digest is {base.manifest_digest}")
        blobs_by_digest = {}
        for item in args.blob:
            desc, _, blob = item.partition("=")
            blobs_by_digest[LayerDescriptor.load(Path(desc)).digest] = Path(blob)
        needs_fs = args.expect_file or args.expect_absent or args.provenance
        if needs_fs:
            blobs = []
            for layer in img.manifest["layers"]:
                blob = blobs_by_digest.get(layer["digest"])
                if blob is None:
                    raise LayoutError(f"no blob for layer {layer['digest']}: pass --blob for every layer")
                blobs.append(blob)
            view = merged_view(blobs)
            for path in args.expect_file:
                c.check(path.strip("/") in view, f"{path}: expected in the image, missing")
            for path in args.expect_absent:
                c.check(path.strip("/") not in view, f"{path}: expected absent, present")
            if args.provenance:
                check_chain(c, view, blobs, json.loads(args.provenance.read_text()), args.site, args.recipe)
    except (LayoutError, OSError, KeyError, ValueError, tarfile.TarError) as e:
        print(f"structure.py: error: {e}", file=sys.stderr)
        return 1
    for f in c.failures:
        print(f"FAIL: {f}")
    print(f"{img.ref_name} {img.manifest_digest}: {c.passed} checks passed, {len(c.failures)} failed")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
