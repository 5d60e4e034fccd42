"""Declarations are typed and validated when loaded; errors name the file and the key."""

from __future__ import annotations

import pytest

from conftest import MODULE, P, patch_text, udiff
from tools.patches.private.patchchain.declaration import dump_json, load_chain, load_series, series_json
from tools.patches.private.patchchain.errors import DeclarationError

EDIT = MODULE.replace("    return 3\n", "    return 33\n")


@pytest.fixture
def v1(synth):
    synth.add_series("v1", [("a.diff", patch_text(udiff(P + "mod.py", MODULE, EDIT)))], pins={P + "pinned.py"})
    synth.rehash("v1")
    return synth


def broken(synth, series: str, mutate) -> str:
    doc = synth.declaration(series)
    mutate(doc)
    synth.save_declaration(series, doc)
    with pytest.raises(DeclarationError) as e:
        load_chain(synth.patches, series)
    return str(e.value)


def test_round_trip_is_canonical(v1):
    path = v1.patches / "v1/series.json"
    assert dump_json(series_json(load_series(path))) == path.read_text()


def test_unknown_key(v1):
    msg = broken(v1, "v1", lambda d: d["patches"][0].update(fuzz=2))
    assert "v1/series.json: patches[0]: unknown key(s) fuzz" in msg


def test_bad_sha(v1):
    msg = broken(v1, "v1", lambda d: d["patches"][0]["files"][P + "mod.py"].update(after="abc"))
    assert f'v1/series.json: patches[0].files["{P}mod.py"].after: expected 64 lowercase hex characters' in msg
    assert "bazel run //patches:rehash -- v1" in msg


def test_missing_hash_outside_rehash(v1):
    msg = broken(v1, "v1", lambda d: d["patches"][0].pop("sha256"))
    assert "v1/series.json: patches[0]: missing key(s) sha256" in msg


def test_bad_activation(v1):
    msg = broken(v1, "v1", lambda d: d["patches"][0].update(activation={"kind": "opt-in"}))
    assert "patches[0].activation.env: expected a non-empty string" in msg
    msg = broken(v1, "v1", lambda d: d["patches"][0].update(activation={"kind": "sometimes"}))
    assert "patches[0].activation.kind: expected one of unconditional, opt-in, on-by-default" in msg


def test_bad_origin(v1):
    msg = broken(v1, "v1", lambda d: d["patches"][0].update(origin={"kind": "upstream-pr"}))
    assert "patches[0].origin.upstream: an upstream-pr origin names the PR" in msg


def test_manifest_path_outside_source_root(v1):
    msg = broken(v1, "v1", lambda d: d["pins"].update({"test/x.py": {"sha256": "0" * 64, "reason": "r"}}))
    assert 'v1/series.json: pins["test/x.py"]: path outside the source root: the path is not under python/sglang/' in msg


def test_duplicate_key_and_json_syntax(v1):
    path = v1.patches / "v1/series.json"
    path.write_text(path.read_text().replace('"schema": 1,', '"schema": 1, "schema": 1,'))
    with pytest.raises(DeclarationError, match="duplicate key"):
        load_series(path)
    path.write_text("{\n  \"schema\": 1,\n}\n")
    with pytest.raises(DeclarationError, match=r"series.json:3:1: not valid JSON"):
        load_series(path)


def test_extension_never_copies_parent_entries(v1):
    v1.add_series("v2", [], extends="v1")
    parent = v1.declaration("v1")
    msg = broken(v1, "v2", lambda d: d["patches"].append(parent["patches"][0]))
    assert "v2/series.json: patches: a.diff is already declared by ancestor series v1" in msg
    assert "an extension never copies its parent's entries" in msg
    msg = broken(v1, "v2", lambda d: (d["patches"].clear(), d.update(pins=parent["pins"])))
    assert f'v2/series.json: pins["{P}pinned.py"]: already pinned by ancestor series v1' in msg


def test_extension_does_not_pin_the_base(v1):
    v1.add_series("v2", [], extends="v1")
    msg = broken(v1, "v2", lambda d: d.update(base=v1.declaration("v1")["base"]))
    assert "v2/series.json: base: only the root series pins the base; v2 inherits it from v1" in msg


def test_extends_loop_and_missing_parent(v1):
    v1.add_series("v2", [], extends="v1")
    msg = broken(v1, "v1", lambda d: (d.pop("base"), d.update(extends="v2")))
    assert "loops" in msg
    v1.add_series("v3", [], extends="nope")
    with pytest.raises(DeclarationError, match="nope/series.json: series declaration not found"):
        load_chain(v1.patches, "v3")
