"""Release records (deploy/releases.py): read strictly, bound to the recipe they claim, looked up
by digest, image and recipe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploy.releases import ReleaseError, load_bindings, load_dir, load_release

# FIXTURE records (made-up digests).
FIXTURE_RELEASES = Path(__file__).absolute().parents[1] / "testdata" / "releases"


@pytest.fixture
def records():
    return {p.stem: load_release(p.stem, p) for p in sorted(FIXTURE_RELEASES.glob("*.json"))}


def _record(tmp_path, **changes):
    data = json.loads((FIXTURE_RELEASES / "glm53_v2.json").read_text())
    data.update(changes)
    path = tmp_path / "glm53_v2.json"
    path.write_text(json.dumps(data))
    return path


def test_fixture_record_reads(records):
    rec = records["glm53_v2"]
    assert rec.image == f"docker.io/nearai/sglang-glm53@{rec.digest}"
    assert rec.engine_image == rec.digest[7:19]
    assert rec.has_qsplit and not rec.has_event_loop_v3
    assert records["glm53_v3"].has_event_loop_v3 and not records["glm53_v1"].has_qsplit


def test_record_bound_to_another_recipe(tmp_path):
    path = _record(tmp_path, recipe="//recipes:glm53_v3")
    with pytest.raises(ReleaseError, match="bound as the release of //recipes:glm53_v2"):
        load_release("glm53_v2", path)


@pytest.mark.parametrize("digest", ["sha256:abc", "glm53-v2-latest", "sha512:" + "0" * 64])
def test_malformed_digest(tmp_path, digest):
    with pytest.raises(ReleaseError, match="digest"):
        load_release("glm53_v2", _record(tmp_path, digest=digest))


def test_repository_with_a_tag_is_refused(tmp_path):
    path = _record(tmp_path, repository="docker.io/nearai/sglang-glm53:latest")
    with pytest.raises(ReleaseError, match="repository"):
        load_release("glm53_v2", path)


def test_missing_record_names_the_command(tmp_path):
    with pytest.raises(ReleaseError, match=r"bazel run //recipes:glm53_v2.release"):
        load_release("glm53_v2", tmp_path / "glm53_v2.json")


def test_release_binding_syntax():
    with pytest.raises(ReleaseError, match="NAME=PATH"):
        load_bindings(["glm53_v2"])



def test_release_binding_given_twice():
    v2 = f"glm53_v2={FIXTURE_RELEASES / 'glm53_v2.json'}"
    with pytest.raises(ReleaseError, match="given twice"):
        load_bindings([v2, v2])


def test_directory_lookups(records):
    releases = load_dir(FIXTURE_RELEASES)
    v3 = records["glm53_v3"]
    assert releases.by_digest(v3.digest) == v3 and releases.by_recipe("//recipes:glm53_v3") == v3
    assert releases.by_digest("sha256:" + "0" * 64) is None
    assert sorted(r.name for r in releases.by_image().values()) == ["glm53_v1", "glm53_v2", "glm53_v3"]


def test_missing_directory(tmp_path):
    with pytest.raises(ReleaseError, match="no release-record directory"):
        load_dir(tmp_path / "none")
