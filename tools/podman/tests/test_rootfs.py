"""Layer unpacking for the bubblewrap fallback: whiteouts, caching, isolation, escapes."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from tools.podman import rootfs
from tools.oci.ocilayout import read_layout
from tools.podman.tests.host_image import layer_of, whiteout, write_layout, write_tree


def _image(tmp_path: Path, *trees: dict[str, str], extra_last: list[tarfile.TarInfo] = ()):
    layers = []
    for i, files in enumerate(trees):
        root = write_tree(tmp_path / f"l{i}", files) if files else None
        layers.append(layer_of(root, extra_last if i == len(trees) - 1 else ()))
    write_layout(tmp_path / "img", layers)
    return read_layout(tmp_path / "img")


def test_later_layer_overrides_and_whiteouts(tmp_path: Path) -> None:
    image = _image(
        tmp_path,
        {"a/keep.txt": "base", "a/gone.txt": "base", "b/old.txt": "base", "c.txt": "base"},
        {"c.txt": "patched"},
        extra_last=[whiteout("a/.wh.gone.txt"), whiteout("b/.wh..wh..opq")],
    )
    root = rootfs.unpack(image, tmp_path / "cache")
    assert (root / "a/keep.txt").read_text() == "base"
    assert not (root / "a/gone.txt").exists()
    assert (root / "b").is_dir() and list((root / "b").iterdir()) == []
    assert (root / "c.txt").read_text() == "patched"
    for point in rootfs.MOUNT_POINTS:
        assert (root / point).is_dir()


def test_patch_layer_does_not_modify_the_cached_base(tmp_path: Path) -> None:
    base = {"site/mod.py": "stock"}
    stock = _image(tmp_path / "s", base)
    stock_root = rootfs.unpack(stock, tmp_path / "cache")
    patched = _image(tmp_path / "p", base, {"site/mod.py": "patched"})
    patched_root = rootfs.unpack(patched, tmp_path / "cache")
    assert patched_root != stock_root
    assert (patched_root / "site/mod.py").read_text() == "patched"
    # The base chain is shared through hard links; the write must not leak into it.
    assert (stock_root / "site/mod.py").read_text() == "stock"


def test_cached_chain_is_reused(tmp_path: Path) -> None:
    image = _image(tmp_path, {"x": "1"})
    first = rootfs.unpack(image, tmp_path / "cache")
    (first / "marker").write_text("cached")
    assert (rootfs.unpack(image, tmp_path / "cache") / "marker").read_text() == "cached"


def test_chain_ids_follow_the_oci_definition() -> None:
    import hashlib

    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    expected = "sha256:" + hashlib.sha256(f"{a} {b}".encode()).hexdigest()
    assert rootfs.chain_ids([a, b]) == [a, expected]


def _raw_layer_image(tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes]]):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data else None)
    write_layout(tmp_path / "img", [buf.getvalue()])
    return read_layout(tmp_path / "img")


def test_dotdot_entry_is_refused(tmp_path: Path) -> None:
    info = tarfile.TarInfo("../evil")
    info.size = 1
    image = _raw_layer_image(tmp_path, [(info, b"x")])
    with pytest.raises(rootfs.UnpackError, match="escapes the root"):
        rootfs.unpack(image, tmp_path / "cache")
    assert not (tmp_path / "cache/evil").exists()


def test_write_through_symlink_is_refused(tmp_path: Path) -> None:
    link = tarfile.TarInfo("out")
    link.type = tarfile.SYMTYPE
    link.linkname = str(tmp_path / "outside")
    (tmp_path / "outside").mkdir()
    file = tarfile.TarInfo("out/evil")
    file.size = 1
    image = _raw_layer_image(tmp_path, [(link, b""), (file, b"x")])
    with pytest.raises(rootfs.UnpackError, match="outside the root"):
        rootfs.unpack(image, tmp_path / "cache")
    assert not (tmp_path / "outside/evil").exists()


def test_hardlink_entry(tmp_path: Path) -> None:
    file = tarfile.TarInfo("a")
    file.size = 2
    link = tarfile.TarInfo("b")
    link.type = tarfile.LNKTYPE
    link.linkname = "a"
    image = _raw_layer_image(tmp_path, [(file, b"hi"), (link, b"")])
    root = rootfs.unpack(image, tmp_path / "cache")
    assert (root / "b").read_text() == "hi"
    assert os.stat(root / "a").st_ino == os.stat(root / "b").st_ino
