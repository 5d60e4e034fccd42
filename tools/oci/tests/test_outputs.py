"""validate.py (oci-image-tool), the .view replace rules, annotation-from-file: on a two-layer
image whose base blob lives outside the top layout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tools.oci import ocilayout
from tools.oci.tests.test_image import build_pair

pytestmark = pytest.mark.skipif(shutil.which("oci-image-tool") is None, reason="oci-image-tool not installed")


def blob_args(parts: dict[str, Path]) -> list[str]:
    return ["--blob", f"{parts['base_desc']}={parts['base_tar']}"]


def test_validate_passes_on_the_full_view(tmp_path: Path, tool) -> None:
    parts = build_pair(tmp_path, tool)
    done = tool("validate", "--image", str(tmp_path / "top"), "--digest-file", str(tmp_path / "top.digest"),
                *blob_args(parts))
    assert "Validation succeeded" in done.stdout and "PASS" in done.stdout


def test_validate_fails_on_a_blob_that_does_not_match_its_digest(tmp_path: Path, tool) -> None:
    parts = build_pair(tmp_path, tool)
    # Same size, other bytes: only a digest check notices (materialize checks sizes only).
    data = bytearray(parts["base_tar"].read_bytes())
    data[600] ^= 0xFF
    bad = tmp_path / "bad.tar"
    bad.write_bytes(bytes(data))
    done = tool("validate", "--image", str(tmp_path / "top"),
                "--blob", f"{parts['base_desc']}={bad}", check=False)
    assert done.returncode == 1, done.stdout
    assert "FAIL: oci-image-tool rejects" in done.stdout


def test_validate_fails_on_a_manifest_the_spec_rejects(tmp_path: Path, tool) -> None:
    parts = build_pair(tmp_path, tool)
    top = tmp_path / "top"
    img = ocilayout.read_layout(top)
    manifest = dict(img.manifest, schemaVersion=1)  # the image spec requires 2
    raw = ocilayout.canonical_json(manifest)
    (top / "blobs" / "sha256" / ocilayout.sha256_digest(raw)[7:]).write_bytes(raw)
    (top / "index.json").write_bytes(ocilayout.canonical_json(ocilayout.make_index(raw, "top")))
    done = tool("validate", "--image", str(top), *blob_args(parts), check=False)
    assert done.returncode == 1, done.stdout


def test_validate_refuses_a_missing_layer_blob(tmp_path: Path, tool) -> None:
    build_pair(tmp_path, tool)
    done = tool("validate", "--image", str(tmp_path / "top"), check=False)
    assert done.returncode == 1 and "no blob given" in done.stderr


def test_view_links_blobs_and_replaces_only_a_layout(tmp_path: Path, tool) -> None:
    parts = build_pair(tmp_path, tool)
    work = tmp_path / "cwd"
    (work / "other").mkdir(parents=True)
    (work / "other" / "keep.txt").write_text("x")
    env = dict(os.environ, BUILD_WORKING_DIRECTORY=str(work))
    cmd = [shutil.which("python3"), str(Path(ocilayout.__file__).with_name("materialize.py")),
           "--image", str(tmp_path / "top"), *blob_args(parts), "--mode", "symlink", "--replace", "--out"]
    for _ in range(2):  # the second run replaces the first view
        subprocess.run([*cmd, "view"], env=env, check=True, stdout=subprocess.PIPE)
    blob = work / "view" / "blobs" / "sha256" / json.loads(parts["base_desc"].read_text())["digest"][7:]
    assert blob.is_symlink() and blob.resolve() == parts["base_tar"].resolve()
    refused = subprocess.run([*cmd, "other"], env=env, stderr=subprocess.PIPE, text=True)
    assert refused.returncode == 1 and "holds no oci-layout" in refused.stderr
    assert (work / "other" / "keep.txt").exists()


def test_annotation_from_file_lands_in_the_manifest(tmp_path: Path, tool) -> None:
    parts = build_pair(tmp_path, tool)
    value = tmp_path / "fp"
    value.write_text("sha256:" + "ab" * 32 + "\n")
    tool("image", "--base", str(tmp_path / "base"), "--layer", str(parts["top_desc"]),
         "--annotation-from-file", f"ai.example.fingerprint={value}", "--ref-name", "ann",
         "--out-layout", str(tmp_path / "ann"), "--out-digest", str(tmp_path / "ann.digest"))
    assert ocilayout.read_layout(tmp_path / "ann").manifest["annotations"] == {
        "ai.example.fingerprint": "sha256:" + "ab" * 32}
