"""How many lines a series changes inside SGLang's own files: the hooks a bump re-anchors.

    bazel run //patches:hook_lines            # each series on top of its parent (or its base)

For every file a series' chain outputs that exists in the tree it starts from (its parent's
chain output, else the SGLang wheel), the lines the series adds and removes there (a unified
diff without context). Files the series creates in sglang/ and the packages it ships
(series.json `packages`) are listed apart: they are the series' own code, not edits of
SGLang's. Prints one row per file and a total per series.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import sys
import zipfile
from pathlib import Path


def _lines(data: bytes) -> list[str]:
    return data.decode("utf-8", errors="replace").splitlines()


def changed_lines(before: bytes, after: bytes) -> tuple[int, int]:
    added = removed = 0
    for line in difflib.unified_diff(_lines(before), _lines(after), lineterm="", n=0):
        if line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    return added, removed


def report(chain_dir: Path, parent_dir: Path | None, wheel: zipfile.ZipFile) -> dict:
    prov = json.loads((chain_dir / "PROVENANCE.json").read_text())
    shipped = set(prov.get("packages", {}))
    rows, own = [], []
    names = set(wheel.namelist())
    for rel in sorted(prov["outputs"]):
        if rel.split("/", 1)[0] in shipped:
            own.append(rel)
            continue
        after = (chain_dir / "patched" / rel).read_bytes()
        if parent_dir is not None and (parent_dir / "patched" / rel).is_file():
            before = (parent_dir / "patched" / rel).read_bytes()
        elif rel in names:
            before = wheel.read(rel)
        else:
            own.append(rel)
            continue
        added, removed = changed_lines(before, after)
        if added or removed:
            rows.append({"file": rel, "added": added, "removed": removed})
    return {
        "series": prov["series"],
        "files": rows,
        "changed": sum(r["added"] + r["removed"] for r in rows),
        "own_files": own,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", help="patch_chain outputs (their PROVENANCE.json is used) and the base wheels")
    ap.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    args = ap.parse_args(argv)
    chains = {}
    for p in map(Path, args.paths):
        if p.name == "PROVENANCE.json":
            chains[json.loads(p.read_text())["series"]] = p.parent
    wheels = {hashlib.sha256(p.read_bytes()).hexdigest(): p for p in map(Path, args.paths) if p.suffix in (".zip", ".whl")}
    out = []
    for series, chain_dir in sorted(chains.items()):
        prov = json.loads((chain_dir / "PROVENANCE.json").read_text())
        parent = chains.get(prov["chain"][-2]) if len(prov["chain"]) > 1 else None
        wheel = wheels.get(prov["base"]["sha256"])
        if wheel is None:
            print(f"hook_lines: no wheel with sha256 {prov['base']['sha256']} ({prov['base']['wheel']}) given", file=sys.stderr)
            return 1
        with zipfile.ZipFile(wheel) as whl:
            out.append(report(chain_dir, parent, whl))
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    for r in out:
        print(f"series {r['series']}: {r['changed']} changed lines inside SGLang's files")
        for row in r["files"]:
            print(f"  {row['added'] + row['removed']:5d}  +{row['added']:<4d} -{row['removed']:<4d} {row['file']}")
        if r["own_files"]:
            print(f"  its own code (new files, shipped packages): {len(r['own_files'])} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
