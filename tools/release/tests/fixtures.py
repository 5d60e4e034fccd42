"""Test fixtures: small built "recipe" images with their .digest and release facts."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tools.podman.tests.host_image import layer_of, write_layout, write_tree
from tools.release.fingerprint import fingerprint

DECLARATION = {
    "schema": 1,
    "series": "v3",
    "chain": ["v1", "v3"],
    "base": {"wheel": "sglang-0.5.19.whl", "sha256": "0" * 64},
    "patches": [
        {"file": "a.diff", "series": "v1", "sha256": "1" * 64, "activation": {"kind": "unconditional"}},
        {"file": "stall.diff", "series": "v3", "sha256": "2" * 64, "activation": {"kind": "on-by-default"}},
    ],
    "pins": {},
}
PATCHES = [
    {"name": "a", "version": "v1", "activation": "always", "switch": {"kind": "unconditional"}},
    {"name": "stall", "version": "v1", "activation": "on-30s", "switch": {"kind": "on-by-default"}},
]


@dataclass(frozen=True)
class Built:
    layout: Path
    digest_file: Path
    facts: Path
    declaration: Path
    digest: str


def build(tmp: Path, name: str = "glm53_v3", content: str = "patched", base_text: str = "base",
          lock_current: bool = True) -> Built:
    """A two-layer image (base + patch layer) as a recipe build would leave it."""
    out = tmp / name
    base = layer_of(write_tree(out / "base", {"usr/lib/base.txt": base_text}))
    patch = layer_of(write_tree(out / "patch", {"usr/lib/sglang/x.py": content}))
    base_digest = write_layout(out / "base.oci", [base])
    digest = write_layout(out / "layout", [base, patch])
    digest_file = out / f"{name}.digest"
    digest_file.write_text(digest + "\n")
    declaration = out / "series.resolved.json"
    declaration.write_text(json.dumps(DECLARATION))
    manifest = json.loads((out / "layout/blobs/sha256" / digest.split(":")[1]).read_text())
    facts = {
        "recipe": f"//recipes:{name}",
        "series": "v3",
        "digest": digest,
        "base": {"name": "//recipes/bases:test_base", "digest": base_digest, "flavor": "cpu-test"},
        "patch_layer_digest": manifest["layers"][-1]["digest"],
        "fingerprint": fingerprint(DECLARATION, base_digest),
        "patches": PATCHES,
        "base_lock_current": lock_current,
    }
    facts_file = out / f"{name}.release_facts.json"
    facts_file.write_text(json.dumps(facts))
    return Built(out / "layout", digest_file, facts_file, declaration, digest)
