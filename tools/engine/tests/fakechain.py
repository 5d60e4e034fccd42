"""A small stand-in for a patch_chain's outputs (patched dir, declaration, PROVENANCE)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

STOCK = "def f():\n    return 'stock'\n"
PATCHED = "def f():\n    return 'patched'\n"

DECLARATION = {
    "schema": 1,
    "series": "v3",
    "chain": ["v1", "v3"],
    "patches": [
        {"file": "w4afp8-exclusions.diff", "series": "v1", "activation": {"kind": "unconditional"}},
        {"file": "dsa-indexer-qsplit.diff", "series": "v1", "activation": {"kind": "opt-in", "env": "SGLANG_DSA_INDEXER_QSPLIT", "value": "1"}},
        {"file": "event-loop-stall-dump.diff", "series": "v3",
         "activation": {"kind": "on-by-default", "disable": "SGLANG_EVENT_LOOP_STALL_DUMP_SECS=0",
                        "settings": {"SGLANG_EVENT_LOOP_STALL_DUMP_REPEAT_SECS": "60", "SGLANG_EVENT_LOOP_STALL_DUMP_SECS": "30"}}},
    ],
}


@dataclass(frozen=True)
class FakeChain:
    patched: Path
    declaration: Path
    provenance_json: Path
    provenance_text: Path
    tests: list[tuple[Path, str]]


def make_chain(root: Path, patched_text: str = PATCHED, after: str | None = None) -> FakeChain:
    patched = root / "patched" / "sglang" / "srt"
    patched.mkdir(parents=True)
    (patched / "x.py").write_text(patched_text)
    (root / "series.resolved.json").write_text(json.dumps(DECLARATION))
    provenance = {
        "series": "v3",
        "outputs": {"sglang/srt/x.py": after or hashlib.sha256(PATCHED.encode()).hexdigest()},
        "deleted": ["sglang/srt/old.py"],
    }
    (root / "PROVENANCE.json").write_text(json.dumps(provenance))
    (root / "PROVENANCE").write_text("series: v3\n")
    test = root / "test_x.py"
    test.write_text("def test_x():\n    pass\n")
    return FakeChain(root / "patched", root / "series.resolved.json", root / "PROVENANCE.json",
                     root / "PROVENANCE", [(test, "patches/v3/tests/test_x.py")])


def build_patch_layer(tool, chain: FakeChain, out: Path, recipe: str = "glm53_v3") -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {k: out / f"patch_layer.{k}" for k in ("tar", "descriptor", "digest", "contents", "patches", "labels", "pyc")}
    tool("patch_pyc", "--patched", str(chain.patched), "--site", "/usr/lib/python3/dist-packages", "--out", str(paths["pyc"]))
    args = ["--patched", str(chain.patched), "--pyc", str(paths["pyc"]), "--declaration", str(chain.declaration),
            "--provenance-json", str(chain.provenance_json), "--provenance-text", str(chain.provenance_text),
            "--recipe", recipe, "--recipe-dir", f"/usr/share/glm53-engine/{recipe}", "--out", str(paths["tar"]), "--out-descriptor", str(paths["descriptor"]),
            "--out-digest", str(paths["digest"]), "--out-contents", str(paths["contents"]),
            "--out-patches", str(paths["patches"]), "--out-labels", str(paths["labels"])]
    for src, short in chain.tests:
        args += ["--test", f"{src}={short}"]
    tool("patch_layer", *args)
    return paths
