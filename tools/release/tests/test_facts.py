"""Release facts: base flavor from the rule, each patch's switch from the series declaration."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from tools.podman.tests.host_image import layer_of, write_layout, write_tree
from tools.release import facts

DECLARATION = {
    "schema": 1, "series": "v3", "chain": ["v3"], "base": {"wheel": "w", "sha256": "0" * 64},
    "patches": [
        {"file": "a.diff", "sha256": "1" * 64, "activation": {"kind": "unconditional"}},
        {"file": "stall.diff", "sha256": "2" * 64, "activation": {
            "kind": "on-by-default", "settings": {"X_SECS": "30"}, "disable": "X_SECS=0"}},
    ],
    "pins": {},
}
ROWS = [{"name": "a", "version": "v1", "activation": "always", "series": "v3", "file": "a.diff"},
        {"name": "stall", "version": "v1", "activation": "on-30s", "series": "v3", "file": "stall.diff"}]


def _args(tmp: Path, rows: list[dict], flavor: str = "production") -> argparse.Namespace:
    patch = layer_of(write_tree(tmp / "patch", {"x.py": "patched"}))
    layout = tmp / "layout"
    digest = write_layout(layout, [layer_of(write_tree(tmp / "base", {"b": "b"})), patch], labels={
        facts.BASE_NAME: "docker.io/lmsysorg/sglang", facts.BASE_DIGEST: "sha256:" + "a" * 64})
    manifest_path = layout / "blobs/sha256" / digest.split(":")[1]
    manifest = json.loads(manifest_path.read_text())
    config_path = layout / "blobs/sha256" / manifest["config"]["digest"].split(":")[1]
    files = {"digest": digest + "\n", "descriptor.json": json.dumps(manifest["layers"][-1]),
             "patches.json": json.dumps(rows), "declaration.json": json.dumps(DECLARATION),
             "contents.json": json.dumps({"layers": []})}
    for name, text in files.items():
        (tmp / name).write_text(text)
    return argparse.Namespace(
        recipe="//recipes:glm53_v3", image_digest=tmp / "digest", image_manifest=manifest_path,
        image_config=config_path, image_contents=tmp / "contents.json",
        patch_layer_descriptor=tmp / "descriptor.json", patches_json=tmp / "patches.json",
        declaration=tmp / "declaration.json", base_flavor=flavor)


def test_flavor_and_switches(tmp_path: Path) -> None:
    out = facts.make_facts(_args(tmp_path, ROWS))
    assert out["base"]["flavor"] == "production"
    assert [p["switch"] for p in out["patches"]] == [p["activation"] for p in DECLARATION["patches"]]


def test_patch_rows_that_disagree_with_the_declaration_are_refused(tmp_path: Path) -> None:
    with pytest.raises(facts.FactsError, match="lists \\['stall.diff', 'a.diff'\\], but the series declaration"):
        facts.make_facts(_args(tmp_path, list(reversed(ROWS))))
