"""patch_layer.py: base-independent bytes, per-patch labels, fresh .pyc, whiteouts, recipe dir."""

from __future__ import annotations

import importlib.util
import json
import marshal
import tarfile
from pathlib import Path

from fakechain import PATCHED, build_patch_layer, make_chain

SITE = "usr/lib/python3/dist-packages"


def test_same_chain_gives_the_same_layer(tmp_path: Path, tool) -> None:
    a = build_patch_layer(tool, make_chain(tmp_path / "c1"), tmp_path / "a")
    b = build_patch_layer(tool, make_chain(tmp_path / "c2"), tmp_path / "b")
    assert a["tar"].read_bytes() == b["tar"].read_bytes()
    assert a["digest"].read_text() == b["digest"].read_text()
    assert a["digest"].read_text().startswith("sha256:") and a["digest"].read_text().endswith("\n")


def test_labels_follow_version_and_activation(tmp_path: Path, tool) -> None:
    p = build_patch_layer(tool, make_chain(tmp_path / "c"), tmp_path / "o")
    assert p["labels"].read_text().splitlines() == [
        "ai.glm53.patch.w4afp8_exclusions=v1",
        "ai.glm53.patch.dsa_indexer_qsplit=v1-opt-in",
        "ai.glm53.patch.event_loop_stall_dump=v1-on-30s",
    ]
    rows = json.loads(p["patches"].read_text())
    assert rows[2] == {"name": "event-loop-stall-dump", "version": "v1", "activation": "on-30s",
                       "series": "v3", "file": "event-loop-stall-dump.diff"}


def test_layer_contents(tmp_path: Path, tool) -> None:
    p = build_patch_layer(tool, make_chain(tmp_path / "c"), tmp_path / "o")
    with tarfile.open(p["tar"]) as tar:
        names = set(tar.getnames())
        pyc = tar.extractfile(f"{SITE}/sglang/srt/__pycache__/x.cpython-311.pyc").read()
    # The recipe, provenance and tests ship in the image.
    for name in ("series.json", "PROVENANCE", "PROVENANCE.json", "patches.json", "tests/v3/tests/test_x.py"):
        assert f"usr/share/glm53-engine/glm53_v3/{name}" in names
    # Deleted files are whited out (with their bytecode).
    assert f"{SITE}/sglang/srt/.wh.old.py" in names
    assert f"{SITE}/sglang/srt/__pycache__/.wh.old.cpython-311.pyc" in names
    # The .pyc is unchecked-hash, compiled from the patched source, and names the image path.
    flags = int.from_bytes(pyc[4:8], "little")
    assert flags == 0b01  # hash-based, check_source off
    assert pyc[8:16] == importlib.util.source_hash(PATCHED.encode())
    code = marshal.loads(pyc[16:])
    assert code.co_filename == f"/{SITE}/sglang/srt/x.py"


def test_missing_sglang_dir_is_an_error(tmp_path: Path, tool) -> None:
    chain = make_chain(tmp_path / "c")
    (chain.patched / "sglang").rename(chain.patched / "other")
    out = tmp_path / "o"
    out.mkdir()
    proc = tool("patch_layer", "--patched", str(chain.patched), "--pyc", str(out / "pyc"), "--declaration", str(chain.declaration),
                "--provenance-json", str(chain.provenance_json), "--provenance-text", str(chain.provenance_text),
                "--recipe", "r", "--recipe-dir", "/usr/share/glm53-engine/r", "--out", str(out / "t"), "--out-descriptor", str(out / "d"), "--out-digest", str(out / "g"),
                "--out-contents", str(out / "m"), "--out-patches", str(out / "p"), "--out-labels", str(out / "l"), check=False)
    assert proc.returncode == 1 and "holds no sglang/ directory" in proc.stderr


def test_a_patched_file_without_bytecode_is_an_error(tmp_path: Path, tool) -> None:
    # Without its .pyc the base's stock bytecode would run instead of the patch.
    chain = make_chain(tmp_path / "c", patched_text="def f(:\n")
    proc = tool("patch_pyc", "--patched", str(chain.patched), "--site", SITE, "--out", str(tmp_path / "pyc"), check=False)
    assert proc.returncode == 1
    assert f"{chain.patched}/sglang/srt/x.py does not compile" in proc.stderr


def test_a_patched_file_without_its_pyc_is_refused(tmp_path: Path, tool) -> None:
    chain = make_chain(tmp_path / "c")
    out = tmp_path / "o"
    (out / "pyc").mkdir(parents=True)
    proc = tool("patch_layer", "--patched", str(chain.patched), "--pyc", str(out / "pyc"), "--declaration", str(chain.declaration),
                "--provenance-json", str(chain.provenance_json), "--provenance-text", str(chain.provenance_text),
                "--recipe", "r", "--recipe-dir", "/usr/share/glm53-engine/r", "--out", str(out / "t"), "--out-descriptor", str(out / "d"), "--out-digest", str(out / "g"),
                "--out-contents", str(out / "m"), "--out-patches", str(out / "p"), "--out-labels", str(out / "l"), check=False)
    assert proc.returncode == 1 and "holds no .pyc of sglang/srt/x.py" in proc.stderr
