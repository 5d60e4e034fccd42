"""Build action of shallow_base: an OCI layout holding only a pulled image's manifest and config.

The layout is what tools/oci reads as a base (`--base`); the layer blobs stay in the registry.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path


def canonical_json(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--manifest", type=Path, required=True)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--digest", type=Path, required=True, help="the manifest digest file")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
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
