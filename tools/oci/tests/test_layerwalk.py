"""layerwalk + structure.merged_view: OCI whiteouts as a runtime applies them."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from tools.oci import layerwalk
from tools.oci.structure import merged_view


def tar(path: Path, names: list[str]) -> Path:
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
        for name in names:
            info = tarfile.TarInfo(name.rstrip("/"))
            if name.endswith("/"):
                info.type = tarfile.DIRTYPE
                t.addfile(info)
            else:
                t.addfile(info, io.BytesIO(b""))
    return path


def test_opaque_marker_hides_lower_layers_wherever_it_sits(tmp_path: Path) -> None:
    lower = tar(tmp_path / "lower.tar", ["d/", "d/old", "e/", "e/kept"])
    # The marker comes after this layer's own d/new: it must still hide only d/old.
    upper = tar(tmp_path / "upper.tar", ["d/", "d/new", "d/.wh..wh..opq"])
    view = merged_view([lower, upper])
    assert sorted(view) == ["d", "d/new", "e", "e/kept"]


def test_whiteout_removes_the_subtree(tmp_path: Path) -> None:
    lower = tar(tmp_path / "lower.tar", ["a/", "a/b/", "a/b/c", "x"])
    upper = tar(tmp_path / "upper.tar", ["a/.wh.b", ".wh.x"])
    assert sorted(merged_view([lower, upper])) == ["a"]


def test_entries_escaping_the_root_are_refused(tmp_path: Path) -> None:
    bad = tar(tmp_path / "bad.tar", ["../etc/passwd"])
    with pytest.raises(layerwalk.LayerPathError, match="escapes the root"):
        layerwalk.read_changes(bad, "bad")


def test_a_file_replaces_a_directory_and_a_directory_merges(tmp_path: Path) -> None:
    lower = tar(tmp_path / "lower.tar", ["a/", "a/b", "c/", "c/d"])
    upper = tar(tmp_path / "upper.tar", ["a", "c/", "c/e"])
    view = merged_view([lower, upper])
    assert sorted(view) == ["a", "c", "c/d", "c/e"]
    assert (view["a"].kind, view["a"].layer, view["c"].layer) == ("file", 1, 1)
