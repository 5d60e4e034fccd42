"""structure.py passes a correct engine image and fails each drift it exists to catch."""

from __future__ import annotations

import json
from pathlib import Path

from fakechain import STOCK, build_patch_layer, make_chain

SITE = "usr/lib/python3/dist-packages"


def base_image(tmp: Path, tool) -> dict[str, Path]:
    """A base whose sglang/srt/x.py is stock, with a stale unchecked .pyc of it."""
    src = tmp / "base-src"
    (src / SITE / "sglang" / "srt").mkdir(parents=True)
    (src / SITE / "sglang" / "srt" / "x.py").write_text(STOCK)
    (src / SITE / "sglang" / "srt" / "old.py").write_text("gone = True\n")
    spec = tmp / "base.spec.json"
    spec.write_text(json.dumps({"created_by": "base", "trees": [{"src": str(src), "dst": "/"}], "compile": [SITE]}))
    tool("layer", "build", "--spec", str(spec), "--out", str(tmp / "base.tar"), "--out-descriptor", str(tmp / "base.json"))
    tool("image", "--layer", str(tmp / "base.json"), "--env", "PATH=/usr/bin", "--cmd", '["/usr/bin/python3"]',
         "--ref-name", "base", "--out-layout", str(tmp / "base"), "--out-digest", str(tmp / "base.digest"))
    return {"layout": tmp / "base", "tar": tmp / "base.tar", "desc": tmp / "base.json", "digest": tmp / "base.digest"}


def engine(tmp: Path, tool, base: dict[str, Path], layer: dict[str, Path], labels: bool = True) -> Path:
    args = ["--base", str(base["layout"]), "--layer", str(layer["descriptor"]), "--ref-name", "glm53_v3",
            "--label", "org.opencontainers.image.base.name=base",
            "--label-from-file", f"org.opencontainers.image.base.digest={base['digest']}",
            "--out-layout", str(tmp / "img"), "--out-digest", str(tmp / "img.digest")]
    if labels:
        args += ["--labels-file", str(layer["labels"])]
    tool("image", *args)
    return tmp / "img"


def structure(tool, img: Path, base: dict[str, Path], layer: dict[str, Path], chain_root: Path):
    return tool("structure", "--image", str(img), "--base-image", str(base["layout"]), "--expect-inherited",
                "--blob", f"{base['desc']}={base['tar']}", "--blob", f"{layer['descriptor']}={layer['tar']}",
                "--provenance", str(chain_root / "PROVENANCE.json"), "--recipe-dir", "/usr/share/glm53-engine/glm53_v3",
                "--expect-labels-file", str(layer["labels"]), "--expect-label", "org.opencontainers.image.base.name=base",
                "--expect-env", "PATH=/usr/bin", "--expect-file", f"/{SITE}/sglang/srt/x.py", check=False)


def test_good_image_passes(tmp_path: Path, tool) -> None:
    base = base_image(tmp_path, tool)
    layer = build_patch_layer(tool, make_chain(tmp_path / "c"), tmp_path / "pl")
    proc = structure(tool, engine(tmp_path, tool, base, layer), base, layer, tmp_path / "c")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 failed" in proc.stdout


def test_wrong_after_hash_fails(tmp_path: Path, tool) -> None:
    base = base_image(tmp_path, tool)
    chain = make_chain(tmp_path / "c", after="0" * 64)
    layer = build_patch_layer(tool, chain, tmp_path / "pl")
    proc = structure(tool, engine(tmp_path, tool, base, layer), base, layer, tmp_path / "c")
    assert proc.returncode == 1
    assert "the chain's after-hash is 0000" in proc.stdout


def test_stale_bytecode_below_the_patch_fails(tmp_path: Path, tool) -> None:
    """A patch layer without fresh .pyc leaves the base's unchecked .pyc of the stock file in force."""
    base = base_image(tmp_path, tool)
    chain = make_chain(tmp_path / "c")
    layer = build_patch_layer(tool, chain, tmp_path / "pl")
    # Rebuild the same layer without the .pyc: a plain layer of the patched tree + recipe files.
    spec = tmp_path / "nopyc.json"
    spec.write_text(json.dumps({"created_by": "no pyc", "trees": [{"src": str(chain.patched), "dst": SITE}],
                                "files": [{"src": str(chain.declaration), "dst": "usr/share/glm53-engine/glm53_v3/series.json"}]}))
    tool("layer", "build", "--spec", str(spec), "--out", str(layer["tar"]), "--out-descriptor", str(layer["descriptor"]))
    proc = structure(tool, engine(tmp_path, tool, base, layer), base, layer, tmp_path / "c")
    assert proc.returncode == 1
    assert "a stale bytecode file would shadow the patch" in proc.stdout
    assert "PROVENANCE missing" in proc.stdout


def test_missing_patch_label_and_changed_env_fail(tmp_path: Path, tool) -> None:
    base = base_image(tmp_path, tool)
    layer = build_patch_layer(tool, make_chain(tmp_path / "c"), tmp_path / "pl")
    img = engine(tmp_path, tool, base, layer, labels=False)
    proc = structure(tool, img, base, layer, tmp_path / "c")
    assert proc.returncode == 1
    assert "label ai.glm53.patch.event_loop_stall_dump: expected 'v1-on-30s', got None" in proc.stdout
    tool("image", "--base", str(base["layout"]), "--layer", str(layer["descriptor"]), "--ref-name", "x",
         "--env", "PATH=/other", "--labels-file", str(layer["labels"]),
         "--label-from-file", f"org.opencontainers.image.base.digest={base['digest']}",
         "--out-layout", str(tmp_path / "img2"), "--out-digest", str(tmp_path / "img2.digest"))
    proc = structure(tool, tmp_path / "img2", base, layer, tmp_path / "c")
    assert "Env not inherited from the base" in proc.stdout and "env PATH: expected '/usr/bin'" in proc.stdout


def test_deleted_file_still_present_fails(tmp_path: Path, tool) -> None:
    base = base_image(tmp_path, tool)
    chain = make_chain(tmp_path / "c")
    layer = build_patch_layer(tool, chain, tmp_path / "pl")
    img = engine(tmp_path, tool, base, layer)
    assert structure(tool, img, base, layer, tmp_path / "c").returncode == 0
    prov = json.loads((tmp_path / "c" / "PROVENANCE.json").read_text())
    prov["deleted"].append("sglang/srt/x.py")  # claims a file is deleted that the image has
    (tmp_path / "c" / "PROVENANCE.json").write_text(json.dumps(prov))
    proc = structure(tool, img, base, layer, tmp_path / "c")
    assert proc.returncode == 1 and "the chain deletes it, but the image still has it" in proc.stdout
