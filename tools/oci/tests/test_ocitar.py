"""Deterministic tar layers: same content -> same bytes, whatever the files' metadata."""

from __future__ import annotations

import hashlib
import os
import tarfile
from pathlib import Path

import pytest

from tools.oci import ocitar

LONG_DIR = "d" * 120
LONG_FILE = "f" * 160  # > 100 (ustar name) and, with the dir, > 255 (ustar prefix+name)


def make_tree(root: Path, mtime: int, umask_mode: int) -> None:
    (root / "a b").mkdir(parents=True)
    (root / "a b" / "x y.txt").write_text("spaces\n")
    (root / LONG_DIR).mkdir()
    (root / LONG_DIR / LONG_FILE).write_text("long\n")
    (root / "bin").mkdir()
    (root / "bin" / "tool").write_text("#!/bin/sh\n")
    os.chmod(root / "bin" / "tool", 0o700 | umask_mode)
    (root / "ünïcode.txt").write_text("u\n")
    os.symlink("/etc/ssl/certs", root / "certs")
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.utime(Path(dirpath, name), (mtime, mtime), follow_symlinks=False)


def test_same_content_gives_identical_bytes(tmp_path: Path) -> None:
    make_tree(tmp_path / "one", mtime=1_000_000, umask_mode=0o055)
    make_tree(tmp_path / "two", mtime=2_000_000_000, umask_mode=0o000)
    d1 = ocitar.write_layer(ocitar.walk_tree(tmp_path / "one", "opt"), tmp_path / "1.tar")
    d2 = ocitar.write_layer(ocitar.walk_tree(tmp_path / "two", "opt"), tmp_path / "2.tar")
    assert (tmp_path / "1.tar").read_bytes() == (tmp_path / "2.tar").read_bytes()
    assert d1 == d2
    assert d1.sha256 == hashlib.sha256((tmp_path / "1.tar").read_bytes()).hexdigest()
    assert d1.size == (tmp_path / "1.tar").stat().st_size


def test_headers_carry_no_time_owner_or_pax(tmp_path: Path) -> None:
    make_tree(tmp_path / "t", mtime=1_234_567, umask_mode=0)
    ocitar.write_layer(ocitar.walk_tree(tmp_path / "t"), tmp_path / "l.tar")
    raw = (tmp_path / "l.tar").read_bytes()
    # Walk the raw 512-byte headers: typeflag 'x'/'g' would be PAX records.
    offset, flags = 0, []
    while offset < len(raw) and raw[offset:offset + 512] != b"\0" * 512:
        header = raw[offset:offset + 512]
        flags.append(header[156:157])
        size = int(header[124:136].rstrip(b"\0 ") or b"0", 8)
        assert header[136:148].rstrip(b"\0 ").strip(b"0") == b"", "mtime must be 0"
        offset += 512 + (size + 511) // 512 * 512
    assert b"x" not in flags and b"g" not in flags
    assert b"L" in flags  # GNU long-name records handle the long path
    with tarfile.open(tmp_path / "l.tar") as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert f"{LONG_DIR}/{LONG_FILE}" in names and "a b/x y.txt" in names and "ünïcode.txt" in names
    assert names == sorted(names)
    for m in members:
        assert (m.mtime, m.uid, m.gid, m.uname, m.gname) == (0, 0, 0, "", "")
        assert not m.pax_headers
    modes = {m.name: m.mode for m in members}
    assert modes["bin/tool"] == 0o755 and modes["a b/x y.txt"] == 0o644 and modes["a b"] == 0o755


def test_parents_are_added_before_children(tmp_path: Path) -> None:
    entries = [ocitar.Entry("usr/lib/x/file", "file", 0o644, data=b"1"), ocitar.Entry("etc/hosts", "file", 0o644, data=b"h")]
    ocitar.write_layer(entries, tmp_path / "l.tar")
    with tarfile.open(tmp_path / "l.tar") as tar:
        assert tar.getnames() == ["etc", "etc/hosts", "usr", "usr/lib", "usr/lib/x", "usr/lib/x/file"]


def test_duplicate_paths_are_refused(tmp_path: Path) -> None:
    entries = [ocitar.Entry("a", "file", 0o644, data=b"1"), ocitar.Entry("/a/", "file", 0o644, data=b"2")]
    with pytest.raises(ocitar.LayerError, match="two entries"):
        ocitar.write_layer(entries, tmp_path / "l.tar")


def test_paths_cannot_climb_out(tmp_path: Path) -> None:
    with pytest.raises(ocitar.LayerError, match=r"\.\."):
        ocitar.write_layer([ocitar.Entry("../etc/passwd", "file", 0o644, data=b"")], tmp_path / "l.tar")


def test_mode_overrides_apply(tmp_path: Path) -> None:
    (tmp_path / "r" / "tmp").mkdir(parents=True)
    ocitar.write_layer(ocitar.walk_tree(tmp_path / "r", modes={"tmp": 0o1777}), tmp_path / "l.tar")
    with tarfile.open(tmp_path / "l.tar") as tar:
        assert tar.getmember("tmp").mode == 0o1777


def test_fifo_is_refused(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    os.mkfifo(tmp_path / "r" / "pipe")
    with pytest.raises(ocitar.LayerError, match="not a regular file"):
        list(ocitar.walk_tree(tmp_path / "r"))
