"""The deployability gate on small compose documents: each reason on the input it guards against."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from deploy import deployable
from pins import table
from tools.release.schema import Base, Patch, Record

SENTINEL = table.load().unresolved
DIGEST = "sha256:" + "a" * 64
ENGINE_DIGEST = "sha256:" + "b" * 64
PROVENANCE = table.Provenance("2026-12-01T00:00:00Z", "test", "test")
STALL = Patch("event-loop-stall-dump", "v1", "on-30s", {
    "kind": "on-by-default", "disable": "SGLANG_EVENT_LOOP_STALL_DUMP_SECS=0",
    "settings": {"SGLANG_EVENT_LOOP_STALL_DUMP_SECS": "30"}})


def _pins(resolved: bool, prod_base: bool = True) -> table.PinTable:
    value = DIGEST if resolved else SENTINEL
    rev = "c" * 40 if resolved else SENTINEL
    prov = PROVENANCE if resolved else None
    pins = {
        "nginx": table.Pin("nginx", "image", "nginx", "1.29-alpine", repository="docker.io/library/nginx",
                           digest=value, provenance=prov, unresolved=SENTINEL),
        "hf_model": table.Pin("hf_model", "hf_model", "a model", "main", repository="org/model",
                              revision=rev, provenance=prov, unresolved=SENTINEL),
        "sglang_prod_base": table.Pin(
            "sglang_prod_base", "image", "the production base", SENTINEL if not prod_base else "t",
            repository="docker.io/lmsysorg/sglang", digest=DIGEST if prod_base else SENTINEL,
            provenance=PROVENANCE if prod_base else None, unresolved=SENTINEL),
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
        "downloader": {"image": pins.pins["nginx"].image, "entrypoint": ["/bin/sh", "-c"], "command": [
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
    assert messages == [f"f.yaml: services.nginx.image has digest 'sha256:{'e' * 64}', which is "
                        f"neither pin nginx's value ({DIGEST}) nor the UNRESOLVED sentinel"]


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
    assert out[0] == f"{path}: NOT DEPLOYABLE: 2 reasons, 2 fixes"
    assert [line for line in out if line.startswith("  fix ")] == [
        "  fix 1: bazel run //pins:resolve -- hf_model", "  fix 2: bazel run //pins:resolve -- nginx"]
    monkeypatch.setattr(deployable.pin_table, "load", lambda: _pins(True))
    with path.open("w") as fh:
        YAML().dump(_doc(_pins(True)), fh)
    assert deployable.main([str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: deployable\n"


def test_revision_main_is_a_reason_while_the_pin_is_unresolved() -> None:
    """`--revision main` removes the sentinel from the downloader's line, not the reason."""
    pins = _pins(False)
    doc = _doc(pins)
    doc["services"]["downloader"]["command"][0] = "set -eu\nhf download org/model --revision 'main'"
    reasons = _reasons(pins, _record(), doc)
    assert [r.message for r in reasons if "hf_model" in r.message or "main" in r.message] == [
        "f.yaml: pin hf_model (org/model, intended main) is unresolved; used at "
        "services.downloader.command[0], services.engine-r1.command[5]",
        "f.yaml: services.downloader.command[0] line 2 has revision 'main', which is neither pin "
        "hf_model's value (the sentinel) nor the UNRESOLVED sentinel"]
    assert {r.fix for r in reasons if "'main'" in r.message} == {"bazel run //compose:update"}
    assert len(reasons) == len(_reasons(pins, _record())) + 1


def test_foreign_revision_on_one_replica() -> None:
    pins = _pins(True)
    doc = _doc(pins)
    doc["services"]["engine-r2"] = dict(doc["services"]["engine-r1"])
    doc["services"]["engine-r2"]["command"] = [
        "sglang", "serve", "--model-path", "org/model", "--revision", "d" * 40]
    assert [r.message for r in _reasons(pins, _record(), doc)] == [
        f"f.yaml: services.engine-r2.command[5] has revision '{'d' * 40}', which is neither pin "
        f"hf_model's value ({'c' * 40}) nor the UNRESOLVED sentinel"]
    # The same foreign commit while the pin is unresolved: still a reason of its own.
    unresolved = _pins(False)
    doc["services"]["engine-r1"]["command"][5] = SENTINEL
    doc["services"]["downloader"]["command"][0] = f"hf download org/model --revision '{SENTINEL}'"
    doc["services"]["nginx"]["image"] = doc["services"]["downloader"]["image"] = unresolved.pins["nginx"].image
    assert f"f.yaml: services.engine-r2.command[5] has revision '{'d' * 40}'" in " ".join(
        r.message for r in _reasons(unresolved, _record(), doc))


def test_sentinel_left_where_the_pin_is_resolved() -> None:
    pins = _pins(True)
    doc = _doc(pins)
    doc["services"]["engine-r1"]["command"][5] = SENTINEL
    assert [(r.message, r.fix) for r in _reasons(pins, _record(), doc)] == [(
        f"f.yaml: services.engine-r1.command[5] holds the UNRESOLVED sentinel, but pin hf_model is "
        f"resolved (revision {'c' * 40})", "bazel run //compose:update")]


def test_production_base_pin_is_the_first_prerequisite_of_the_prod_fixes() -> None:
    reasons = _reasons(_pins(True, prod_base=False), _record(published=False, flavor="cpu-test"))
    base_fix = "bazel run //recipes/bases:pin_prod -- docker.io/lmsysorg/sglang:TAG"
    assert reasons[0] == deployable.Reason(
        "f.yaml: pin sglang_prod_base (docker.io/lmsysorg/sglang) is unresolved; the "
        "--config=prod builds of 2 reason(s) start from it", base_fix)
    assert [r.after for r in reasons[1:]] == [base_fix, base_fix]
    assert deployable.report("f.yaml", reasons)[:3] == [
        "f.yaml: NOT DEPLOYABLE: 3 reasons, 3 fixes",
        f"  fix 1: {base_fix}",
        f"    - {reasons[0].message}"]
    assert deployable.report("f.yaml", reasons)[3].startswith(
        "  fix 2 (after fix 1): bazel run --config=prod //recipes:glm53_v3.release")
    # Resolved production base: no prerequisite.
    assert all(not r.after for r in _reasons(_pins(True), _record(published=False, flavor="cpu-test")))


def test_reasons_are_grouped_by_fix() -> None:
    pins = _pins(False)
    doc = _doc(pins)
    doc["services"]["engine-r1"]["command"][5] = "main"
    doc["services"]["downloader"]["command"][0] = "hf download org/model --revision 'main'"
    groups = deployable.grouped(_reasons(pins, _record(), doc))
    assert [(g.fix, len(g.reasons)) for g in groups] == [
        ("bazel run //pins:resolve -- hf_model", 1), ("bazel run //pins:resolve -- nginx", 1),
        ("bazel run //compose:update", 2)]
