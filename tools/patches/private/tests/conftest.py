"""Synthetic base trees, patches and declarations for the applier's tests (all under tmp_path)."""

from __future__ import annotations

import base64
import difflib
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tools.patches.private.patchchain import apply_main
from tools.patches.private.patchchain.declaration import dump_json
from tools.patches.private.patchchain.layout import SourceTree
from tools.patches.private.patchchain.rehash_main import rehash

BASE_PIN = {"wheel": "sglang-0.5.19-cp311-cp311-manylinux_2_34_x86_64.whl", "sha256": "0" * 64}


def udiff(path: str, old: str | None, new: str | None, *, context: int = 3) -> str:
    """A git-style unified diff of one file, as `git diff` writes it (paths in the git tree)."""
    a = old.splitlines(True) if old else []
    b = new.splitlines(True) if new else []
    head = [f"diff --git a/{path} b/{path}\n"]
    if old is None:
        head.append("new file mode 100644\n")
    if new is None:
        head.append("deleted file mode 100644\n")
    body = list(difflib.unified_diff(
        a, b, f"a/{path}" if old is not None else "/dev/null", f"b/{path}" if new is not None else "/dev/null", n=context
    ))
    return "".join(head + body)


def binary_literal(path: str, old_exists: bool, data: bytes) -> str:
    """A `git diff --binary` section replacing the file with `data` (literal form)."""

    def block(raw: bytes) -> list[str]:
        z = zlib.compress(raw, 9)
        lines = [f"literal {len(raw)}\n"]
        for i in range(0, len(z), 52):
            chunk = z[i:i + 52]
            n = len(chunk)
            c = chr(ord("A") + n - 1) if n <= 26 else chr(ord("a") + n - 27)
            lines.append(c + base64.b85encode(chunk, pad=True).decode() + "\n")
        return lines + ["\n"]

    head = [f"diff --git a/{path} b/{path}\n"]
    if not old_exists:
        head.append("new file mode 100644\n")
    head.append("index 0000000..1111111\n" if not old_exists else "index 1111111..2222222 100644\n")
    return "".join(head + ["GIT binary patch\n"] + block(data) + block(b""))


def patch_text(*sections: str, header: str = "Why: a test patch.\n\n") -> str:
    return header + "".join(sections)


P = "python/sglang/srt/"


@dataclass
class Synth:
    """A tmp workspace: base/ (package layout), patches/<series>/..., out/."""

    tmp: Path
    series: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def base(self) -> Path:
        return self.tmp / "base"

    @property
    def patches(self) -> Path:
        return self.tmp / "patches"

    @property
    def out(self) -> Path:
        return self.tmp / "out"

    def base_file(self, rel: str, text: str | bytes) -> Path:
        """`rel` as in the git tree (python/sglang/...)."""
        target = self.base / rel.removeprefix("python/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text.encode() if isinstance(text, str) else text)
        return target

    def add_series(self, name: str, patches: list[tuple[str, str | bytes]], extends: str | None = None,
                   pins: dict[str, str] | None = None, **patch_meta: Any) -> Path:
        """Writes the patch files and a declaration whose hashes rehash fills in."""
        d = self.patches / name
        d.mkdir(parents=True, exist_ok=True)
        entries = []
        for file, text in patches:
            (d / file).write_bytes(text.encode() if isinstance(text, str) else text)
            entries.append({
                "file": file,
                "origin": {"kind": "new-here", "date": "2026-11-29"},
                "scope": ["f"],
                "activation": {"kind": "unconditional"},
                **patch_meta.get(file, {}),
            })
        decl: dict[str, Any] = {"schema": 1}
        if extends:
            decl["extends"] = extends
        else:
            decl["base"] = BASE_PIN
        decl["patches"] = entries
        if pins:
            decl["pins"] = {p: {"sha256": None, "reason": "tests import it"} for p in pins}
        path = d / "series.json"
        path.write_text(dump_json(decl))
        return path

    def rehash(self, name: str) -> None:
        decl, _, new = rehash(name, self.patches, SourceTree(self.base))
        decl.path.write_text(new)

    def declaration(self, name: str) -> dict[str, Any]:
        return json.loads((self.patches / name / "series.json").read_text())

    def save_declaration(self, name: str, doc: dict[str, Any]) -> None:
        (self.patches / name / "series.json").write_text(dump_json(doc))

    def wheel(self, members: dict[str, bytes] | None = None) -> Path:
        """base/ as a wheel (deflated, with directory entries, as pip-built wheels are), plus
        `members`; the root series' base pin is set to its sha256."""
        import hashlib
        import zipfile

        path = self.tmp / "base.whl"
        files = {p.relative_to(self.base).as_posix(): p.read_bytes() for p in sorted(self.base.rglob("*")) if p.is_file()}
        files.update(members or {})
        dirs = sorted({name.rsplit("/", n)[0] + "/" for name in files for n in range(1, name.count("/") + 1)})
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as whl:
            for d in dirs:
                whl.writestr(d, b"")
            for name, data in files.items():
                whl.writestr(name, data)
        for name in sorted(d.parent.name for d in self.patches.glob("*/series.json")):
            doc = self.declaration(name)
            if "base" in doc:
                doc["base"]["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
                self.save_declaration(name, doc)
        return path

    def apply(self, series: str, capsys: pytest.CaptureFixture[str], *extra: str,
              wheel: Path | None = None) -> tuple[int, str]:
        base = ["--base-wheel", str(wheel)] if wheel else ["--base-root", str(self.base)]
        rc = apply_main.main([
            "--patches-dir", str(self.patches), "--series", series, *base,
            "--out-dir", str(self.out / "patched"), "--provenance-json", str(self.out / "PROVENANCE.json"),
            "--provenance-text", str(self.out / "PROVENANCE"), "--declaration-out", str(self.out / "decl.json"),
            *extra,
        ])
        captured = capsys.readouterr()
        return rc, captured.err

    def apply_fails(self, series: str, capsys: pytest.CaptureFixture[str], *extra: str,
                    wheel: Path | None = None) -> str:
        """Applies, expects failure, and checks nothing was written; returns the message."""
        rc, err = self.apply(series, capsys, *extra, wheel=wheel)
        assert rc == 1, err
        assert not self.out.exists(), "a failing run must write nothing"
        return err


MODULE = "".join(f"def f{i}():\n    return {i}\n\n\n" for i in range(20))


@pytest.fixture
def synth(tmp_path: Path) -> Synth:
    s = Synth(tmp_path)
    s.base_file("python/sglang/__init__.py", "")
    s.base_file(P + "mod.py", MODULE)
    s.base_file(P + "other.py", "X = 1\n")
    s.base_file(P + "pinned.py", "PINNED = True\n")
    return s


def repin(s: Synth, series: str, file: str, text: str | bytes) -> None:
    """Replaces a patch file and pins its new sha256 (as if someone edited both by hand)."""
    import hashlib

    data = text.encode() if isinstance(text, str) else text
    (s.patches / series / file).write_bytes(data)
    doc = s.declaration(series)
    for entry in doc["patches"]:
        if entry["file"] == file:
            entry["sha256"] = hashlib.sha256(data).hexdigest()
    s.save_declaration(series, doc)
