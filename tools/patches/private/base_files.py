"""The files a base image must hold for a patch series to apply: tools/oci's expectations format.

Each file the chain touches must be there with its hash before the first patch that touches it,
and each pinned file of the series with its pinned hash, at <site>/<path without python/>.
`oci_pull(expect = ...)` / shallow_base check a pulled base against this list
(tools/oci/shallow_layout.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def expected_base_files(declaration: dict) -> dict[str, str]:
    """{series path: sha256} the base must hold: first-touch before-hashes, then untouched pins."""
    expected: dict[str, str | None] = {}
    for patch in declaration.get("patches", []):
        for path, hashes in patch.get("files", {}).items():
            expected.setdefault(path, hashes.get("before"))
    for path, pin in declaration.get("pins", {}).items():
        expected.setdefault(path, pin["sha256"])
    return {path: sha for path, sha in expected.items() if sha is not None}


def expectations(declaration: dict, site: str, fix: str) -> dict:
    site = site.strip("/")
    return {
        "what": f"the patch series {declaration['series']} (on {declaration['base']['wheel']})",
        "fix": fix,
        "files": [{"path": f"{site}/{path.removeprefix('python/')}", "sha256": sha, "note": f"series file {path}"}
                  for path, sha in sorted(expected_base_files(declaration).items())],
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--declaration", type=Path, required=True, help="the chain's resolved series declaration")
    parser.add_argument("--site", required=True, help="where the base keeps sglang/, e.g. usr/lib/python3/dist-packages")
    parser.add_argument("--fix", required=True, help="what to do when the base does not hold them")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        doc = expectations(json.loads(args.declaration.read_text()), args.site, args.fix)
    except (KeyError, ValueError) as err:
        print(f"base_files: {args.declaration}: not a resolved series declaration ({err})", file=sys.stderr)
        return 1
    args.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
