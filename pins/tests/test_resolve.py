"""The resolver end to end: a real registry on 127.0.0.1 (Debian's docker-registry, images
pushed with skopeo) and a loopback TEST DOUBLE of the Hugging Face Hub API (pins/testing)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pins import resolve, table
from pins.testing.fake_hub import FakeHub
from tools.podman.tests.host_image import layer_of, write_layout, write_tree
from tools.oci.registry import Repository, Skopeo
from tools.oci.testing.local_registry import LocalRegistry

COMMIT_1, COMMIT_2 = "1" * 40, "2" * 40
TEMPLATE = b"{{ messages }}\n"


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("registry")
    with LocalRegistry(tmp / "data") as reg:
        skopeo = Skopeo(policy=tmp / "policy.json")
        skopeo.write_policy()
        yield reg, skopeo, tmp


def _push(registry, path: str, tag: str, content: str) -> str:
    reg, skopeo, tmp = registry
    layout = tmp / f"{path.replace('/', '_')}-{tag}-{abs(hash(content))}"
    digest = write_layout(layout, [layer_of(write_tree(layout.with_suffix(".root"), {"f": content}))])
    skopeo.run(["copy", "--preserve-digests", "--dest-tls-verify=false", f"oci:{layout}",
                 Repository(reg.address, path).docker_ref(tag=tag)])
    return digest


def _table(tmp_path: Path, registry_address: str) -> Path:
    """The committed table with `nginx` pointed at the loopback registry, as a scratch copy."""
    pins = table.load()
    nginx = replace(pins.pins["nginx"], repository=f"{registry_address}/library/nginx")
    path = tmp_path / "repository_locations.bzl"
    table.write(pins.with_pin(nginx), path)
    return path


def test_image_row_resolved_with_provenance_then_a_moved_tag_is_refused(registry, tmp_path, capsys) -> None:
    reg = registry[0]
    first = _push(registry, "library/nginx", "1.29-alpine", "one")
    path = _table(tmp_path, reg.address)
    before = path.read_text()
    assert resolve.main(["nginx", "--table", str(path)]) == 0
    pin = table.load(path).pins["nginx"]
    assert pin.resolved and pin.digest == first and pin.intended == "1.29-alpine"
    assert pin.provenance.source == f"docker://{reg.address}/library/nginx:1.29-alpine"
    assert pin.provenance.command.startswith("skopeo inspect --raw")
    # Only the nginx row changed.
    changed = [l for l in path.read_text().splitlines() if l not in before.splitlines()]
    assert all(("digest" in l or "resolved_at" in l or "command" in l or "source" in l or l.strip() == "},"
                or '"provenance": {' in l) for l in changed), changed

    moved = _push(registry, "library/nginx", "1.29-alpine", "two")
    assert resolve.main(["nginx", "--table", str(path)]) == 1
    assert "1.29-alpine moved" in capsys.readouterr().err
    assert table.load(path).pins["nginx"].digest == first
    assert resolve.main(["nginx", "--table", str(path), "--allow-tag-move"]) == 0
    assert table.load(path).pins["nginx"].digest == moved


def test_unknown_tag_and_missing_intended_tag(registry, tmp_path, capsys) -> None:
    path = _table(tmp_path, registry[0].address)
    assert resolve.main(["nginx", "--tag", "no-such-tag", "--table", str(path)]) == 1
    assert "has no tag 'no-such-tag'" in capsys.readouterr().err
    assert resolve.main(["vllm_proxy_rs", "--table", str(path)]) == 1
    assert "records no intended tag" in capsys.readouterr().err
    assert table.render(table.load(path)) == path.read_text()  # nothing written


def test_hub_rows_resolved_through_the_hub_api_double(tmp_path) -> None:
    pins = table.load()
    fp8, tpl = pins.pins["hf_glm53_flash_fp8"], pins.pins["hf_glm53_chat_template"]
    repos = {fp8.repository: {"main": (COMMIT_1, {tpl.path: TEMPLATE})}}
    path = tmp_path / "repository_locations.bzl"
    table.write(pins, path)
    with FakeHub(repos) as hub:
        args = ["hf_glm53_flash_fp8", "hf_glm53_chat_template", "--table", str(path),
                "--hub-endpoint", hub.endpoint]
        assert resolve.main(args) == 0
        got = table.load(path).pins
        assert got["hf_glm53_flash_fp8"].revision == COMMIT_1
        assert got["hf_glm53_chat_template"].revision == COMMIT_1
        import hashlib
        assert got["hf_glm53_chat_template"].sha256 == hashlib.sha256(TEMPLATE).hexdigest()
        assert got["hf_glm53_flash_fp8"].provenance.source == \
            f"{hub.endpoint}/api/models/{fp8.repository}/revision/main"
        # main moves to another commit: refused unless allowed.
        repos[fp8.repository]["main"] = (COMMIT_2, {tpl.path: TEMPLATE})
        assert resolve.main(args) == 1
        assert resolve.main(args + ["--allow-tag-move"]) == 0
        assert table.load(path).pins["hf_glm53_flash_fp8"].revision == COMMIT_2
        # A repository the Hub does not have is an error naming the pin.
        assert resolve.main(["hf_glm53_flash_w4afp8", "--table", str(path), "--hub-endpoint", hub.endpoint]) == 1
