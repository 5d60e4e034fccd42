"""hook_lines.py: lines changed inside SGLang's files, against the parent chain or the wheel;
new files and shipped packages counted apart."""

from __future__ import annotations

import hashlib
import json
import zipfile

from tools.patches.private.hook_lines import changed_lines, main


def test_changed_lines_counts_added_and_removed_without_context():
    assert changed_lines(b"a\nb\nc\n", b"a\nB\nc\nd\n") == (2, 1)


def _chain(root, wheel_sha, series, chain, outputs, files, packages=()):
    d = root / series
    (d / "patched").mkdir(parents=True)
    for rel, text in files.items():
        (d / "patched" / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / "patched" / rel).write_text(text)
    prov = {"series": series, "chain": chain, "base": {"wheel": "w.whl", "sha256": wheel_sha},
            "outputs": {rel: "x" for rel in outputs}, "packages": {p: {} for p in packages}}
    (d / "PROVENANCE.json").write_text(json.dumps(prov))
    return d / "PROVENANCE.json"


def test_each_series_against_its_parent_or_the_wheel(tmp_path, capsys):

    wheel = tmp_path / "base.zip"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("sglang/a.py", "1\n2\n3\n")
        z.writestr("sglang/b.py", "x\n")
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    v1 = _chain(tmp_path, sha, "v1", ["v1"], ["sglang/a.py"], {"sglang/a.py": "1\n22\n3\n"})
    v2 = _chain(tmp_path, sha, "v2", ["v1", "v2"], ["sglang/a.py", "sglang/b.py", "sglang/new.py", "pkg/__init__.py"],
                {"sglang/a.py": "1\n22\n3\n4\n", "sglang/b.py": "y\n", "sglang/new.py": "n\n", "pkg/__init__.py": ""},
                packages=["pkg"])
    assert main([str(v1), str(v2), str(wheel), "--json"]) == 0
    out = {r["series"]: r for r in json.loads(capsys.readouterr().out)}
    assert out["v1"]["changed"] == 2  # 2 -> 22, against the wheel
    assert out["v2"]["changed"] == 3  # + "4" on top of v1's a.py; b.py x -> y
    assert sorted(out["v2"]["own_files"]) == ["pkg/__init__.py", "sglang/new.py"]
