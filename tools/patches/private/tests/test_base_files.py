"""base_files.py: what a base must hold for a chain (chain_base_files, oci_pull's `expect`)."""

from __future__ import annotations

import json
from pathlib import Path

from tools.patches.private import base_files

A, B, C, D, P = ("a" * 64, "b" * 64, "c" * 64, "d" * 64, "e" * 64)


def _declaration() -> dict:
    return {
        "series": "v9",
        "base": {"wheel": "sglang-9.whl", "sha256": "0" * 64},
        "patches": [
            {"file": "one.diff", "files": {"python/sglang/a.py": {"before": A, "after": B},
                                           "python/sglang/new.py": {"before": None, "after": C}}},
            {"file": "two.diff", "files": {"python/sglang/a.py": {"before": B, "after": D}}},
        ],
        "pins": {"python/sglang/a.py": {"series": "v9", "sha256": D, "reason": "r"},
                 "python/sglang/pinned.py": {"series": "v9", "sha256": P, "reason": "r"}},
    }


def test_first_touch_before_hashes_then_untouched_pins(tmp_path: Path) -> None:
    out = tmp_path / "expect.json"
    assert base_files.main(["--declaration", str(_write(tmp_path, _declaration())), "--site", "/usr/lib/site/",
                            "--fix", "pin another base", "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == {
        "what": "the patch series v9 (on sglang-9.whl)",
        "fix": "pin another base",
        "files": [
            # a.py as the base holds it: before the first patch touching it (not the pin of the result)
            {"path": "usr/lib/site/sglang/a.py", "sha256": A, "note": "series file python/sglang/a.py"},
            # new.py is created by the chain: nothing to expect
            {"path": "usr/lib/site/sglang/pinned.py", "sha256": P, "note": "series file python/sglang/pinned.py"},
        ],
    }


def test_not_a_declaration_is_an_error_naming_the_file(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path, {"patches": []})
    assert base_files.main(["--declaration", str(path), "--site", "s", "--fix", "f", "--out", str(tmp_path / "o")]) == 1
    assert f"{path}: not a resolved series declaration" in capsys.readouterr().err


def _write(tmp: Path, doc: dict) -> Path:
    path = tmp / "series.resolved.json"
    path.write_text(json.dumps(doc))
    return path
