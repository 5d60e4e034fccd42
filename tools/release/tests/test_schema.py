"""The one release-record parser: each malformed key is refused naming the file, the key and the fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

from tools.release import schema
from tools.release.tests.fixtures import build

REPO = "docker.io/nearai/sglang-glm53"
FIX = "bazel run //recipes:glm53_v3.release -- --repository HOST/REPO"


def _record(tmp_path: Path) -> dict[str, Any]:
    facts = json.loads(build(tmp_path).facts.read_text())
    del facts["base_lock_current"]
    return {**facts, "repository": REPO, "tag": "glm53-v3-0123456789ab", "published": False,
            "source_revision": "unknown", "recorded_at": "2026-01-01T00:00:00Z"}


def _set(key: str, value: Any) -> Callable[[dict], None]:
    def edit(obj: dict) -> None:
        node = obj
        *parents, last = key.split(".")
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[last] = value
    return edit


def _del(key: str) -> Callable[[dict], None]:
    def edit(obj: dict) -> None:
        node = obj
        *parents, last = key.split(".")
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        del node[int(last) if isinstance(node, list) else last]
    return edit


def test_a_written_record_reads_back(tmp_path: Path) -> None:
    obj = _record(tmp_path)
    path = tmp_path / "glm53_v3.json"
    path.write_text(json.dumps(obj))
    record = schema.read(path)
    assert record.to_json() == {k: obj[k] for k in schema.RECORD_KEYS}
    assert record.image == f"{REPO}@{obj['digest']}"
    assert record.source == str(path)
    assert schema.Record.from_json(json.loads(record.text()), "x") == record


@pytest.mark.parametrize("edit,key,says", [
    (_set("note", "x"), "unknown ['note']", "keys missing"),
    (_del("recorded_at"), "missing ['recorded_at']", "keys missing"),
    (_set("digest", "sha256:abc"), "digest", "sha256:<64 lowercase hex>"),
    (_set("digest", "sha256:" + "a" * 64 + "\n"), "digest", "sha256:<64 lowercase hex>"),
    (_set("patch_layer_digest", None), "patch_layer_digest", "non-empty string"),
    (_set("fingerprint", "sha512:" + "0" * 64), "fingerprint", "sha256:<64 lowercase hex>"),
    (_set("repository", REPO + ":latest"), "repository", "no tag or digest"),
    (_set("repository", "nearai/sglang-glm53"), "repository", "not a registry host"),
    (_set("tag", "-x"), "tag", "not allowed"),
    (_set("published", "true"), "published", "true or false"),
    (_set("recipe", "glm53_v3"), "recipe", "does not match"),
    (_set("source_revision", "HEAD"), "source_revision", "does not match"),
    (_set("recorded_at", "yesterday"), "recorded_at", "does not match"),
    (_set("base.digest", "latest"), "base: digest", "sha256:<64 lowercase hex>"),
    (_set("base.flavor", "gpu"), "base: flavor 'gpu'", "cpu-test, production"),
    (_del("base.flavor"), "base: keys missing ['flavor']", ""),
    (_set("base", "x"), "base: expected a JSON object", ""),
    (_set("patches", {}), "patches must be a list", ""),
    (_del("patches.0.switch"), "patches[0]: keys missing ['switch']", ""),
    (_set("patches.1.switch", {"env": "X"}), "patches[1]: switch", "kind"),
    (_set("patches.0.name", 3), "patches[0]: name = 3", "non-empty string"),
])
def test_malformed_records_name_file_key_and_fix(tmp_path: Path, edit, key: str, says: str) -> None:
    obj = _record(tmp_path)
    edit(obj)
    path = tmp_path / "glm53_v3.json"
    path.write_text(json.dumps(obj))
    with pytest.raises(schema.RecordError) as err:
        schema.read(path)
    message = str(err.value)
    assert message.startswith(f"{path}: ")
    assert key in message and says in message
    assert FIX.replace("HOST/REPO", "") in message


def test_missing_and_broken_files(tmp_path: Path) -> None:
    path = tmp_path / "glm53_v2.json"
    assert schema.load(path) is None
    with pytest.raises(schema.RecordError, match=r"no release record for //recipes:glm53_v2; record the built image with "
                                                 r"`bazel run //recipes:glm53_v2.release"):
        schema.read(path)
    path.write_text("{")
    with pytest.raises(schema.RecordError, match="not JSON .*glm53_v2.release"):
        schema.read(path)
    path.write_text("[]")
    with pytest.raises(schema.RecordError, match="expected a JSON object, found list"):
        schema.read(path)


def test_facts_are_read_strictly_too(tmp_path: Path) -> None:
    built = build(tmp_path)
    facts = schema.Facts.load(built.facts)
    assert facts.base_lock_current is True and [p.name for p in facts.patches] == ["a", "stall"]
    obj = json.loads(built.facts.read_text())
    obj["base_lock_current"] = "yes"
    built.facts.write_text(json.dumps(obj))
    with pytest.raises(schema.RecordError, match=r"base_lock_current = 'yes' must be true or false; "
                                                 r"facts are written by the build: rebuild them with "
                                                 r"`bazel build //recipes:glm53_v3.release_facts`"):
        schema.Facts.load(built.facts)


def test_kill_switch_of_an_on_by_default_patch() -> None:
    stall = schema.Patch("stall", "v3", "on-30s", {"kind": "on-by-default", "disable": "X_SECS=0",
                                                    "settings": {"X_SECS": "30"}})
    assert stall.kill_switch == ("X_SECS", "30")
    assert schema.Patch("a", "v1", "always", {"kind": "unconditional"}).kill_switch is None
