"""generated_files' programs: check names every difference and the command; update writes and deletes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.files.private import generated

LABEL = "//pkg:files.update"
COMMAND = f"bazel run {LABEL}"


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A generator's output (a.txt, sub/b.txt) and a workspace holding pkg/ as committed."""
    out = tmp_path / "tree"
    (out / "sub").mkdir(parents=True)
    (out / "a.txt").write_text("one\ntwo\n")
    (out / "sub" / "b.txt").write_text("b\n")
    workspace = tmp_path / "ws"
    (workspace / "pkg" / "sub").mkdir(parents=True)
    (workspace / "pkg" / "a.txt").write_text("one\nTWO\n")
    (workspace / "pkg" / "old.txt").write_text("gone\n")
    monkeypatch.chdir(workspace)
    monkeypatch.setenv("BUILD_WORKSPACE_DIRECTORY", str(workspace))
    return out


def run(mode: str, tree: Path, *files: str) -> int:
    return generated.main([mode, "--package=pkg", f"--tree={tree}", f"--update-label={LABEL}", *files])


def test_check_shows_every_difference_and_the_command(tree, capsys):
    assert run("check", tree, "a.txt", "old.txt") == 1
    out, err = capsys.readouterr()
    assert "--- a/pkg/a.txt\n+++ b/pkg/a.txt\n" in out and "-TWO\n+two\n" in out
    assert "pkg/old.txt is committed but no longer generated: delete it" in out
    assert "pkg/sub/b.txt is generated but not committed: add it" in out
    assert f"pkg/: 3 committed file(s) differ from what the generator writes: run `{COMMAND}`" in err


def test_update_then_check_passes(tree, capsys):
    assert run("update", tree, "a.txt", "old.txt") == 0
    assert "deleted pkg/old.txt (no longer generated)" in capsys.readouterr().out
    assert sorted(p.relative_to("pkg").as_posix() for p in Path("pkg").rglob("*.txt")) == ["a.txt", "sub/b.txt"]
    assert run("check", tree, "a.txt", "sub/b.txt") == 0
    assert "2 generated files in pkg/ are up to date" in capsys.readouterr().out


def test_update_needs_bazel_run(tree, monkeypatch, capsys):
    monkeypatch.delenv("BUILD_WORKSPACE_DIRECTORY")
    assert run("update", tree, "a.txt") == 2
    assert COMMAND in capsys.readouterr().err
