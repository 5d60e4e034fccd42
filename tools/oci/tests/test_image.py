"""image.py / materialize.py: byte-identical layouts, config inheritance, skopeo acceptance."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tools.oci import ocilayout

SKOPEO = shutil.which("skopeo")


def files_of(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def layer(tmp: Path, tool, name: str, content: str) -> tuple[Path, Path]:
    src = tmp / f"{name}-src"
    (src / "etc").mkdir(parents=True)
    (src / "etc" / f"{name}.txt").write_text(content)
    spec = tmp / f"{name}.spec.json"
    spec.write_text(json.dumps({"created_by": name, "trees": [{"src": str(src), "dst": "/"}]}))
    tar, desc = tmp / f"{name}.tar", tmp / f"{name}.json"
    tool("layer", "build", "--spec", str(spec), "--out", str(tar), "--out-descriptor", str(desc))
    return tar, desc


def build_pair(tmp: Path, tool) -> dict[str, Path]:
    base_tar, base_desc = layer(tmp, tool, "base", "base\n")
    top_tar, top_desc = layer(tmp, tool, "top", "top\n")
    tool("image", "--layer", str(base_desc), "--env", "PATH=/usr/bin:/bin", "--env", "A=1",
         "--cmd", '["/usr/bin/python3"]', "--label", "l=base", "--ref-name", "base",
         "--out-layout", str(tmp / "base"), "--out-digest", str(tmp / "base.digest"))
    tool("image", "--base", str(tmp / "base"), "--layer", str(top_desc), "--env", "PATH=/opt/bin:$PATH",
         "--label", "l=top", "--label-from-file", f"org.opencontainers.image.base.digest={tmp / 'base.digest'}",
         "--embed", f"{top_desc}={top_tar}", "--ref-name", "top",
         "--out-layout", str(tmp / "top"), "--out-digest", str(tmp / "top.digest"),
         "--out-config", str(tmp / "top.config.json"))
    return {"base_tar": base_tar, "base_desc": base_desc, "top_tar": top_tar, "top_desc": top_desc}


def test_two_builds_are_byte_identical(tmp_path: Path, tool) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        build_pair(tmp_path / name, tool)
    for name in ("base", "top"):
        assert files_of(tmp_path / "a" / name) == files_of(tmp_path / "b" / name)
        assert (tmp_path / "a" / f"{name}.digest").read_text() == (tmp_path / "b" / f"{name}.digest").read_text()
    digest = (tmp_path / "a" / "top.digest").read_text()
    assert digest.startswith("sha256:") and len(digest) == len("sha256:") + 64 + 1 and digest.endswith("\n")


def test_config_inherits_and_layers_append(tmp_path: Path, tool) -> None:
    build_pair(tmp_path, tool)
    top = ocilayout.read_layout(tmp_path / "top")
    base = ocilayout.read_layout(tmp_path / "base")
    cfg = top.config["config"]
    assert cfg["Env"] == ["PATH=/opt/bin:/usr/bin:/bin", "A=1"]
    assert cfg["Cmd"] == ["/usr/bin/python3"]  # inherited
    assert cfg["Labels"] == {"l": "top", "org.opencontainers.image.base.digest": base.manifest_digest}
    assert top.config["created"] == "1970-01-01T00:00:00Z"
    assert top.manifest["layers"][0] == base.manifest["layers"][0]
    assert len(top.config["rootfs"]["diff_ids"]) == 2
    assert top.ref_name == "top"
    # canonical JSON: what is stored is exactly the canonical spelling
    raw = (tmp_path / "top.config.json").read_bytes()
    assert raw == ocilayout.canonical_json(json.loads(raw))
    # the embedded blob is in the directory; the base layer is not (external blob store)
    blobs = {p.name for p in (tmp_path / "top" / "blobs" / "sha256").iterdir()}
    assert top.manifest["layers"][1]["digest"].split(":")[1] in blobs
    assert top.manifest["layers"][0]["digest"].split(":")[1] not in blobs


def test_materialize_checks_sizes_and_completeness(tmp_path: Path, tool) -> None:
    p = build_pair(tmp_path, tool)
    proc = tool("materialize", "--image", str(tmp_path / "top"), "--out", str(tmp_path / "m1"), check=False)
    assert proc.returncode == 1 and "no blob given" in proc.stderr
    wrong = tmp_path / "wrong.tar"
    wrong.write_bytes(b"x")
    proc = tool("materialize", "--image", str(tmp_path / "top"), "--blob", f"{p['base_desc']}={wrong}",
                "--out", str(tmp_path / "m2"), check=False)
    assert proc.returncode == 1 and "1 bytes, but" in proc.stderr
    tool("materialize", "--image", str(tmp_path / "top"), "--blob", f"{p['base_desc']}={p['base_tar']}",
         "--out", str(tmp_path / "m3"), "--mode", "copy", "--verify")
    assert len(list((tmp_path / "m3" / "blobs" / "sha256").iterdir())) == 4  # manifest, config, 2 layers


@pytest.mark.skipif(SKOPEO is None, reason="skopeo not installed (tools/bazel installs it)")
def test_skopeo_accepts_thin_and_full_layouts(tmp_path: Path, tool) -> None:
    p = build_pair(tmp_path, tool)
    digest = (tmp_path / "top.digest").read_text().strip()
    out = subprocess.run([SKOPEO, "inspect", f"oci:{tmp_path / 'top'}:top"], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["Digest"] == digest
    tool("materialize", "--image", str(tmp_path / "top"), "--blob", f"{p['base_desc']}={p['base_tar']}",
         "--out", str(tmp_path / "full"), "--mode", "symlink")
    # A copy reads every blob and checks it against its digest. Without --preserve-digests
    # skopeo gzips uncompressed layers on the way, which changes the manifest digest.
    subprocess.run([SKOPEO, "copy", "--quiet", "--preserve-digests",
                    f"oci:{tmp_path / 'full'}:top", f"oci:{tmp_path / 'copy'}:top"],
                   check=True, capture_output=True)
    assert (tmp_path / "copy" / "index.json").exists()
    copied = json.loads((tmp_path / "copy" / "index.json").read_text())["manifests"][0]["digest"]
    assert copied == digest


@pytest.mark.parametrize("value", ["sha256:abc", "sha256:" + "A" * 64, "sha512:" + "0" * 64,
                                   "sha256:" + "0" * 64 + "\n", None, 64])
def test_layout_digests_follow_the_one_digest_grammar(value) -> None:
    # ocilayout reports reference.py's grammar error as a LayoutError, whatever the value's type.
    with pytest.raises(ocilayout.LayoutError, match=r"layer.json: .* is not sha256:<64 lowercase hex>"):
        ocilayout.LayerDescriptor.from_json({"mediaType": ocilayout.MEDIA_LAYER, "digest": value, "size": 1,
                                             "diff_id": "sha256:" + "0" * 64}, "layer.json")
