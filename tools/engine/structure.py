"""Structure test of an engine image: tools/oci/structure.py's checks plus the patch chain's.

With --provenance (a patch chain's PROVENANCE.json), --site and --recipe-dir: every output file of
the chain is at <site>/<path> and hashes to its after-hash, its unchecked .pyc comes from the
same or a higher layer and was compiled from exactly that source, files the chain deletes are
gone, and the recipe files are in --recipe-dir.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

from tools.engine.patch_pyc import PYC_TAG
from tools.oci import structure
from tools.oci.structure import Checker, Node

RECIPE_FILES = ("series.json", "PROVENANCE", "PROVENANCE.json", "patches.json")


def check_chain(c: Checker, view: dict[str, Node], blobs: list[Path], provenance: dict, site: str, recipe_dir: str) -> None:
    """The chain's outputs, their bytecode, its deletions and the recipe files in the merged view."""
    site = site.strip("/")
    outputs: dict[str, str] = provenance.get("outputs", {})
    c.check(bool(outputs), "the chain's PROVENANCE.json lists no output files")
    for rel, after in sorted(outputs.items()):
        path = f"{site}/{rel}"
        node = view.get(path)
        if node is None or node.kind != "file":
            c.check(False, f"/{path}: patched file missing from the image (chain output {rel})")
            continue
        data = structure.read_member(blobs[node.layer], node.member)
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
            header = structure.read_member(blobs[pnode.layer], pnode.member)[:16]
            flags = int.from_bytes(header[4:8], "little")
            if flags & 0b1:  # hash-based: bytes 8..16 are the source hash
                c.check(header[8:16] == importlib.util.source_hash(data),
                        f"/{pyc} was compiled from another source than /{path}")
    for rel in provenance.get("deleted", []):
        c.check(f"{site}/{rel}" not in view, f"/{site}/{rel}: the chain deletes it, but the image still has it")
    rdir = recipe_dir.strip("/")
    for name in RECIPE_FILES:
        c.check(view.get(f"{rdir}/{name}", Node(0, "", "")).kind == "file", f"/{rdir}/{name} missing")
    tests = [p for p in view if p.startswith(f"{rdir}/tests/") and p.endswith(".py")]
    c.check(bool(tests), f"/{rdir}/tests/ holds no test files")



def main(argv: list[str] | None = None) -> int:
    p = structure.build_parser(__doc__)
    p.add_argument("--provenance", type=Path, required=True, help="the chain's PROVENANCE.json")
    p.add_argument("--site", default="/usr/lib/python3/dist-packages", help="the directory holding sglang/ in the image")
    p.add_argument("--recipe-dir", required=True, help="the recipe files' directory in the image")
    args = p.parse_args(argv)
    try:
        provenance = json.loads(args.provenance.read_text())
    except (OSError, json.JSONDecodeError) as e:
        print(f"structure.py: error: {args.provenance}: {e}", file=sys.stderr)
        return 1
    return structure.run(args, lambda c, view, blobs: check_chain(c, view, blobs, provenance, args.site, args.recipe_dir))


if __name__ == "__main__":
    sys.exit(main())
