"""The production-base path end to end, against a real registry on 127.0.0.1.

A loopback registry is seeded with the CPU base; the base is then pulled shallowly (manifest
and config only, as the oci_pull repository rule does: same code, tools/release/oci_fetch.py)
and the recipe's patch layer is assembled on it with tools/oci's image writer, reading only
descriptors. Two seeds:

  * byte-identical (skopeo --preserve-digests): the engine image built on the shallow pull has
    exactly the digest of the one built on the local CPU base;
  * recompressed (plain skopeo copy gzips the layers, like a registry-hosted base): another
    base digest and image digest, but the same patch-layer digest; and the image, whose base
    blobs this machine never had, pushes and the registry serves the built digest.

Inputs (runfiles-relative JSON written by image_files targets): GLM53_CPU_BASE_FILES,
GLM53_ENGINE_FILES.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tools.oci import image as oci_image
from tools.podman.oci_layout import link_view, parse_blob_args, read_image
from tools.release import oci_fetch
from tools.release.push import push_image
from tools.release.registry import Repository, Skopeo
from tools.release.testing.local_registry import LocalRegistry


def _files(env: str) -> dict:
    return json.loads(Path(os.environ[env]).read_text())


def _image(files: dict):
    return read_image(Path(files["layout"]), parse_blob_args(files["blobs"]))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prod")
    base_files, engine_files = _files("GLM53_CPU_BASE_FILES"), _files("GLM53_ENGINE_FILES")
    with LocalRegistry(tmp / "registry") as registry:
        skopeo = Skopeo(policy=tmp / "policy.json")
        skopeo.write_policy()
        yield tmp, registry, skopeo, _image(base_files), _image(engine_files), engine_files, base_files
    shutil.rmtree(tmp, ignore_errors=True)  # registries holding the 2 GB base: do not keep them


def _patch_layer(engine_files: dict, engine) -> tuple[str, str]:
    top = engine.layers[-1].digest
    for pair in engine_files["blobs"]:
        descriptor, _, blob = pair.partition("=")
        if json.loads(Path(descriptor).read_text())["digest"] == top:
            return descriptor, blob
    raise AssertionError(f"no blob for the top layer {top}")


def _assemble_on(shallow: Path, engine, engine_files: dict, out: Path) -> str:
    """engine_image's assembly step, on a shallow base: the CPU image's labels, the same patch layer."""
    descriptor, blob = _patch_layer(engine_files, engine)
    labels = [f"--label={k}={v}" for k, v in sorted(engine.labels.items())
              if not k.startswith("org.opencontainers.image.base.")]
    assert oci_image.main([
        "--base", str(shallow / "layout"), "--layer", descriptor, "--layer-manifest", "-",
        "--embed", f"{descriptor}={blob}", *labels,
        f"--label=org.opencontainers.image.base.name={json.loads((shallow / 'pin.json').read_text())['registry']}"
        f"/{json.loads((shallow / 'pin.json').read_text())['repository']}",
        f"--label-from-file=org.opencontainers.image.base.digest={shallow / 'digest'}",
        "--ref-name", "glm53", "--out-layout", str(out / "layout"), "--out-digest", str(out / "digest"),
    ]) == 0
    return (out / "digest").read_text().strip()


def test_byte_identical_seed_rebuilds_the_same_image(setup) -> None:
    tmp, registry, skopeo, base, engine, engine_files, base_files = setup
    repo = Repository(registry.address, "base/sglang-cpu")
    seeded = push_image(base, repo, "0.5.19", skopeo)
    assert seeded == base.manifest_digest
    shallow = tmp / "shallow-identical"
    pin = oci_fetch.fetch(registry.address, repo.path, seeded, "linux/amd64", shallow)
    assert pin["manifest_digest"] == base.manifest_digest
    assert (shallow / "config.json").read_bytes() == Path(base_files["config"]).read_bytes()
    # Only the manifest and config were fetched.
    assert sorted(p.name for p in (shallow / "layout/blobs/sha256").iterdir()) == sorted(
        [base.manifest_digest[7:], base.config_digest[7:]])
    out = tmp / "rebuilt-identical"
    # With the CPU build's own base.name the config is byte-identical, hence the digest.
    descriptor, blob = _patch_layer(engine_files, engine)
    labels = [f"--label={k}={v}" for k, v in sorted(engine.labels.items())]
    assert oci_image.main([
        "--base", str(shallow / "layout"), "--layer", descriptor, "--layer-manifest", "-",
        "--embed", f"{descriptor}={blob}", *labels, "--ref-name", "glm53",
        "--out-layout", str(out / "layout"), "--out-digest", str(out / "digest"),
    ]) == 0
    assert (out / "digest").read_text().strip() == engine.manifest_digest


def test_recompressed_base_same_patch_layer_and_pushable(setup, capsys) -> None:
    tmp, _, skopeo, base, engine, engine_files, _ = setup
    # A registry of its own: skopeo remembers which blobs a registry already has and would
    # reuse the uncompressed ones instead of compressing them.
    with LocalRegistry(tmp / "registry-prod") as registry:
        repo = Repository(registry.address, "prod/sglang")
        # A plain skopeo copy gzips the layers: a base as registries usually hold it.
        seed = tmp / "seed"
        skopeo._run(["copy", "--dest-tls-verify=false", f"oci:{link_view(base, seed / 'layout')}",
                     repo.docker_ref(tag="prod-like")])
        prod_digest = skopeo.manifest_digest(repo, "prod-like")
        assert prod_digest is not None and prod_digest != base.manifest_digest

        shallow = tmp / "shallow-prod"
        oci_fetch.fetch(registry.address, repo.path, prod_digest, "linux/amd64", shallow)
        layer_types = {json.loads(p.read_text())["mediaType"] for p in (shallow / "layers").iterdir()}
        assert layer_types == {"application/vnd.oci.image.layer.v1.tar+gzip"}

        out = tmp / "on-prod"
        digest = _assemble_on(shallow, engine, engine_files, out)
        assert digest != engine.manifest_digest
        on_prod = read_image(out / "layout", allow_shallow=True)
        assert on_prod.layers[-1].digest == engine.layers[-1].digest  # the patch layer is base-independent
        assert [layer.path is None for layer in on_prod.layers] == [True] * (len(on_prod.layers) - 1) + [False]

        # This machine has none of the prod base's blobs; the push seeds the base registry-side.
        dest = Repository(registry.address, "nearai/sglang-glm53")
        served = push_image(on_prod, dest, "glm53-prod-test", skopeo)
        assert served == digest
        assert "copying the shallow base" in capsys.readouterr().out


def test_fetch_refuses_content_that_does_not_match_the_pin(setup) -> None:
    tmp, registry, skopeo, base, *_ = setup
    wrong = "sha256:" + "0" * 64
    with pytest.raises(oci_fetch.FetchError, match="HTTP 404"):
        oci_fetch.fetch(registry.address, "base/sglang-cpu", wrong, "linux/amd64", tmp / "wrong")
