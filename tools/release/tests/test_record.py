"""The release record writer: refusals, idempotence, atomic writes, the staleness check."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tools.files import atomic
from tools.release import record as rec
from tools.release import schema
from tools.release.tests.fixtures import DECLARATION, build

REPO = "docker.io/nearai/sglang-glm53"


def _release(built, records: Path, *extra: str) -> int:
    return rec.main(["release", "--facts", str(built.facts), "--digest-file", str(built.digest_file),
                     "--repository", REPO, "--records-dir", str(records), *extra])


def test_release_writes_the_interface_format(tmp_path: Path) -> None:
    built = build(tmp_path)
    assert _release(built, tmp_path / "rel") == 0
    obj = json.loads((tmp_path / "rel/glm53_v3.json").read_text())
    assert list(obj) == list(schema.RECORD_KEYS)
    assert obj["recipe"] == "//recipes:glm53_v3" and obj["series"] == "v3"
    assert obj["repository"] == REPO and obj["digest"] == built.digest
    assert obj["tag"] == "glm53-v3-" + built.digest[7:19]
    assert obj["published"] is False
    assert obj["recorded_at"].endswith("Z")
    assert [p["name"] for p in obj["patches"]] == ["a", "stall"]
    assert list(tmp_path.joinpath("rel").iterdir()) == [tmp_path / "rel/glm53_v3.json"]  # no temp files left


def test_release_refuses_a_digest_the_checkout_did_not_build(tmp_path: Path, capsys) -> None:
    built = build(tmp_path)
    built.digest_file.write_text("sha256:" + "e" * 64 + "\n")
    assert _release(built, tmp_path / "rel") == 1
    assert "refusing to record" in capsys.readouterr().err
    assert not (tmp_path / "rel/glm53_v3.json").exists()


def test_release_is_idempotent_and_keeps_published(tmp_path: Path, capsys) -> None:
    built = build(tmp_path)
    assert _release(built, tmp_path / "rel") == 0
    path = tmp_path / "rel/glm53_v3.json"
    published = schema.load(path)
    atomic.write_text(path, replace(published, published=True, recorded_at="2000-01-01T00:00:00Z").text())
    before = path.read_text()
    assert _release(built, tmp_path / "rel") == 0
    assert "unchanged" in capsys.readouterr().out
    assert path.read_text() == before


def test_new_build_replaces_the_record_unpublished(tmp_path: Path) -> None:
    first = build(tmp_path / "1")
    assert _release(first, tmp_path / "rel") == 0
    path = tmp_path / "rel/glm53_v3.json"
    atomic.write_text(path, replace(schema.load(path), published=True).text())
    second = build(tmp_path / "2", content="patched differently")
    assert _release(second, tmp_path / "rel") == 0
    record = schema.load(path)
    assert record.digest == second.digest and record.published is False


@pytest.mark.parametrize("tag", ["-x", ".x", "a" * 129, "a:b", "a/b", ""])
def test_release_refuses_bad_tags(tmp_path: Path, tag: str) -> None:
    assert _release(build(tmp_path), tmp_path / "rel", f"--tag={tag}") == 1


def test_hand_edited_record_is_rejected(tmp_path: Path) -> None:
    built = build(tmp_path)
    _release(built, tmp_path / "rel")
    path = tmp_path / "rel/glm53_v3.json"
    obj = json.loads(path.read_text())
    obj["note"] = "edited by hand"
    path.write_text(json.dumps(obj))
    with pytest.raises(schema.RecordError, match="unknown \\['note'\\]"):
        schema.load(path)


def _check(built, record: Path, *extra: str) -> int:
    return rec.main(["check", "--facts", str(built.facts), "--record", str(record),
                     "--declaration", str(built.declaration), *extra])


def test_check_passes_on_a_fresh_record(tmp_path: Path) -> None:
    built = build(tmp_path)
    _release(built, tmp_path / "rel")
    assert _check(built, tmp_path / "rel/glm53_v3.json") == 0


def test_check_fails_when_the_patch_layer_changes(tmp_path: Path, capsys) -> None:
    _release(build(tmp_path / "1"), tmp_path / "rel")
    changed = build(tmp_path / "2", content="another patch result")
    assert _check(changed, tmp_path / "rel/glm53_v3.json") == 1
    err = capsys.readouterr().err
    assert "patch_layer_digest" in err
    assert "bazel run //recipes:glm53_v3.release -- --repository " + REPO in err


def test_check_fails_when_the_series_changes(tmp_path: Path, capsys) -> None:
    built = build(tmp_path)
    _release(built, tmp_path / "rel")
    declaration = json.loads(json.dumps(DECLARATION))
    declaration["patches"][1]["sha256"] = "3" * 64
    built.declaration.write_text(json.dumps(declaration))
    assert _check(built, tmp_path / "rel/glm53_v3.json") == 1
    assert "the series changed" in capsys.readouterr().err


def test_check_base_drift_warns_unless_strict(tmp_path: Path, capsys) -> None:
    _release(build(tmp_path / "1"), tmp_path / "rel")
    drifted = build(tmp_path / "2", base_text="newer debian", lock_current=False)
    record = tmp_path / "rel/glm53_v3.json"
    assert _check(drifted, record) == 0
    assert "warning" in capsys.readouterr().err
    assert _check(drifted, record, "--base-strict") == 1


def test_check_changed_base_with_a_current_lock_is_an_error(tmp_path: Path, capsys) -> None:
    _release(build(tmp_path / "1"), tmp_path / "rel")
    rebased = build(tmp_path / "2", base_text="relocked debian", lock_current=True)
    assert _check(rebased, tmp_path / "rel/glm53_v3.json") == 1
    assert "base " in capsys.readouterr().err


def test_check_names_the_command_when_the_record_is_missing(tmp_path: Path, capsys) -> None:
    built = build(tmp_path)
    assert _check(built, tmp_path / "rel/glm53_v3.json") == 1
    assert "bazel run //recipes:glm53_v3.release" in capsys.readouterr().err


def test_record_carries_base_flavor_and_patch_switches(tmp_path: Path) -> None:
    built = build(tmp_path)
    _release(built, tmp_path / "rel")
    obj = json.loads((tmp_path / "rel/glm53_v3.json").read_text())
    assert obj["base"]["flavor"] == "cpu-test"
    assert [p["switch"]["kind"] for p in obj["patches"]] == ["unconditional", "on-by-default"]


def test_check_fails_when_the_base_flavor_changes(tmp_path: Path, capsys) -> None:
    built = build(tmp_path)
    _release(built, tmp_path / "rel")
    facts = json.loads(built.facts.read_text())
    facts["base"]["flavor"] = "production"
    built.facts.write_text(json.dumps(facts))
    assert _check(built, tmp_path / "rel/glm53_v3.json") == 1
    assert "base flavor cpu-test, but the recipe now builds on a production base" in capsys.readouterr().err


def test_a_record_without_flavor_is_rejected_when_read(tmp_path: Path) -> None:
    built = build(tmp_path)
    _release(built, tmp_path / "rel")
    path = tmp_path / "rel/glm53_v3.json"
    obj = json.loads(path.read_text())
    del obj["base"]["flavor"]
    path.write_text(json.dumps(obj))
    with pytest.raises(schema.RecordError, match=r"base: keys missing \['flavor'\]"):
        schema.load(path)
    # `release` replaces such a record instead of refusing to read it.
    assert _release(built, tmp_path / "rel") == 0
    assert schema.load(path).base.flavor == "cpu-test"
