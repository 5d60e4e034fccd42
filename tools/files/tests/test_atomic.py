"""atomic.write_text: the whole new text or the old file, never a half-written one."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tools.files import atomic


def test_writes_replaces_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "record.json"
    atomic.write_text(path, "one\n")
    atomic.write_text(path, "two\n")
    assert path.read_bytes() == b"two\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(path.parent) == ["record.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "table.bzl"
    path.write_text("old\n")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic.write_text(path, "new\n")
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["table.bzl"]


def test_text_is_utf8_with_unix_line_ends(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    atomic.write_text(path, "ä\r\nb\n")
    assert path.read_bytes() == "ä\r\nb\n".encode()
