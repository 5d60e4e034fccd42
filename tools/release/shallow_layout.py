"""Build action of shallow_base: an OCI layout holding only a pulled image's manifest and config.

The layout is what tools/oci reads as a base (`--base`); the layer blobs stay in the registry.
With --files and --declaration it first checks that the base carries the SGLang files the patch
series is written against: every file's hash before the first patch that touches it, and the
series' pinned files, at <site>/sglang/... (files.json comes from oci_fetch.py --scan-prefix).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path


def canonical_json(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def expected_base_files(declaration: dict) -> dict[str, str]:
    """{series path: sha256} the base must hold: first-touch before-hashes, then untouched pins."""
    expected: dict[str, str | None] = {}
    for patch in declaration.get("patches", []):
        for path, hashes in patch.get("files", {}).items():
            expected.setdefault(path, hashes.get("before"))
    for path, pin in declaration.get("pins", {}).items():
        expected.setdefault(path, pin["sha256"])
    return {path: sha for path, sha in expected.items() if sha is not None}


def carry_problems(files: dict[str, str], declaration: dict, site: str) -> list[str]:
    """What the base lacks or holds differently; [] = it carries the series' base files."""
    problems = []
    for path, want in sorted(expected_base_files(declaration).items()):
        image_path = f"{site.strip('/')}/{path.removeprefix('python/')}"
        have = files.get(image_path)
        if have is None:
            problems.append(f"/{image_path} (series file {path}) is missing; the series expects sha256 {want}")
        elif have != want:
            problems.append(f"/{image_path} (series file {path}) has sha256 {have}, the series expects {want}")
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--manifest", type=Path, required=True)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--digest", type=Path, required=True, help="the manifest digest file")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--files", type=Path, help="files.json of the base (oci_fetch.py --scan-prefix)")
    parser.add_argument("--declaration", type=Path, help="the resolved series declaration the base must carry")
    parser.add_argument("--site", default="usr/lib/python3/dist-packages", help="where the base keeps sglang/")
    parser.add_argument("--name", default="the base", help="the base's name, for messages")
    args = parser.parse_args(argv)
    if args.files and args.declaration:
        problems = carry_problems(json.loads(args.files.read_text()), json.loads(args.declaration.read_text()), args.site)
        if problems:
            print(f"shallow_layout: {args.name} does not carry the SGLang files the series "
                  f"{json.loads(args.declaration.read_text()).get('series')} is written against:", file=sys.stderr)
            for problem in problems:
                print(f"  {problem}", file=sys.stderr)
            print("pin a base built from SGLang 0.5.19 with `bazel run //recipes/bases:pin_prod -- "
                  "REGISTRY/REPO:TAG`", file=sys.stderr)
            return 1
    manifest = args.manifest.read_bytes()
    config = args.config.read_bytes()
    digest = args.digest.read_text().strip()
    if "sha256:" + hashlib.sha256(manifest).hexdigest() != digest:
        print(f"shallow_layout: {args.manifest} does not hash to {digest}; re-fetch the base", file=sys.stderr)
        return 1
    config_digest = json.loads(manifest)["config"]["digest"]
    if "sha256:" + hashlib.sha256(config).hexdigest() != config_digest:
        print(f"shallow_layout: {args.config} does not hash to {config_digest}; re-fetch the base", file=sys.stderr)
        return 1
    blobs = args.out / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    (blobs / digest.split(":")[1]).write_bytes(manifest)
    (blobs / config_digest.split(":")[1]).write_bytes(config)
    (args.out / "oci-layout").write_bytes(canonical_json({"imageLayoutVersion": "1.0.0"}))
    media = json.loads(manifest).get("mediaType") or "application/vnd.oci.image.manifest.v1+json"
    (args.out / "index.json").write_bytes(canonical_json({"schemaVersion": 2, "manifests": [
        {"mediaType": media, "digest": digest, "size": len(manifest),
         "annotations": {"org.opencontainers.image.ref.name": "base"}}]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
