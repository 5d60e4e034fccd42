"""The built //patches:vN chains: outputs match their PROVENANCE and extensions extend.

Bazel passes PATCH_CHAIN_OUTPUTS: the runfiles paths of every chain's outputs.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

OUTPUTS = os.environ.get("PATCH_CHAIN_OUTPUTS", "").split()
pytestmark = pytest.mark.skipif(not OUTPUTS, reason="run under Bazel (//patches:chains_test)")


def chains() -> dict[str, Path]:
    dirs = {Path(p).parent for p in OUTPUTS if p.endswith("/PROVENANCE.json")}
    return {json.loads((d / "PROVENANCE.json").read_text())["series"]: d for d in dirs}


def test_each_chain_holds_exactly_its_provenance_outputs():
    found = chains()
    assert {"v1", "v2", "v3"} <= set(found)
    for name, d in found.items():
        prov = json.loads((d / "PROVENANCE.json").read_text())
        patched = d / "patched"
        files = {str(p.relative_to(patched)): p for p in patched.rglob("*") if p.is_file()}
        assert set(files) == set(prov["outputs"]), name
        for rel, p in files.items():
            assert hashlib.sha256(p.read_bytes()).hexdigest() == prov["outputs"][rel], (name, rel)
            assert rel.split("/")[0] in ["sglang", *prov.get("packages", {})], (name, rel)
        # The chain of every file ends at its output hash, and each link was verified by the action.
        for path, f in prov["files"].items():
            assert f["chain"][-1]["sha256"] == prov["outputs"].get(f["output"]), (name, path)
        text = (d / "PROVENANCE").read_text()
        for p in prov["patches"]:
            assert f"patches/{p['series']}/{p['file']}" in text and p["sha256"] in text
        resolved = json.loads((d / "series.resolved.json").read_text())
        assert [p["file"] for p in resolved["patches"]] == [p["file"] for p in prov["patches"]]


def test_an_extension_starts_with_its_parent():
    found = chains()
    for name, d in found.items():
        prov = json.loads((d / "PROVENANCE.json").read_text())
        parent = prov["chain"][-2] if len(prov["chain"]) > 1 else None
        if parent in found:
            parent_prov = json.loads((found[parent] / "PROVENANCE.json").read_text())
            n = len(parent_prov["patches"])
            assert prov["patches"][:n] == parent_prov["patches"], (name, parent)
            assert prov["base"] == parent_prov["base"]
