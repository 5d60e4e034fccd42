"""load.py into the project's podman storage: the image arrives under the given tag with the
built config, and no temporary name is left behind. Runs podman (CONTAINER_TEST_TAGS)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tools.oci import ocilayout
from tools.oci.tests.test_image import build_pair
from tools.podman.podman_backend import PodmanConfig, command
from tools.podman.spec import default_cache_root


def test_load_tags_the_built_image(tmp_path: Path, tool) -> None:
    parts = build_pair(tmp_path, tool)
    tag = f"localhost/oci-load-test:{os.getpid()}"
    config = PodmanConfig(default_cache_root() / "podman")
    try:
        done = tool("load", "--image", str(tmp_path / "top"), "--blob", f"{parts['base_desc']}={parts['base_tar']}",
                    "--tag", tag)
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
    done = tool("load", "--image", str(tmp_path / "top"), "--blob", f"{parts['base_desc']}={parts['base_tar']}",
                "--tag", "localhost/x:1", "--out", str(tmp_path / "x.tar"), check=False)
    assert done.returncode == 2 and "--out is only for --format docker-archive" in done.stderr
