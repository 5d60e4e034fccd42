"""The production-base path end to end on a small synthetic base, against a real registry on 127.0.0.1.

A two-layer base built here (as the CPU base is) gets the real v3 patch layer with tools/oci's
image writer: that is the locally built engine. The base is then seeded into a loopback
registry and pulled shallowly (manifest and config only, as the oci_pull repository rule and
its shallow_base do: same code, tools/oci/pull.py and shallow_layout.py), and the patch layer
is assembled on the pull, reading only descriptors. Two seeds:

  * byte-identical (skopeo --preserve-digests): the engine built on the shallow pull has exactly
    the digest of the one built on the local base;
  * recompressed (plain skopeo copy gzips the layers, like a registry-hosted base): another
    base digest and image digest, but the same patch-layer digest; and the image, whose base
    blobs this machine never had, pushes and the registry serves the built digest.

The same properties hold for the 2 GB CPU base; a small base proves them in seconds.
Input (runfiles): GLM53_PATCH_LAYER (the v3 patch layer's tar and descriptor JSON).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tools.oci import image as oci_image
from tools.oci import pull, shallow_layout
from tools.oci.materialize import link_view
from tools.oci.ocilayout import read_layout
from tools.oci.registry import RegistryError, Repository
from tools.oci.testing.local_registry import LocalRegistry
from tools.podman.tests.host_image import layer_of, write_layout, write_tree
from tools.release.push import push_image

LABELS = ["--label=org.opencontainers.image.title=glm53 test engine"]


def _patch_layer() -> tuple[str, str]:
    paths = os.environ["GLM53_PATCH_LAYER"].split()
    return (next(p for p in paths if p.endswith(".descriptor.json")), next(p for p in paths if p.endswith(".tar")))


def _pull(registry: LocalRegistry, repo: Repository, digest: str, out: Path) -> dict:
    """The oci_pull rule's fetch, then its shallow_base action: `out`/layout is the base."""
    pin = pull.fetch(registry.skopeo, repo, digest, "linux/amd64", out)
    assert shallow_layout.main(["--manifest", str(out / "manifest.json"), "--config", str(out / "config.json"),
                                "--digest", str(out / "digest"), "--out", str(out / "layout")]) == 0
    return pin


def _assemble(base_layout: Path, out: Path, *labels: str) -> str:
    descriptor, blob = _patch_layer()
    assert oci_image.main([
        "--base", str(base_layout), "--layer", descriptor, "--embed", f"{descriptor}={blob}",
        *LABELS, *labels, "--ref-name", "glm53", "--out-layout", str(out / "layout"),
        "--out-digest", str(out / "digest"),
    ]) == 0
    return (out / "digest").read_text().strip()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prod")
    base = tmp / "base"
    write_layout(base, [layer_of(write_tree(tmp / "l1", {"etc/os-release": "ID=synthetic\n"})),
                        layer_of(write_tree(tmp / "l2", {"usr/bin/tool": "#!/bin/true\n"}))])
    local = _assemble(base, tmp / "local")
    with LocalRegistry(tmp / "registry") as registry:
        yield tmp, registry, read_layout(base, require_blobs=True), local


def test_byte_identical_seed_rebuilds_the_same_image(setup) -> None:
    tmp, registry, base, local = setup
    repo = registry.repository("base/synthetic")
    seeded = push_image(base, repo, "1", registry.skopeo)
    assert seeded == base.manifest_digest
    shallow = tmp / "shallow-identical"
    pin = _pull(registry, repo, seeded, shallow)
    assert pin["manifest_digest"] == base.manifest_digest
    # Only the manifest and config were fetched.
    assert sorted(p.name for p in (shallow / "layout/blobs/sha256").iterdir()) == sorted(
        [base.manifest_digest[7:], base.config_digest[7:]])
    assert _assemble(shallow / "layout", tmp / "rebuilt") == local


def test_recompressed_base_same_patch_layer_and_pushable(setup, capsys) -> None:
    tmp, _, base, local = setup
    # A registry of its own: skopeo remembers which blobs a registry already has and would
    # reuse the uncompressed ones instead of compressing them.
    with LocalRegistry(tmp / "registry-prod") as registry:
        repo = registry.repository("prod/sglang")
        # A plain skopeo copy gzips the layers: a base as registries usually hold it.
        prod_digest = registry.seed(f"oci:{link_view(base, tmp / 'seed' / 'layout')}", repo.path, "prod-like")
        assert prod_digest != base.manifest_digest

        shallow = tmp / "shallow-prod"
        _pull(registry, repo, prod_digest, shallow)
        layer_types = {json.loads(p.read_text())["mediaType"] for p in (shallow / "layers").iterdir()}
        assert layer_types == {"application/vnd.oci.image.layer.v1.tar+gzip"}

        out = tmp / "on-prod"
        digest = _assemble(shallow / "layout", out,
                           f"--label=org.opencontainers.image.base.name={registry.address}/{repo.path}",
                           f"--label-from-file=org.opencontainers.image.base.digest={shallow / 'digest'}")
        assert digest != local
        on_prod = read_layout(out / "layout")
        assert on_prod.layers[-1].digest == json.loads(Path(_patch_layer()[0]).read_text())["digest"]
        assert [layer.path is None for layer in on_prod.layers] == [True] * (len(on_prod.layers) - 1) + [False]

        # This machine has none of the prod base's blobs; the push seeds the base registry-side.
        dest = registry.repository("nearai/sglang-glm53")
        served = push_image(on_prod, dest, "glm53-prod-test", registry.skopeo)
        assert served == digest
        assert "copying the shallow base" in capsys.readouterr().out


def test_fetch_refuses_a_digest_the_registry_does_not_hold(setup) -> None:
    tmp, registry, _, _ = setup
    wrong = "sha256:" + "0" * 64
    with pytest.raises(RegistryError, match="manifest unknown"):
        pull.fetch(registry.skopeo, registry.repository("base/synthetic"), wrong, "linux/amd64", tmp / "wrong")
