"""The applier reading its base straight from the wheel (--base-wheel, what the Bazel rule
passes): the same outputs as from the unpacked tree, and the same refusals."""

from __future__ import annotations

import hashlib
import zipfile

from conftest import MODULE, P, Synth, patch_text, udiff
from test_apply import stacked, tree


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_wheel_and_unpacked_tree_give_the_same_outputs(synth, capsys):
    stacked(synth)
    wheel = synth.wheel()
    rc, err = synth.apply("v2", capsys)
    assert rc == 0, err
    from_tree = tree(synth.out)
    for p in sorted(synth.out.rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    synth.out.rmdir()
    rc, err = synth.apply("v2", capsys, wheel=wheel)
    assert rc == 0, err
    # Same patched files, declaration and PROVENANCE (the pin holds the wheel's sha256 in both).
    assert tree(synth.out) == from_tree


def test_a_wheel_other_than_the_declared_one_is_refused(synth, capsys):
    stacked(synth)
    wheel = synth.wheel()
    declared = sha(wheel.read_bytes())
    other = synth.tmp / "other.whl"
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(other, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info))
        dst.writestr("sglang/extra.py", b"")
    err = synth.apply_fails("v2", capsys, wheel=other)
    assert "the base wheel is not the one the series declares" in err
    assert f"expected: sha256 {declared}" in err and f"actual:   sha256 {sha(other.read_bytes())}" in err


def test_a_drifted_file_in_the_wheel_is_refused(synth, capsys):
    stacked(synth)
    # The pin follows the wheel, so only the file's before-hash can catch the change.
    wheel = synth.wheel({"sglang/srt/mod.py": MODULE.replace("return 7", "return 77").encode()})
    err = synth.apply_fails("v2", capsys, wheel=wheel)
    assert "base file drifted" in err and f"file:     {P}mod.py" in err


def test_a_changed_pinned_file_in_the_wheel_is_refused(synth, capsys):
    stacked(synth)
    wheel = synth.wheel({"sglang/srt/pinned.py": b"PINNED = False\n"})
    err = synth.apply_fails("v2", capsys, wheel=wheel)
    assert "identity-pinned base file drifted" in err


def test_creating_a_file_the_wheel_holds_is_refused(synth, capsys):
    synth.add_series("v1", [("a.diff", patch_text(udiff(P + "new.py", None, "NEW = 1\n")))])
    synth.rehash("v1")
    wheel = synth.wheel({"sglang/srt/new.py": b"NEW = 0\n"})
    err = synth.apply_fails("v1", capsys, wheel=wheel)
    assert "base file drifted" in err and f"file:     {P}new.py" in err


def test_a_directory_in_the_wheel_is_not_a_file(synth, capsys):
    synth.base_file(P + "pkg/inner.py", "")
    synth.add_series("v1", [("a.diff", patch_text(udiff(P + "pkg", "x\n", "y\n")))])
    doc = synth.declaration("v1")
    doc["patches"][0]["sha256"] = sha((synth.patches / "v1/a.diff").read_bytes())
    doc["patches"][0]["files"] = {P + "pkg": {"before": sha(b"x\n"), "after": sha(b"y\n")}}
    synth.save_declaration("v1", doc)
    wheel = synth.wheel()
    err_tree = synth.apply_fails("v1", capsys)
    err_wheel = synth.apply_fails("v1", capsys, wheel=wheel)
    assert "path is not a regular file in the base tree" in err_tree
    assert "path is not a regular file in the base tree" in err_wheel


def test_a_symlink_member_is_refused(synth, capsys):
    stacked(synth)
    wheel = synth.wheel()
    linked = synth.tmp / "linked.whl"
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(linked, "w") as dst:
        for info in src.infolist():
            if info.filename == "sglang/srt/mod.py":
                info.external_attr = (0o120777 << 16)
            dst.writestr(info, src.read(info))
    doc = synth.declaration("v1")
    doc["base"]["sha256"] = sha(linked.read_bytes())
    synth.save_declaration("v1", doc)
    err = synth.apply_fails("v2", capsys, wheel=linked)
    assert "path is a symlink in the base wheel" in err and f"file:     {P}mod.py" in err


def test_a_wheel_without_the_package_is_refused(synth, capsys):
    stacked(synth)
    wheel = synth.wheel()
    bare = synth.tmp / "bare.whl"
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(bare, "w") as dst:
        for info in src.infolist():
            if info.filename != "sglang/__init__.py":
                dst.writestr(info, src.read(info))
    doc = synth.declaration("v1")
    doc["base"]["sha256"] = sha(bare.read_bytes())
    synth.save_declaration("v1", doc)
    err = synth.apply_fails("v2", capsys, wheel=bare)
    assert f"the base wheel {bare} does not hold sglang/__init__.py" in err


def test_a_missing_wheel_is_a_clear_error(synth, capsys):
    stacked(synth)
    err = synth.apply_fails("v2", capsys, wheel=synth.tmp / "absent.whl")
    assert f"the base wheel {synth.tmp / 'absent.whl'} cannot be read (No such file or directory)" in err
