"""Writes the verified result: only the touched files, plus PROVENANCE.json and PROVENANCE."""

from __future__ import annotations

import os
from pathlib import Path

from .chain import ChainResult
from .declaration import dump_json, resolved_json
from .errors import PatchChainError, Where
from .layout import package_path
from .packages import Packages
from .provenance import provenance_json, provenance_text


def write_outputs(
    result: ChainResult,
    out_dir: Path,
    provenance_json_path: Path,
    provenance_text_path: Path,
    declaration_path: Path | None = None,
    layout: str = "package",
    packages: Packages | None = None,
) -> None:
    """Called only after every check passed. `out_dir` must be absent or empty."""
    if out_dir.exists() and any(out_dir.iterdir()):
        raise PatchChainError(
            f"output directory {out_dir} is not empty",
            Where(fix="point --out-dir at a new or empty directory (outputs never mix with stale files)"),
        )
    packages = packages or Packages({}, {})
    doc = provenance_json(result, packages)
    for path, data in result.final.items():
        if data is None:
            continue
        target = out_dir / (package_path(path) if layout == "package" else path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        os.chmod(target, 0o644)
    for path, data in packages.files.items():
        target = out_dir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        os.chmod(target, 0o644)
    out_dir.mkdir(parents=True, exist_ok=True)
    provenance_json_path.write_text(dump_json(doc), encoding="utf-8")
    provenance_text_path.write_text(provenance_text(doc), encoding="utf-8")
    if declaration_path is not None:
        declaration_path.write_text(dump_json(resolved_json(result.chain, packages.digests)), encoding="utf-8")
