"""One test per bad input of the issue: each fails before anything is written, and the message
names the patch, the hunk (where there is one), the file, both hashes and the fix command."""

from __future__ import annotations

import hashlib
import os

from conftest import MODULE, P, Synth, binary_literal, patch_text, repin, udiff

EDIT = MODULE.replace("    return 3\n", "    return 33\n")
REHASH_V1 = "bazel run //patches:rehash -- v1"


def sha(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def one_patch(synth: Synth) -> str:
    text = patch_text(udiff(P + "mod.py", MODULE, EDIT))
    synth.add_series("v1", [("a.diff", text)])
    synth.rehash("v1")
    return text


def test_changed_byte_in_patch(synth, capsys):
    text = one_patch(synth)
    changed = text.replace("return 33", "return 34")
    (synth.patches / "v1" / "a.diff").write_text(changed)
    err = synth.apply_fails("v1", capsys)
    assert "patch file changed: its sha256 differs from the declaration" in err
    assert "patch:    v1/a.diff" in err
    assert f"expected: sha256 {sha(text)} (patches/v1/series.json)" in err
    assert f"actual:   sha256 {sha(changed)}" in err
    assert REHASH_V1 in err and "git checkout -- patches/v1/a.diff" in err


def test_drifted_base_file(synth, capsys):
    one_patch(synth)
    drifted = MODULE.replace("return 19", "return 190")
    synth.base_file(P + "mod.py", drifted)
    err = synth.apply_fails("v1", capsys)
    assert "base file drifted: its sha256 differs from the declared before-hash" in err
    assert "patch:    v1/a.diff" in err
    assert f"file:     {P}mod.py" in err
    assert f"expected: sha256 {sha(MODULE)}" in err
    assert f"actual:   sha256 {sha(drifted)}" in err
    assert REHASH_V1 in err


def test_patches_in_a_different_order(synth, capsys):
    second = EDIT.replace("    return 5\n", "    return 55\n")
    synth.add_series("v1", [
        ("a.diff", patch_text(udiff(P + "mod.py", MODULE, EDIT))),
        ("b.diff", patch_text(udiff(P + "mod.py", EDIT, second))),
    ])
    synth.rehash("v1")
    doc = synth.declaration("v1")
    doc["patches"].reverse()
    synth.save_declaration("v1", doc)
    err = synth.apply_fails("v1", capsys)
    assert "patches are out of order" in err
    assert "patch:    v1/b.diff" in err
    assert f"file:     {P}mod.py" in err
    assert f"expected: sha256 {sha(EDIT)}" in err
    assert f"actual:   sha256 {sha(MODULE)}" in err
    assert "v1/b.diff expects the file as v1/a.diff leaves it" in err
    assert 'put v1/a.diff before v1/b.diff in the series\' "patches" list' in err


def test_path_climbing_out_with_dotdot(synth, capsys):
    text = one_patch(synth)
    repin(synth, "v1", "a.diff", text.replace(f"a/{P}mod.py", f"a/{P}../../../../etc/mod.py"))
    err = synth.apply_fails("v1", capsys)
    assert "path outside the source root: the path climbs out with '..'" in err
    assert "patch:    v1/a.diff" in err
    assert f"file:     {P}../../../../etc/mod.py" in err
    assert "regenerate the patch with `git diff`" in err


def test_absolute_path(synth, capsys):
    text = one_patch(synth)
    body = text[text.index("--- "):].replace(f"--- a/{P}mod.py", "--- /etc/passwd").replace(f"+++ b/{P}mod.py", "+++ /etc/passwd")
    repin(synth, "v1", "a.diff", "Why: absolute.\n\n" + body)
    err = synth.apply_fails("v1", capsys)
    assert "path outside the source root: the path is absolute" in err
    assert "patch:    v1/a.diff" in err and "file:     /etc/passwd" in err


def test_path_through_a_symlinked_directory(synth, capsys):
    outside = synth.tmp / "outside"
    outside.mkdir()
    (outside / "evil.py").write_text(MODULE)
    os.symlink(outside, synth.base / "sglang/srt/linkdir")
    text = patch_text(udiff(P + "linkdir/evil.py", MODULE, EDIT))
    synth.add_series("v1", [("a.diff", text)])
    doc = synth.declaration("v1")
    doc["patches"][0]["sha256"] = sha(text)
    doc["patches"][0]["files"] = {P + "linkdir/evil.py": {"before": sha(MODULE), "after": sha(EDIT)}}
    synth.save_declaration("v1", doc)
    # Refused even in Bazel mode, which only tolerates symlinked *files*.
    err = synth.apply_fails("v1", capsys, "--allow-input-symlinks")
    assert "path outside the source root: it goes through a symlink" in err
    assert f"file:     {P}linkdir/evil.py" in err
    assert f"-> {outside}" in err
    assert "replace the symlink with the file" in err


def test_file_symlink_leaving_the_root(synth, capsys):
    outside = synth.tmp / "outside.py"
    outside.write_text(MODULE)
    os.symlink(outside, synth.base / "sglang/srt/evil.py")
    text = patch_text(udiff(P + "evil.py", MODULE, EDIT))
    synth.add_series("v1", [("a.diff", text)])
    doc = synth.declaration("v1")
    doc["patches"][0]["sha256"] = sha(text)
    doc["patches"][0]["files"] = {P + "evil.py": {"before": sha(MODULE), "after": sha(EDIT)}}
    synth.save_declaration("v1", doc)
    err = synth.apply_fails("v1", capsys)
    assert "path outside the source root: it goes through a symlink" in err
    assert f"file:     {P}evil.py" in err


def test_rename_not_declared(synth, capsys):
    one_patch(synth)
    rename = (f"diff --git a/{P}mod.py b/{P}mod2.py\nsimilarity index 100%\n"
              f"rename from {P}mod.py\nrename to {P}mod2.py\n")
    repin(synth, "v1", "a.diff", patch_text(rename))
    err = synth.apply_fails("v1", capsys)
    assert f"the patch renames {P}mod.py -> {P}mod2.py, which is not declared" in err
    assert "patch:    v1/a.diff" in err and f"file:     {P}mod2.py" in err
    assert f'"renamed_from": "{P}mod.py"' in err
    assert REHASH_V1 in err


def test_delete_not_declared(synth, capsys):
    one_patch(synth)
    repin(synth, "v1", "a.diff", patch_text(udiff(P + "mod.py", MODULE, None)))
    err = synth.apply_fails("v1", capsys)
    assert f"the patch deletes {P}mod.py, which is not declared" in err
    assert "patch:    v1/a.diff" in err and f"file:     {P}mod.py" in err
    assert f'actual:   "after": {sha(EDIT)}' in err
    assert REHASH_V1 in err


def test_binary_patch_not_declared(synth, capsys):
    one_patch(synth)
    repin(synth, "v1", "a.diff", patch_text(binary_literal(P + "mod.py", True, b"\x00\x01binary")))
    err = synth.apply_fails("v1", capsys)
    assert f"the patch changes {P}mod.py as binary, which is not declared" in err
    assert "patch:    v1/a.diff" in err and f"file:     {P}mod.py" in err
    assert REHASH_V1 in err


def test_touched_file_not_declared(synth, capsys):
    text = one_patch(synth)
    repin(synth, "v1", "a.diff", text + udiff(P + "other.py", "X = 1\n", "X = 2\n"))
    err = synth.apply_fails("v1", capsys)
    assert "the patch touches a file its declaration does not list" in err
    assert "patch:    v1/a.diff" in err and f"file:     {P}other.py" in err
    assert REHASH_V1 in err


def test_crlf_patch_against_lf_sources(synth, capsys):
    text = one_patch(synth)
    repin(synth, "v1", "a.diff", text.replace("\n", "\r\n"))
    err = synth.apply_fails("v1", capsys)
    assert "the patch has CRLF line endings but the source file uses LF" in err
    assert "patch:    v1/a.diff" in err
    assert "hunk:     #1 @@ -11,7 +11,7 @@ (patch line 6)" in err
    assert f"file:     {P}mod.py" in err
    assert "expected: LF line endings" in err and "actual:   CR LF line endings in the patch" in err
    assert "sed -i 's/\\r$//'" in err


# Further bad inputs the strict applier guards against.


def test_hunk_needing_fuzz(synth, capsys):
    text = one_patch(synth)
    repin(synth, "v1", "a.diff", text.replace(" def f4():", " def f4(x):"))
    err = synth.apply_fails("v1", capsys)
    assert "hunk context does not match the file (it would need fuzz)" in err
    assert "hunk:     #1 @@ -11,7 +11,7 @@ (patch line 6)" in err
    assert "expected: line 17: 'def f4(x):\\n'" in err and "actual:   line 17: 'def f4():\\n'" in err


def test_hunk_at_an_undeclared_offset_and_a_declared_one(synth, capsys):
    text = one_patch(synth)
    shifted = text.replace("@@ -11,7 +11,7 @@", "@@ -15,7 +15,7 @@")
    repin(synth, "v1", "a.diff", shifted)
    err = synth.apply_fails("v1", capsys)
    assert "hunk applies only at an offset the declaration does not expect" in err
    assert "actual:   it matches only at line 11 (offset -4)" in err
    assert '"offsets": {"1": -4}' in err
    doc = synth.declaration("v1")
    doc["patches"][0]["files"][P + "mod.py"]["offsets"] = {"1": -4}
    synth.save_declaration("v1", doc)
    rc, err = synth.apply("v1", capsys)
    assert rc == 0, err
    assert (synth.out / "patched/sglang/srt/mod.py").read_text() == EDIT


def test_declared_after_hash_wrong(synth, capsys):
    one_patch(synth)
    doc = synth.declaration("v1")
    doc["patches"][0]["files"][P + "mod.py"]["after"] = "f" * 64
    synth.save_declaration("v1", doc)
    err = synth.apply_fails("v1", capsys)
    assert "after applying the patch, the file's sha256 differs from the declared after-hash" in err
    assert f"expected: sha256 {'f' * 64}" in err and f"actual:   sha256 {sha(EDIT)}" in err


def test_pinned_file_drifted(synth, capsys):
    synth.add_series("v1", [("a.diff", patch_text(udiff(P + "mod.py", MODULE, EDIT)))], pins={P + "pinned.py"})
    synth.rehash("v1")
    synth.base_file(P + "pinned.py", "PINNED = False\n")
    err = synth.apply_fails("v1", capsys)
    assert "identity-pinned base file drifted" in err
    assert f"file:     {P}pinned.py" in err
    assert f"expected: sha256 {sha('PINNED = True' + chr(10))}" in err


def test_patched_file_does_not_compile(synth, capsys):
    broken = MODULE.replace("    return 3\n", "    return (3\n")
    synth.add_series("v1", [("a.diff", patch_text(udiff(P + "mod.py", MODULE, broken)))])
    doc = synth.declaration("v1")
    text = (synth.patches / "v1/a.diff").read_bytes()
    doc["patches"][0]["sha256"] = sha(text)
    doc["patches"][0]["files"] = {P + "mod.py": {"before": sha(MODULE), "after": sha(broken)}}
    synth.save_declaration("v1", doc)
    err = synth.apply_fails("v1", capsys)
    assert "patched file does not parse" in err
    assert f"file:     {P}mod.py" in err and "patch:    v1/a.diff" in err


def test_patched_file_parses_but_does_not_compile(synth, capsys):
    # `return` outside a function parses; only the compiler refuses it.
    broken = MODULE + "return 1\n"
    synth.add_series("v1", [("a.diff", patch_text(udiff(P + "mod.py", MODULE, broken)))])
    doc = synth.declaration("v1")
    doc["patches"][0]["sha256"] = sha((synth.patches / "v1/a.diff").read_bytes())
    doc["patches"][0]["files"] = {P + "mod.py": {"before": sha(MODULE), "after": sha(broken)}}
    synth.save_declaration("v1", doc)
    err = synth.apply_fails("v1", capsys)
    assert "patched file does not compile" in err
    assert "line 81: 'return' outside function" in err
    assert f"file:     {P}mod.py" in err and "patch:    v1/a.diff" in err


def test_hand_edited_hunk_counts(synth, capsys):
    text = one_patch(synth)
    repin(synth, "v1", "a.diff", text.replace("@@ -11,7 +11,7 @@", "@@ -11,8 +11,7 @@"))
    err = synth.apply_fails("v1", capsys)
    assert "hunk #1 ends early: 1 old and 0 new lines missing" in err
    assert "patch:    v1/a.diff" in err and f"file:     {P}mod.py" in err
    assert "never edit hunks by hand" in err


def test_undeclared_patch_file_in_the_series_directory(synth, capsys):
    one_patch(synth)
    stray = synth.patches / "v1/stray.diff"
    stray.write_text(udiff(P + "other.py", "X = 1\n", "X = 2\n"))
    err = synth.apply_fails(
        "v1", capsys,
        "--expect-declaration", str(synth.patches / "v1/series.json"),
        "--expect-patch", str(synth.patches / "v1/a.diff"),
        "--expect-patch", str(stray),
    )
    assert f"{stray} sits in a series directory but no series.json declares it" in err
    assert REHASH_V1 in err


def test_build_extends_disagrees_with_the_declaration(synth, capsys):
    one_patch(synth)
    synth.add_series("v2", [("b.diff", patch_text(udiff(P + "other.py", "X = 1\n", "X = 2\n")))])  # no extends
    synth.rehash("v2")
    # BUILD.bazel says v2 extends v1 (so the rule passes v1's declaration), series.json does not.
    err = synth.apply_fails(
        "v2", capsys,
        "--expect-declaration", str(synth.patches / "v1/series.json"),
        "--expect-declaration", str(synth.patches / "v2/series.json"),
    )
    assert "v1/series.json was given to the action but is not in the chain v2" in err
    assert "make the patch_series `extends` attribute in BUILD.bazel match `extends` in series.json" in err
