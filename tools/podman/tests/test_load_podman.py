"""load.py (oci_load's program) on a two-layer image whose base blob lives outside the top
layout: into the project's podman storage the image arrives under the given tag with the built
config and no temporary name is left behind; a docker-archive tar holds every layer. Runs podman
(PARALLEL_CONTAINER_TEST_TAGS)."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from tools.oci import ocilayout
from tools.oci.testing.runner import tool_runner
from tools.oci.tests.test_image import build_pair
from tools.podman.podman_backend import PodmanConfig, command
from tools.podman.spec import default_cache_root

PODMAN_DIR = Path(__file__).resolve().parents[1]


@pytest.fixture
def tool():
    # load.py is here; the programs that build the test image are tools/oci's.
    return tool_runner(PODMAN_DIR, PODMAN_DIR.parent / "oci")


def blob_args(parts: dict[str, Path]) -> list[str]:
    return ["--blob", f"{parts['base_desc']}={parts['base_tar']}"]


def test_load_tags_the_built_image(tmp_path: Path, tool) -> None:
    parts = build_pair(tmp_path, tool)
    tag = f"localhost/oci-load-test:{os.getpid()}"
    config = PodmanConfig(default_cache_root() / "podman")
    try:
        done = tool("load", "--image", str(tmp_path / "top"), *blob_args(parts), "--tag", tag)
        assert f"as {tag}" in done.stdout
        inspected = command(config, "image", "inspect", tag, timeout_s=120)
        assert inspected.returncode == 0, inspected.stderr
        image = json.loads(inspected.stdout)[0]
        built = ocilayout.read_layout(tmp_path / "top")
        assert "sha256:" + image["Id"] == built.manifest["config"]["digest"]
        assert [t for t in image["RepoTags"] if "/tmp/" in t] == []
    finally:
        command(config, "rmi", tag, timeout_s=120)


def test_load_refuses_out_without_docker_archive(tmp_path: Path, tool) -> None:
    parts = build_pair(tmp_path, tool)
    done = tool("load", "--image", str(tmp_path / "top"), *blob_args(parts),
                "--tag", "localhost/x:1", "--out", str(tmp_path / "x.tar"), check=False)
    assert done.returncode == 2 and "--out is only for --format docker-archive" in done.stderr


@pytest.mark.skipif(shutil.which("skopeo") is None, reason="skopeo not installed")
def test_load_writes_a_docker_archive_with_every_layer(tmp_path: Path, tool) -> None:
    parts = build_pair(tmp_path, tool)
    out = tmp_path / "img.tar"
    tool("load", "--image", str(tmp_path / "top"), *blob_args(parts), "--tag", "localhost/top:1",
         "--format", "docker-archive", "--out", str(out))
    with tarfile.open(out) as archive:
        manifest = json.load(archive.extractfile("manifest.json"))
    assert manifest[0]["RepoTags"] == ["localhost/top:1"] and len(manifest[0]["Layers"]) == 2
