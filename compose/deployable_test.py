"""The deployability gate on small compose documents: each reason on the input it guards against."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from compose import deployable
from pins import table
from tools.release.schema import Base, Patch, Record

SENTINEL = table.load().unresolved
DIGEST = "sha256:" + "a" * 64
ENGINE_DIGEST = "sha256:" + "b" * 64
PROVENANCE = table.Provenance("2026-12-01T00:00:00Z", "test", "test")
STALL = Patch("event-loop-stall-dump", "v1", "on-30s", {
    "kind": "on-by-default", "disable": "SGLANG_EVENT_LOOP_STALL_DUMP_SECS=0",
    "settings": {"SGLANG_EVENT_LOOP_STALL_DUMP_SECS": "30"}})


def _pins(resolved: bool) -> table.PinTable:
    value = DIGEST if resolved else SENTINEL
    rev = "c" * 40 if resolved else SENTINEL
    prov = PROVENANCE if resolved else None
    pins = {
        "nginx": table.Pin("nginx", "image", "nginx", "1.29-alpine", repository="docker.io/library/nginx",
                           digest=value, provenance=prov, unresolved=SENTINEL),
        "hf_model": table.Pin("hf_model", "hf_model", "a model", "main", repository="org/model",
                              revision=rev, provenance=prov, unresolved=SENTINEL),
    }
    return table.PinTable("pins.bzl", "", SENTINEL, pins)


def _record(published: bool = True, flavor: str = "production") -> Record:
    return Record(
        recipe="//recipes:glm53_v3", series="v3", repository="docker.io/nearai/sglang-glm53",
        tag="t", digest=ENGINE_DIGEST, base=Base("docker.io/lmsysorg/sglang", DIGEST, flavor),
        patch_layer_digest=DIGEST, fingerprint=DIGEST, patches=(STALL,), published=published,
        source_revision="unknown", recorded_at="2026-12-01T00:00:00Z")


def _doc(pins: table.PinTable, switch: str = "${GLM53_R1_EVENT_LOOP_STALL_DUMP_SECS:-30}") -> dict:
    model = pins.pins["hf_model"]
    return {"services": {
        "nginx": {"image": pins.pins["nginx"].image},
        "downloader": {"image": pins.pins["nginx"].image, "command": [
            f"set -eu\nhf download org/model --revision '{model.revision}'"]},
        "engine-r1": {
            "image": f"docker.io/nearai/sglang-glm53@{ENGINE_DIGEST}",
            "command": ["sglang", "serve", "--model-path", "org/model", "--revision", model.revision],
            "environment": {"SGLANG_EVENT_LOOP_STALL_DUMP_SECS": switch},
        },
    }}


def _reasons(pins: table.PinTable, record: Record, doc: dict | None = None) -> list[deployable.Reason]:
    return deployable.reasons_in(doc or _doc(pins), "f.yaml", pins, {record.image: record})


def test_resolved_pins_and_a_published_production_release_are_deployable() -> None:
    assert _reasons(_pins(True), _record()) == []


def test_unresolved_pins_are_listed_once_each_with_where_they_are_used() -> None:
    reasons = _reasons(_pins(False), _record())
    assert [r.fix for r in reasons] == ["bazel run //pins:resolve -- hf_model",
                                       "bazel run //pins:resolve -- nginx"]
    assert "services.downloader.command[0], services.engine-r1.command[5]" in reasons[0].message
    assert "services.nginx.image, services.downloader.image" in reasons[1].message


def test_cpu_test_and_unpublished_engines_name_the_prod_push() -> None:
    reasons = _reasons(_pins(True), _record(published=False, flavor="cpu-test"))
    assert len(reasons) == 2
    assert "built on the cpu-test base" in reasons[0].message
    assert "not published" in reasons[1].message
    assert [r.fix for r in reasons] == [
        "bazel run --config=prod //recipes:glm53_v3.release -- --repository docker.io/nearai/sglang-glm53",
        "bazel run --config=prod //recipes:glm53_v3.push -- --repository docker.io/nearai/sglang-glm53 --tag TAG"]


def test_engine_image_without_a_release_record() -> None:
    pins = _pins(True)
    other = replace(_record(), digest="sha256:" + "d" * 64)
    reasons = _reasons(pins, other)
    assert len(reasons) == 1 and "neither a pin of the pin table nor a release record" in reasons[0].message


def test_kill_switch_must_be_a_number() -> None:
    pins = _pins(True)
    reasons = _reasons(pins, _record(), _doc(pins, switch="${GLM53_R1_EVENT_LOOP_STALL_DUMP_SECS:-off}"))
    assert len(reasons) == 1
    assert "environment.SGLANG_EVENT_LOOP_STALL_DUMP_SECS" in reasons[0].message
    assert "takes a number of seconds" in reasons[0].message
    assert _reasons(pins, _record(), _doc(pins, switch="0")) == []


def test_tag_pinned_image_and_stray_sentinel() -> None:
    pins = _pins(True)
    doc = _doc(pins)
    doc["services"]["extra"] = {"image": "docker.io/library/redis:7", "command": [f"x {SENTINEL}"]}
    messages = [r.message for r in _reasons(pins, _record(), doc)]
    assert any("services.extra.image docker.io/library/redis:7 is not pinned by digest" in m for m in messages)
    assert any("services.extra.command[0] holds the UNRESOLVED sentinel" in m for m in messages)


def test_tag_beside_the_digest_changes_nothing() -> None:
    """A reference may carry a tag and a digest: the digest decides, for pins and releases alike."""
    pins = _pins(True)
    doc = _doc(pins)
    doc["services"]["nginx"]["image"] = f"docker.io/library/nginx:1.29-alpine@{DIGEST}"
    doc["services"]["engine-r1"]["image"] = f"docker.io/nearai/sglang-glm53:glm53-v3@{ENGINE_DIGEST}"
    assert _reasons(pins, _record(), doc) == []
    doc["services"]["nginx"]["image"] = "docker.io/library/nginx:1.29-alpine@sha256:" + "e" * 64
    messages = [r.message for r in _reasons(pins, _record(), doc)]
    assert messages == [f"f.yaml: services.nginx.image docker.io/library/nginx:1.29-alpine@sha256:{'e' * 64} "
                        f"is not the pinned docker.io/library/nginx@{DIGEST}"]


def test_malformed_image_reference_is_named() -> None:
    pins = _pins(True)
    doc = _doc(pins)
    doc["services"]["nginx"]["image"] = f"docker.io/library/nginx@{DIGEST}@{DIGEST}"
    messages = [r.message for r in _reasons(pins, _record(), doc)]
    assert len(messages) == 1 and "f.yaml: services.nginx.image" in messages[0]
    assert "sha256:<64 lowercase hex>" in messages[0]


def test_cli_prints_one_line_per_reason_and_exits_1(tmp_path: Path, capsys, monkeypatch) -> None:
    pins = _pins(False)
    monkeypatch.setattr(deployable.pin_table, "load", lambda: pins)
    monkeypatch.setattr(deployable, "load_records", lambda: {_record().image: _record()})
    from ruamel.yaml import YAML
    path = tmp_path / "f.yaml"
    with path.open("w") as fh:
        YAML().dump(_doc(pins), fh)
    assert deployable.main([str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and all(" -- fix: bazel run //pins:resolve -- " in line for line in out)
    monkeypatch.setattr(deployable.pin_table, "load", lambda: _pins(True))
    with path.open("w") as fh:
        YAML().dump(_doc(_pins(True)), fh)
    assert deployable.main([str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: deployable\n"
