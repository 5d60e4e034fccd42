"""The applier on good input: stacking, extensions, declared renames/deletes/binaries, layouts,
provenance and byte-identical output."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess

import pytest

from conftest import MODULE, P, Synth, binary_literal, patch_text, udiff

EDIT1 = MODULE.replace("    return 3\n", "    return 33\n")
EDIT2 = EDIT1.replace("    return 5\n", "    return 55\n")


def sha(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def tree(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def stacked(synth: Synth) -> None:
    synth.add_series("v1", [("a.diff", patch_text(udiff(P + "mod.py", MODULE, EDIT1)))], pins={P + "pinned.py"})
    synth.add_series("v2", [
        ("b.diff", patch_text(udiff(P + "mod.py", EDIT1, EDIT2))),
        ("c.diff", patch_text(udiff(P + "new.py", None, "NEW = 1\n"))),
    ], extends="v1")
    synth.rehash("v1")
    synth.rehash("v2")


def test_stacked_series_outputs_only_touched_files_with_their_hash_chain(synth, capsys):
    stacked(synth)
    rc, err = synth.apply("v2", capsys)
    assert rc == 0, err
    assert tree(synth.out / "patched") == {"sglang/srt/mod.py": EDIT2.encode(), "sglang/srt/new.py": b"NEW = 1\n"}
    prov = json.loads((synth.out / "PROVENANCE.json").read_text())
    assert prov["chain"] == ["v1", "v2"]
    assert [p["file"] for p in prov["patches"]] == ["a.diff", "b.diff", "c.diff"]
    assert prov["files"][P + "mod.py"]["chain"] == [
        {"by": "base", "sha256": sha(MODULE)},
        {"by": "v1/a.diff", "sha256": sha(EDIT1)},
        {"by": "v2/b.diff", "sha256": sha(EDIT2)},
    ]
    assert prov["files"][P + "new.py"]["chain"][0] == {"by": "base", "sha256": None}
    assert prov["pins"][P + "pinned.py"]["sha256"] == sha("PINNED = True\n")
    assert prov["outputs"] == {"sglang/srt/mod.py": sha(EDIT2), "sglang/srt/new.py": sha("NEW = 1\n")}
    assert prov["applier"]["version"]
    text = (synth.out / "PROVENANCE").read_text()
    assert f"v1/a.diff: {sha(EDIT1)}" in text and "origin: new here (2026-11-29)" in text
    resolved = json.loads((synth.out / "decl.json").read_text())
    assert [p["series"] for p in resolved["patches"]] == ["v1", "v2", "v2"]


def test_the_hash_between_two_patches_is_verified(synth, capsys):
    stacked(synth)
    # Make the declared intermediate hash wrong but self-consistent across both declarations.
    v1, v2 = synth.declaration("v1"), synth.declaration("v2")
    v1["patches"][0]["files"][P + "mod.py"]["after"] = "e" * 64
    v2["patches"][0]["files"][P + "mod.py"]["before"] = "e" * 64
    synth.save_declaration("v1", v1)
    synth.save_declaration("v2", v2)
    err = synth.apply_fails("v2", capsys)
    assert "after applying the patch, the file's sha256 differs from the declared after-hash" in err
    assert "patch:    v1/a.diff" in err and f"actual:   sha256 {sha(EDIT1)}" in err


def test_output_is_byte_identical_twice(synth, capsys):
    stacked(synth)
    outs = []
    for run in ("one", "two"):
        rc, err = synth.apply("v2", capsys)
        assert rc == 0, err
        outs.append(tree(synth.out))
        shutil.move(synth.out, synth.tmp / run)
    assert outs[0] == outs[1]


def test_git_layout_base(synth, capsys):
    stacked(synth)
    git = synth.tmp / "checkout"
    shutil.copytree(synth.base, git / "python")
    rc, err = synth.apply("v2", capsys, "--base-root", str(git), "--base-layout", "git")
    assert rc == 0, err
    assert (synth.out / "patched/sglang/srt/mod.py").read_text() == EDIT2


def test_declared_rename_delete_and_binary(synth, capsys):
    rename = (f"diff --git a/{P}other.py b/{P}renamed.py\nsimilarity index 100%\n"
              f"rename from {P}other.py\nrename to {P}renamed.py\n")
    synth.base_file(P + "blob.bin", b"\x00old")
    synth.add_series("v1", [("a.diff", patch_text(
        rename + udiff(P + "mod.py", MODULE, None) + binary_literal(P + "blob.bin", True, b"\x00\xffnew bytes")
    ))])
    synth.rehash("v1")
    files = synth.declaration("v1")["patches"][0]["files"]
    assert files[P + "renamed.py"] == {"before": sha("X = 1\n"), "after": sha("X = 1\n"), "renamed_from": P + "other.py"}
    assert files[P + "mod.py"] == {"before": sha(MODULE), "after": None}
    assert files[P + "blob.bin"] == {"before": sha(b"\x00old"), "after": sha(b"\x00\xffnew bytes"), "binary": True}
    rc, err = synth.apply("v1", capsys)
    assert rc == 0, err
    assert tree(synth.out / "patched") == {"sglang/srt/renamed.py": b"X = 1\n", "sglang/srt/blob.bin": b"\x00\xffnew bytes"}
    prov = json.loads((synth.out / "PROVENANCE.json").read_text())
    assert sorted(prov["deleted"]) == ["sglang/srt/mod.py", "sglang/srt/other.py"]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to produce a binary delta")
def test_git_binary_delta(synth, capsys):
    old = bytes(range(256)) * 64
    new = old[:5000] + b"changed" + old[5000:]
    for side, data in (("a", old), ("b", new)):
        (synth.tmp / side / P).mkdir(parents=True)
        (synth.tmp / side / P / "blob.bin").write_bytes(data)
    diff = subprocess.run(
        ["git", "diff", "--no-index", "--binary", "--no-prefix", f"a/{P}blob.bin", f"b/{P}blob.bin"],
        cwd=synth.tmp, capture_output=True, check=False,
    ).stdout
    assert b"delta " in diff
    synth.base_file(P + "blob.bin", old)
    synth.add_series("v1", [("a.diff", b"Why: binary delta.\n\n" + diff)])
    synth.rehash("v1")
    rc, err = synth.apply("v1", capsys)
    assert rc == 0, err
    assert (synth.out / "patched/sglang/srt/blob.bin").read_bytes() == new


def test_no_newline_at_end_of_file(synth, capsys):
    synth.base_file(P + "tail.py", "A = 1\nB = 2")
    diff = (f"diff --git a/{P}tail.py b/{P}tail.py\n--- a/{P}tail.py\n+++ b/{P}tail.py\n"
            "@@ -1,2 +1,2 @@\n A = 1\n-B = 2\n\\ No newline at end of file\n+B = 3\n")
    synth.add_series("v1", [("a.diff", patch_text(diff))])
    synth.rehash("v1")
    rc, err = synth.apply("v1", capsys)
    assert rc == 0, err
    assert (synth.out / "patched/sglang/srt/tail.py").read_text() == "A = 1\nB = 3\n"


def test_check_mode_writes_nothing(synth, capsys):
    stacked(synth)
    rc, err = synth.apply("v2", capsys, "--check")
    assert rc == 0, err
    assert not synth.out.exists()


def test_wrong_base_root_or_layout(synth, capsys):
    stacked(synth)
    rc, err = synth.apply("v2", capsys, "--base-layout", "git")
    assert rc == 1
    assert f"the base root {synth.base} does not hold python/sglang/__init__.py" in err
    assert "--base-layout package" in err


def _shipping(synth, tmp_path):
    """v1 with one patch, shipping package `hooks` (two files on disk)."""
    synth.add_series("v1", [("a.diff", patch_text(udiff(P + "mod.py", MODULE, EDIT1)))])
    doc = synth.declaration("v1")
    doc["packages"] = ["hooks"]
    synth.save_declaration("v1", doc)
    synth.rehash("v1")
    src = tmp_path / "engine" / "hooks"
    src.mkdir(parents=True)
    (src / "__init__.py").write_text('"""hooks"""\n')
    (src / "calls.py").write_text("X = 1\n")
    return [f"hooks/{p.name}={p}" for p in sorted(src.iterdir())], src


def test_a_shipped_package_is_written_beside_sglang_and_hashed_into_provenance(synth, capsys, tmp_path):
    pairs, src = _shipping(synth, tmp_path)
    rc, err = synth.apply("v1", capsys, *[a for p in pairs for a in ("--package-file", p)])
    assert rc == 0, err
    out = tree(synth.out / "patched")
    assert out["hooks/calls.py"] == b"X = 1\n" and out["hooks/__init__.py"] == b'"""hooks"""\n'
    prov = json.loads((synth.out / "PROVENANCE.json").read_text())
    assert prov["packages"]["hooks"]["files"] == {"hooks/__init__.py": sha('"""hooks"""\n'), "hooks/calls.py": sha("X = 1\n")}
    assert prov["outputs"]["hooks/calls.py"] == sha("X = 1\n")
    first = json.loads((synth.out / "decl.json").read_text())["packages"]["hooks"]
    assert first == prov["packages"]["hooks"]["sha256"]
    # A changed byte in the package changes the resolved declaration (and so the fingerprint).
    (src / "calls.py").write_text("X = 2\n")
    shutil.rmtree(synth.out)
    rc, err = synth.apply("v1", capsys, *[a for p in pairs for a in ("--package-file", p)])
    assert rc == 0, err
    assert json.loads((synth.out / "decl.json").read_text())["packages"]["hooks"] != first


def test_a_declared_package_that_was_not_given_is_refused(synth, capsys, tmp_path):
    _shipping(synth, tmp_path)
    err = synth.apply_fails("v1", capsys)
    assert "ships package hooks, but the action got no hooks/__init__.py" in err


def test_a_package_the_series_does_not_declare_is_refused(synth, capsys, tmp_path):
    pairs, _ = _shipping(synth, tmp_path)
    stray = tmp_path / "stray.py"
    stray.write_text("")
    err = synth.apply_fails("v1", capsys, *[a for p in pairs for a in ("--package-file", p)],
                            "--package-file", f"other/__init__.py={stray}")
    assert "package other was given to the action but series v1 does not ship it" in err


def test_a_package_name_that_is_not_an_identifier_is_refused(synth, capsys):
    synth.add_series("v1", [("a.diff", patch_text(udiff(P + "mod.py", MODULE, EDIT1)))])
    synth.rehash("v1")
    doc = synth.declaration("v1")
    doc["packages"] = ["Not-A-Package"]
    synth.save_declaration("v1", doc)
    err = synth.apply_fails("v1", capsys)
    assert "packages[0]" in err and "a Python package name under engine/" in err
