"""End to end against a real registry (Debian's docker-registry) on 127.0.0.1.

Each test starts its own registry with storage under the test's temp dir and stops it by pid.
"""

from __future__ import annotations

import hashlib
import json
import urllib.request
from pathlib import Path

import pytest

from tools.release import push as push_lib
from tools.release import record as rec
from tools.oci.registry import Skopeo
from tools.oci.testing.local_registry import LocalRegistry
from tools.release.tests.fixtures import build


@pytest.fixture
def registry(tmp_path: Path):
    with LocalRegistry(tmp_path / "registry") as reg:
        yield reg


def _served(registry: LocalRegistry, repo: str, ref: str) -> str | None:
    request = urllib.request.Request(
        f"http://{registry.address}/v2/{repo}/manifests/{ref}",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
    )
    try:
        with urllib.request.urlopen(request) as resp:
            return "sha256:" + hashlib.sha256(resp.read()).hexdigest()
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise


def _tags(registry: LocalRegistry, repo: str) -> list[str]:
    try:
        with urllib.request.urlopen(f"http://{registry.address}/v2/{repo}/tags/list") as resp:
            return sorted(json.load(resp).get("tags") or [])
    except urllib.error.HTTPError:
        return []


def _push(built, registry: LocalRegistry, tag: str, records: Path, *extra: str, repo: str = "test/sglang") -> int:
    return push_lib.main([
        f"--repository={registry.address}/{repo}", f"--tag={tag}",
        "--layout", str(built.layout), "--digest-file", str(built.digest_file), "--facts", str(built.facts),
        "--records-dir", str(records), "--policy-dir", str(records.parent / "policy"), *extra,
    ])


def test_push_records_the_confirmed_digest(tmp_path: Path, registry: LocalRegistry, capsys) -> None:
    built = build(tmp_path)
    assert _push(built, registry, "glm53-v3-test", tmp_path / "rel") == 0
    assert _served(registry, "test/sglang", "glm53-v3-test") == built.digest
    record = rec.load(tmp_path / "rel/glm53_v3.json")
    assert record.published is True
    assert record.digest == built.digest
    assert record.repository == f"{registry.address}/test/sglang" and record.tag == "glm53-v3-test"
    # Pushing again changes nothing.
    before = (tmp_path / "rel/glm53_v3.json").read_text()
    assert _push(built, registry, "glm53-v3-test", tmp_path / "rel") == 0
    assert (tmp_path / "rel/glm53_v3.json").read_text() == before
    assert "unchanged" in capsys.readouterr().out


@pytest.mark.parametrize("tag", ["-bad", ".bad", "bad tag", "a" * 129, "bad:tag"])
def test_bad_tag_is_refused_before_pushing(tmp_path: Path, registry: LocalRegistry, tag: str, capsys) -> None:
    built = build(tmp_path)
    assert _push(built, registry, tag, tmp_path / "rel") == 1
    assert "not allowed" in capsys.readouterr().err
    assert _tags(registry, "test/sglang") == []
    assert not (tmp_path / "rel").exists()


def test_released_then_pushed(tmp_path: Path, registry: LocalRegistry) -> None:
    built = build(tmp_path)
    repo = f"{registry.address}/test/sglang"
    assert rec.main(["release", "--facts", str(built.facts), "--digest-file", str(built.digest_file),
                     "--repository", repo, "--records-dir", str(tmp_path / "rel")]) == 0
    tag = rec.load(tmp_path / "rel/glm53_v3.json").tag
    assert rec.load(tmp_path / "rel/glm53_v3.json").published is False
    assert _push(built, registry, tag, tmp_path / "rel") == 0
    record = rec.load(tmp_path / "rel/glm53_v3.json")
    assert record.published is True and record.tag == tag and record.digest == built.digest


def test_push_of_another_build_than_the_record_is_refused(tmp_path: Path, registry: LocalRegistry, capsys) -> None:
    first = build(tmp_path / "1")
    assert _push(first, registry, "one", tmp_path / "rel") == 0
    second = build(tmp_path / "2", content="changed patch")
    assert _push(second, registry, "two", tmp_path / "rel") == 1
    err = capsys.readouterr().err
    assert f"holds {first.digest}" in err and "bazel run //recipes:glm53_v3.release" in err
    assert _tags(registry, "test/sglang") == ["one"]  # nothing was pushed
    assert rec.load(tmp_path / "rel/glm53_v3.json").digest == first.digest


def test_tag_never_moves(tmp_path: Path, registry: LocalRegistry, capsys) -> None:
    first = build(tmp_path / "1")
    second = build(tmp_path / "2", content="changed patch")
    assert _push(first, registry, "v3", tmp_path / "rel1") == 0
    assert _push(second, registry, "v3", tmp_path / "rel2") == 1
    assert "refusing to move the tag" in capsys.readouterr().err
    assert _served(registry, "test/sglang", "v3") == first.digest
    assert not (tmp_path / "rel2").exists()


def test_registry_rewriting_the_image_is_refused(tmp_path: Path, registry: LocalRegistry, monkeypatch, capsys) -> None:
    """Without --preserve-digests skopeo gzips the layers: the registry then holds another
    manifest. The push must notice and record nothing."""
    built = build(tmp_path)
    original = Skopeo.run

    def without_preserve(self, args):
        return original(self, [a for a in args if a != "--preserve-digests"])

    monkeypatch.setattr(Skopeo, "run", without_preserve)
    assert _push(built, registry, "rewritten", tmp_path / "rel") == 1
    assert "does not hold the built image" in capsys.readouterr().err
    served = _served(registry, "test/sglang", "rewritten")
    assert served is not None and served != built.digest
    assert not (tmp_path / "rel/glm53_v3.json").exists()


def test_record_for_another_repository_is_refused(tmp_path: Path, registry: LocalRegistry, capsys) -> None:
    built = build(tmp_path)
    assert rec.main(["release", "--facts", str(built.facts), "--digest-file", str(built.digest_file),
                     "--repository", "docker.io/nearai/sglang-glm53", "--records-dir", str(tmp_path / "rel")]) == 0
    assert _push(built, registry, "x", tmp_path / "rel") == 1
    assert "records repository docker.io/nearai/sglang-glm53" in capsys.readouterr().err
    assert _tags(registry, "test/sglang") == []


def test_layout_not_matching_the_digest_file_is_refused(tmp_path: Path, registry: LocalRegistry, capsys) -> None:
    built = build(tmp_path)
    other = build(tmp_path / "other", content="other")
    assert push_lib.main([
        f"--repository={registry.address}/test/sglang", "--tag=x", "--layout", str(other.layout),
        "--digest-file", str(built.digest_file), "--facts", str(built.facts),
        "--records-dir", str(tmp_path / "rel"), "--policy-dir", str(tmp_path / "policy"),
    ]) == 1
    assert "rebuild with" in capsys.readouterr().err
    assert _tags(registry, "test/sglang") == []
