"""The production-base path on a small synthetic base, Docker-typed, on the test registry.

The base is two layers: filler, and the SGLang 0.5.19 files the v3 chain's before-hashes name
(taken from the source wheel, at the production base's site). It is pushed with
`skopeo copy --format v2s2`, so the registry holds a Docker schema-2 manifest with gzip layers
(`application/vnd.docker.image.rootfs.diff.tar.gzip`), like most registry-hosted CUDA images.

  * carrying: the shallow pull with the scan (tools/oci/pull.py, the oci_pull rule's program)
    passes shallow_base's check (tools/oci/shallow_layout.py) against //recipes:prod_base_expect
    (the chain's base files, what WORKSPACE's pin_oci_pull gives as `expect`); the v3 patch
    layer assembled on it (tools/oci's image writer) gives an OCI manifest whose every layer is
    OCI-typed, and it pushes: the registry serves the built digest;
  * not carrying (one file edited): the check fails naming the file and both hashes.

Inputs (runfiles): GLM53_SGLANG_INIT (the source wheel's sglang/__init__.py), GLM53_EXPECT
(//recipes:prod_base_expect), GLM53_SITE (recipes/prod_base.bzl's PROD_BASE_SITE),
GLM53_PATCH_LAYER (the v3 patch layer's outputs: descriptor JSON and tar).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tools.oci import image as oci_image
from tools.oci import pull, shallow_layout
from tools.oci.ocilayout import read_layout
from tools.oci.testing.local_registry import LocalRegistry
from tools.podman.tests.host_image import layer_of, write_layout, write_tree
from tools.release.push import push_image

OCI_LAYER_TYPES = {"application/vnd.oci.image.layer.v1.tar", "application/vnd.oci.image.layer.v1.tar+gzip"}


def _site() -> str:
    return os.environ["GLM53_SITE"].strip("/")


def _expected() -> dict[str, str]:
    """{image path: sha256} of //recipes:prod_base_expect."""
    return {f["path"]: f["sha256"] for f in json.loads(Path(os.environ["GLM53_EXPECT"]).read_text())["files"]}


def _sglang_files(edit: str | None = None) -> dict[str, bytes]:
    """The expected files from the 0.5.19 wheel, at their image paths; `edit` appends a line."""
    root = Path(os.environ["GLM53_SGLANG_INIT"]).parent.parent  # the directory holding sglang/
    files = {}
    for path in _expected():
        rel = path.removeprefix(_site() + "/")
        data = (root / rel).read_bytes()
        if rel == edit:
            data += b"# edited\n"
        files[path] = data
    return files


def _push_docker_typed(tmp: Path, reg: LocalRegistry, path: str, tag: str, files: dict[str, bytes]) -> str:
    tree = tmp / f"{tag}.root"
    for rel, data in files.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(data)
    filler = layer_of(write_tree(tmp / f"{tag}.filler", {"etc/os-release": "ID=synthetic\n"}))
    layout = tmp / f"{tag}.oci"
    write_layout(layout, [filler, layer_of(tree)])
    return reg.seed(f"oci:{layout}", path, tag, "--format", "v2s2")


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prod-small")
    with LocalRegistry(tmp / "registry") as reg:
        yield tmp, reg


def _pull(tmp: Path, reg: LocalRegistry, path: str, digest: str, name: str) -> Path:
    out = tmp / name
    pull.fetch(reg.skopeo, reg.repository(path), digest, "linux/amd64", out, scan=[f"{_site()}/sglang"])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["mediaType"] == "application/vnd.docker.distribution.manifest.v2+json"
    assert {l["mediaType"] for l in manifest["layers"]} == {"application/vnd.docker.image.rootfs.diff.tar.gzip"}
    return out


def _check(shallow: Path, capsys) -> tuple[int, str]:
    """shallow_base's action, with the arguments the rule gives it."""
    status = shallow_layout.main([
        "--manifest", str(shallow / "manifest.json"), "--config", str(shallow / "config.json"),
        "--digest", str(shallow / "digest"), "--out", str(shallow / "checked"),
        "--files", str(shallow / "files.json"), "--expect", os.environ["GLM53_EXPECT"], "--name", "test/base"])
    return status, capsys.readouterr().err


def _patch_layer() -> tuple[str, str]:
    paths = os.environ["GLM53_PATCH_LAYER"].split()
    return (next(p for p in paths if p.endswith(".descriptor.json")), next(p for p in paths if p.endswith(".tar")))


def test_carrying_docker_typed_base_builds_an_all_oci_image_that_pushes(registry, capsys) -> None:
    tmp, reg = registry
    digest = _push_docker_typed(tmp, reg, "prod/sglang", "carrying", _sglang_files())
    shallow = _pull(tmp, reg, "prod/sglang", digest, "carrying")
    status, err = _check(shallow, capsys)
    assert status == 0, err

    descriptor, blob = _patch_layer()
    out = tmp / "engine"
    assert oci_image.main([
        "--base", str(shallow / "checked"), "--layer", descriptor, "--embed", f"{descriptor}={blob}",
        f"--label=org.opencontainers.image.base.name={reg.address}/prod/sglang",
        f"--label-from-file=org.opencontainers.image.base.digest={shallow / 'digest'}",
        "--ref-name", "glm53", "--out-layout", str(out / "layout"), "--out-digest", str(out / "digest"),
    ]) == 0
    built = (out / "digest").read_text().strip()
    manifest = json.loads((out / "layout/blobs/sha256" / built.split(":")[1]).read_text())
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    assert {l["mediaType"] for l in manifest["layers"]} <= OCI_LAYER_TYPES
    assert manifest["layers"][-1]["digest"] == json.loads(Path(descriptor).read_text())["digest"]

    engine = read_layout(out / "layout")
    served = push_image(engine, reg.repository("nearai/sglang-glm53"), "prod-small", reg.skopeo)
    assert served == built


def test_base_without_the_series_files_is_refused_naming_the_file(registry, capsys) -> None:
    tmp, reg = registry
    edited = "sglang/srt/entrypoints/http_server.py"
    image_path = f"{_site()}/{edited}"
    digest = _push_docker_typed(tmp, reg, "prod/not-sglang", "not-carrying", _sglang_files(edit=edited))
    shallow = _pull(tmp, reg, "prod/not-sglang", digest, "not-carrying")
    status, err = _check(shallow, capsys)
    assert status == 1
    want = _expected()[image_path]
    have = hashlib.sha256(_sglang_files(edit=edited)[image_path]).hexdigest()
    assert f"/{image_path} (series file python/{edited}) has sha256 {have}, the patch series v3" in err
    assert f"expects {want}" in err
    assert err.count("has sha256") == 1  # only the edited file differs
    assert "bazel run //recipes/bases:pin_prod" in err
