"""The applier on the repository's own series and the real SGLang base they are written against.

Bazel passes PATCHCHAIN_BASE_MARKER (the base's sglang/__init__.py), PATCHCHAIN_BASE_WHEEL (the
wheel it was unpacked from), PATCHCHAIN_DECLARATION (a series.json of the patches directory) and
PATCHCHAIN_SERIES (the series on that base, e.g. "v1 v2 v3" on 0.5.19; unset: every series);
outside Bazel set them by hand or these tests skip.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tools.patches.private.patchchain.chain import apply_chain, read_patch_files
from tools.patches.private.patchchain.declaration import load_chain
from tools.patches.private.patchchain.errors import PatchChecksumError
from tools.patches.private.patchchain.layout import SourceTree
from tools.patches.private.patchchain.wheel import WheelTree, check_wheel

MARKER = os.environ.get("PATCHCHAIN_BASE_MARKER")
DECLARATION = os.environ.get("PATCHCHAIN_DECLARATION")
SERIES = os.environ.get("PATCHCHAIN_SERIES")
pytestmark = pytest.mark.skipif(not (MARKER and DECLARATION), reason="needs the real base and patches (run under Bazel)")


@pytest.fixture(scope="module")
def base() -> SourceTree:
    return SourceTree(Path(MARKER).parent.parent, "package", allow_file_symlinks=True)


@pytest.fixture(scope="module")
def patches_dir() -> Path:
    return Path(DECLARATION).parent.parent


def series_names(patches_dir: Path) -> list[str]:
    """The series written against this base (all of them when PATCHCHAIN_SERIES is unset)."""
    on_disk = sorted(p.parent.name for p in patches_dir.glob("*/series.json"))
    if SERIES is None:
        return on_disk
    names = sorted(SERIES.split())
    assert names and set(names) <= set(on_disk), (names, on_disk)
    return names


def test_every_series_verifies_twice_identically(base, patches_dir):
    names = series_names(patches_dir)
    assert names
    for name in names:
        chain = load_chain(patches_dir, name)
        runs = [apply_chain(chain, base, read_patch_files(chain)).final for _ in range(2)]
        assert runs[0] == runs[1]
        assert set(runs[0]) == {s.path for p in chain.patches for s in p.files}


@pytest.mark.skipif(not os.environ.get("PATCHCHAIN_BASE_WHEEL"), reason="needs the base wheel (run under Bazel)")
def test_the_wheel_is_the_declared_base_and_reads_as_its_tree(base, patches_dir):
    """What the rule applies to (the wheel, read in place) is the root pin and gives the tree's results."""
    wheel = Path(os.environ["PATCHCHAIN_BASE_WHEEL"])
    for name in series_names(patches_dir):
        chain = load_chain(patches_dir, name)
        check_wheel(wheel, chain.base)
        patch_bytes = read_patch_files(chain)
        from_wheel = apply_chain(chain, WheelTree(wheel), patch_bytes)
        from_tree = apply_chain(chain, base, patch_bytes)
        assert (from_wheel.final, from_wheel.base_hashes) == (from_tree.final, from_tree.base_hashes)


def test_a_changed_byte_in_a_real_patch_is_refused(base, patches_dir, tmp_path):
    copy = tmp_path / "patches"
    shutil.copytree(patches_dir, copy)
    diff = copy / "v1/w4afp8-exclusions.diff"
    data = bytearray(diff.read_bytes())
    data[data.index(b"ignored_layers = []")] ^= 0x01
    diff.write_bytes(bytes(data))
    chain = load_chain(copy, "v2")
    with pytest.raises(PatchChecksumError) as e:
        read_patch_files(chain)
    assert "patch:    v1/w4afp8-exclusions.diff" in str(e.value)
    assert "bazel run //patches:rehash -- v1" in str(e.value)
