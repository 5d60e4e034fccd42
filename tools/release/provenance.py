"""An in-toto Statement with a SLSA v1 provenance predicate for a recipe image.

Subject: the image's manifest digest. Materials (resolvedDependencies), all by sha256:
  * the base image (its manifest digest and name),
  * the SGLang source the patches apply to (the wheel pinned by the series declaration),
  * every patch file of the chain, in order,
  * the lock files the base was built from (Debian .deb lock, Python wheel lock),
  * every .deb and every wheel actually installed in the base (from the layer contents the
    build recorded; with a drifted Debian lock these are the versions really used),
Byproducts: the SBOM, so the signature over the statement covers the SBOM too.

The statement carries no timestamps: the same inputs give the same bytes (and signature).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tools.oci import ocitar

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
# Describes how to read this provenance; documented in tools/release/README.md.
BUILD_TYPE = "https://glm53-engine.invalid/buildtypes/engine-image/v1"
BUILDER_ID = "https://glm53-engine.invalid/builders/bazel-local"


def _hex(digest: str) -> str:
    algo, _, value = digest.partition(":")
    if algo != "sha256" or len(value) != 64:
        raise ValueError(f"{digest!r} is not sha256:<64 hex>")
    return value


def _dep(name: str, uri: str, sha256_hex: str) -> dict[str, Any]:
    return {"name": name, "uri": uri, "digest": {"sha256": sha256_hex}}


def base_packages(contents: dict) -> list[dict[str, Any]]:
    """The .debs and wheels installed in the image's layers, as resolvedDependencies."""
    deps: list[dict[str, Any]] = []
    for layer in contents.get("layers", []):
        info = layer.get("contents") or {}
        if info.get("kind") == "debian-rootfs":
            for p in info.get("packages", []):
                deps.append(_dep(f"deb:{p['name']}", f"pkg:deb/debian/{p['name']}@{p['version']}", p["sha256"]))
        elif info.get("kind") == "python-wheels":
            for w in info.get("wheels", []):
                deps.append(_dep(f"wheel:{w['name']}", f"pkg:pypi/{w['name']}@{w['version']}", w["sha256"]))
    return deps


def statement(
    *,
    recipe: str,
    facts: dict,
    declaration: dict,
    contents: dict,
    locks: list[tuple[str, Path]],
    sbom: Path | None,
) -> dict[str, Any]:
    deps = [_dep("base", f"oci:{facts['base']['name']}", _hex(facts["base"]["digest"]))]
    wheel = declaration.get("base") or {}
    if wheel.get("sha256"):
        deps.append(_dep("sglang-source", f"pkg:pypi/sglang?file={wheel.get('wheel', '')}", wheel["sha256"]))
    for patch in declaration.get("patches", []):
        series = patch.get("series", declaration.get("series", ""))
        deps.append(_dep(f"patch:{series}/{patch['file']}", f"file:patches/{series}/{patch['file']}", patch["sha256"]))
    for short_path, path in locks:
        deps.append(_dep(f"lock:{short_path}", f"file:{short_path}", ocitar.hash_file(path).sha256))
    deps.extend(base_packages(contents))
    run_details: dict[str, Any] = {"builder": {"id": BUILDER_ID}, "metadata": {}}
    if sbom is not None:
        run_details["byproducts"] = [
            {"name": "sbom.spdx.json", "mediaType": "application/spdx+json", "digest": {"sha256": ocitar.hash_file(sbom).sha256}}
        ]
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": recipe, "digest": {"sha256": _hex(facts["digest"])}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"recipe": recipe, "series": facts["series"]},
                "internalParameters": {
                    "patch_layer_digest": facts["patch_layer_digest"],
                    "fingerprint": facts["fingerprint"],
                    "patches": facts["patches"],
                    "base_lock_current": facts.get("base_lock_current", True),
                },
                "resolvedDependencies": deps,
            },
            "runDetails": run_details,
        },
    }
