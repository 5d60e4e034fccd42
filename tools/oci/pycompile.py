"""Byte-compiles Python sources of a staged image tree the way the image will import them.

Hash-based, unchecked .pyc: layers have mtime 0, which would make timestamp .pyc look stale
(imports then take twice as long), and the layer is immutable, so the interpreter need not
re-check the source. The recorded source path is the path inside the image (`-s ROOT -p /`),
not the build machine's. PYTHONHASHSEED=0 keeps the marshalled bytes stable.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


class CompileError(Exception):
    """compileall could not run."""


def compile_tree(root: Path, rel_dirs: list[str], workers: int = 0, python: str | None = None) -> int:
    """Compiles every .py under root/<rel_dir>; returns how many sources failed to compile.

    Sources that are not valid Python 3.11 (templates, py2 leftovers in wheels) are reported by
    compileall and skipped; that is deterministic, so it is a count, not an error.
    """
    targets = [str(Path(root, d)) for d in rel_dirs if Path(root, d).is_dir()]
    if not targets:
        return 0
    cmd = [
        python or sys.executable, "-m", "compileall", "-q", "-q",
        "-j", str(workers), "--invalidation-mode", "unchecked-hash",
        "-s", str(root), "-p", "/", *targets,
    ]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONHASHSEED": "0", "LC_ALL": "C.UTF-8"}
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode not in (0, 1):
        raise CompileError(f"compileall failed (rc {proc.returncode}): {proc.stdout[-2000:]}")
    # With -qq compileall prints nothing; rc 1 means at least one source did not compile.
    return 0 if proc.returncode == 0 else 1
