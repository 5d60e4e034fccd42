"""Build action of shallow_base: an OCI layout holding only a pulled image's manifest and config.

The layout is what tools/oci reads as a base (`--base`); the layer blobs stay in the registry.
With --files (pull.py's files.json) and --expect it first checks that the base holds the
expected files, each with its sha256, and fails listing every file that is missing or differs.

--expect is a JSON file written by whoever knows what the base must carry (tools/patches'
chain_base_files for an SGLang patch series):

  {"what": "the patch series v3",                      # named in the messages
   "fix": "pin another base with `...`",              # printed after the list
   "files": [{"path": "usr/lib/.../x.py", "sha256": "<64 hex>", "note": "series file python/x.py"}]}
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from tools.oci.ocilayout import LayoutError, check_digest, sha256_digest, write_layout


@dataclass(frozen=True)
class ExpectedFile:
    path: str  # image path without the leading '/'
    sha256: str  # hex
    note: str = ""


@dataclass(frozen=True)
class Expectations:
    what: str
    fix: str
    files: tuple[ExpectedFile, ...]

    @staticmethod
    def load(path: Path) -> "Expectations":
        try:
            doc = json.loads(path.read_text())
            files = tuple(
                ExpectedFile(f["path"].strip("/"), check_digest("sha256:" + f["sha256"], f"{path}: files[{i}].sha256")[7:],
                             f.get("note", ""))
                for i, f in enumerate(doc["files"]))
            return Expectations(doc["what"], doc["fix"], files)
        except KeyError as err:
            raise LayoutError(f"{path}: missing key {err}; see tools/oci/shallow_layout.py for the format") from None
        except (ValueError, TypeError, AttributeError) as err:
            raise LayoutError(f"{path}: not an expectations file ({err}); see tools/oci/shallow_layout.py") from None


def problems(files: dict, expect: Expectations) -> list[str]:
    """What the base lacks or holds differently; [] = it carries every expected file."""
    prefixes, hashes = files["prefixes"], files["files"]
    out = []
    for want in sorted(expect.files, key=lambda f: f.path):
        label = f"/{want.path}" + (f" ({want.note})" if want.note else "")
        have = hashes.get(want.path)
        if not any(want.path == p or want.path.startswith(p + "/") for p in prefixes):
            out.append(f"{label} is outside the pull's scanned prefixes ({', '.join(prefixes)}): add its directory to oci_pull's scan")
        elif have is None:
            out.append(f"{label} is missing; {expect.what} expects sha256 {want.sha256}")
        elif have != want.sha256:
            out.append(f"{label} has sha256 {have}, {expect.what} expects {want.sha256}")
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, required=True)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--digest", type=Path, required=True, help="the manifest digest file")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--files", type=Path, help="files.json of the base (pull.py --scan)")
    parser.add_argument("--expect", type=Path, help="the files the base must hold (format above)")
    parser.add_argument("--name", default="the base", help="the base's name, for messages")
    args = parser.parse_args(argv)
    if bool(args.files) != bool(args.expect):
        parser.error("--files and --expect go together")
    try:
        if args.expect:
            expect = Expectations.load(args.expect)
            found = problems(json.loads(args.files.read_text()), expect)
            if found:
                print(f"shallow_layout: {args.name} does not hold the files {expect.what} expects:", file=sys.stderr)
                for problem in found:
                    print(f"  {problem}", file=sys.stderr)
                print(expect.fix, file=sys.stderr)
                return 1
        manifest = args.manifest.read_bytes()
        config = args.config.read_bytes()
        digest = args.digest.read_text().strip()
        if sha256_digest(manifest) != digest:
            raise LayoutError(f"{args.manifest} does not hash to {digest}; re-fetch the base")
        if sha256_digest(config) != json.loads(manifest)["config"]["digest"]:
            raise LayoutError(f"{args.config} is not the config {args.manifest} names; re-fetch the base")
        write_layout(args.out, manifest, config, "base")
    except LayoutError as err:
        print(f"shallow_layout: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
