"""Build action: the release facts of a recipe image (<recipe>.release_facts.json).

Everything a release record states about an image, taken from the build outputs and
cross-checked so a record can never mix two builds:
  digest              the image's manifest digest (= sha256 of the manifest, = <recipe>.digest)
  base                {name, digest} from the image's org.opencontainers.image.base.* labels,
                      and flavor (cpu-test | production, from the base target: --base-flavor)
  patch_layer_digest  the image's top layer, which must be the recipe's patch layer
  fingerprint         tools/release/fingerprint.py over the resolved declaration + base digest
  patches             the patch layer's patches.json rows (name, version, activation) and
                      each patch's `switch`: its activation in the series declaration, verbatim
  base_lock_current   whether every Debian layer of the base was built from the current lock
                      (a record check compares image digests strictly only then)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from tools.release.fingerprint import fingerprint
from tools.release.schema import Facts, RecordError

BASE_NAME = "org.opencontainers.image.base.name"
BASE_DIGEST = "org.opencontainers.image.base.digest"


class FactsError(Exception):
    """The build outputs disagree; the message names both values."""


def _json(path: Path):
    return json.loads(Path(path).read_text())


def base_lock_current(contents: dict) -> bool:
    debian = [
        layer.get("contents") or {}
        for layer in contents.get("layers", [])
        if (layer.get("contents") or {}).get("kind") == "debian-rootfs"
    ]
    return all(c.get("lock_current") is True for c in debian)


def make_facts(args: argparse.Namespace) -> dict:
    digest = Path(args.image_digest).read_text().strip()
    manifest_bytes = Path(args.image_manifest).read_bytes()
    actual = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
    if actual != digest:
        raise FactsError(f"{args.image_manifest} hashes to {actual}, but {args.image_digest} says {digest}")
    manifest = json.loads(manifest_bytes)
    config_bytes = Path(args.image_config).read_bytes()
    config_digest = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    if manifest["config"]["digest"] != config_digest:
        raise FactsError(f"{args.image_config} is {config_digest}, the manifest names {manifest['config']['digest']}")
    labels = (json.loads(config_bytes).get("config") or {}).get("Labels") or {}
    for key in (BASE_NAME, BASE_DIGEST):
        if key not in labels:
            raise FactsError(f"{args.image_config}: label {key} missing; engine images must record their base")
    patch_layer = _json(args.patch_layer_descriptor)["digest"]
    top = manifest["layers"][-1]["digest"]
    if top != patch_layer:
        raise FactsError(f"the image's top layer is {top}, but the recipe's patch layer is {patch_layer}")
    declaration = _json(args.declaration)
    rows = _json(args.patches_json)
    declared = declaration.get("patches", [])
    if [r["file"] for r in rows] != [p["file"] for p in declared]:
        raise FactsError(f"{args.patches_json} lists {[r['file'] for r in rows]}, but the series "
                         f"declaration {args.declaration} lists {[p['file'] for p in declared]}")
    patches = [
        {"name": row["name"], "version": row["version"], "activation": row["activation"],
         "switch": decl.get("activation") or {"kind": "unconditional"}}
        for row, decl in zip(rows, declared)
    ]
    return {
        "recipe": args.recipe,
        "series": declaration["series"],
        "digest": digest,
        "base": {"name": labels[BASE_NAME], "digest": labels[BASE_DIGEST], "flavor": args.base_flavor},
        "patch_layer_digest": patch_layer,
        "fingerprint": fingerprint(declaration, labels[BASE_DIGEST]),
        "patches": patches,
        "base_lock_current": base_lock_current(_json(args.image_contents)),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", required=True, help="the image's label, e.g. //recipes:glm53_v3")
    parser.add_argument("--image-digest", type=Path, required=True)
    parser.add_argument("--image-manifest", type=Path, required=True)
    parser.add_argument("--image-config", type=Path, required=True)
    parser.add_argument("--image-contents", type=Path, required=True, help="OciImageInfo.contents")
    parser.add_argument("--patch-layer-descriptor", type=Path, required=True)
    parser.add_argument("--patches-json", type=Path, required=True, help="<image>.patch_layer.patches.json")
    parser.add_argument("--declaration", type=Path, required=True, help="PatchChainInfo.declaration")
    parser.add_argument("--base-flavor", required=True, choices=("cpu-test", "production"),
                        help="production: the base is a registry image pulled by digest")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        facts = make_facts(args)
        Facts.from_json(facts, str(args.out))  # never write what the record tools would refuse
    except (FactsError, RecordError, KeyError, IndexError) as err:
        print(f"facts.py: error: {err}", file=sys.stderr)
        return 1
    args.out.write_text(json.dumps(facts, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
