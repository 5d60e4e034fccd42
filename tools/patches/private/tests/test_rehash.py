"""rehash recomputes a declaration after an intentional edit, shows it, and writes only with --write."""

from __future__ import annotations

import hashlib

from conftest import MODULE, P, patch_text, udiff
from tools.patches.private.patchchain import rehash_main

EDIT = MODULE.replace("    return 3\n", "    return 33\n")
EDIT_B = MODULE.replace("    return 3\n", "    return 333\n")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def run(synth, capsys, *args: str) -> tuple[int, str, str]:
    rc = rehash_main.main(["--patches-dir", str(synth.patches), "--base-root", str(synth.base), *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_shows_the_change_and_writes_only_with_write(synth, capsys):
    synth.add_series("v1", [("a.diff", patch_text(udiff(P + "mod.py", MODULE, EDIT)))])
    synth.rehash("v1")
    path = synth.patches / "v1/series.json"
    (synth.patches / "v1/a.diff").write_text(patch_text(udiff(P + "mod.py", MODULE, EDIT_B)))
    before = path.read_text()
    rc, out, _ = run(synth, capsys, "v1")
    assert rc == 0
    assert out.startswith("--- a/patches/v1/series.json\n+++ b/patches/v1/series.json\n")
    assert f'-          "after": "{sha(EDIT)}"' in out and f'+          "after": "{sha(EDIT_B)}"' in out
    assert "rerun with --write" in out
    assert path.read_text() == before
    rc, out, _ = run(synth, capsys, "v1", "--write")
    assert rc == 0 and f"wrote {path}" in out
    rc, out, _ = run(synth, capsys, "v1")
    assert out == "patches/v1/series.json is up to date\n"
    rc, err = synth.apply("v1", capsys)
    assert rc == 0, err


def test_a_broken_parent_must_be_rehashed_first(synth, capsys):
    synth.add_series("v1", [("a.diff", patch_text(udiff(P + "mod.py", MODULE, EDIT)))])
    synth.add_series("v2", [("b.diff", patch_text(udiff(P + "other.py", "X = 1\n", "X = 2\n")))], extends="v1")
    synth.rehash("v1")
    (synth.patches / "v1/a.diff").write_text(patch_text(udiff(P + "mod.py", MODULE, EDIT_B)))
    rc, out, err = run(synth, capsys, "v2")
    assert rc == 1 and out == ""
    assert "patch:    v1/a.diff" in err and "bazel run //patches:rehash -- v1" in err
