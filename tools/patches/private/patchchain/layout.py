"""Where manifest paths live: upstream git-tree paths mapped onto a package root.

Patches and declarations name files as in the upstream git tree (python/sglang/srt/...).
The same series applies to a git checkout (layout "git": the root holds python/sglang/) or to
an installed package (layout "package": the root holds sglang/, e.g. site-packages or the
unpacked wheel), so a path is validated once and then mapped to the chosen root.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .errors import PathOutsideRootError, Where

# The part of the git tree that is the importable package, and its name in a package root.
GIT_SOURCE_ROOT = "python/sglang"
PACKAGE_DIR = "sglang"
LAYOUTS = ("package", "git")


def check_manifest_path(path: str, where: Where) -> str:
    """Returns `path` if it is a plain relative path under python/sglang/, else raises."""
    problem = None
    if not path:
        problem = "the path is empty"
    elif path.startswith("/"):
        problem = "the path is absolute"
    elif "\\" in path or "\0" in path or "\r" in path:
        problem = "the path contains a backslash, NUL or carriage return"
    else:
        parts = path.split("/")
        if any(p == ".." for p in parts):
            problem = "the path climbs out with '..'"
        elif any(p in ("", ".") for p in parts):
            problem = "the path has an empty or '.' component"
        elif not path.startswith(GIT_SOURCE_ROOT + "/"):
            problem = f"the path is not under {GIT_SOURCE_ROOT}/"
    if problem is None:
        return path
    where.file = path
    where.fix = where.fix or (
        f"write paths as in the upstream git tree, relative and under {GIT_SOURCE_ROOT}/ "
        "(e.g. a/python/sglang/srt/managers/scheduler.py); regenerate the patch with `git diff`"
    )
    raise PathOutsideRootError(f"path outside the source root: {problem}", where)


def package_path(path: str) -> str:
    """python/sglang/srt/x.py -> sglang/srt/x.py (the path inside a package root)."""
    return PACKAGE_DIR + path[len(GIT_SOURCE_ROOT):]


class BaseTree(Protocol):
    """What the chain reads a base through: SourceTree (a directory) or wheel.WheelTree."""

    def check_root(self) -> None: ...

    def read(self, path: str, where: Where) -> bytes | None: ...


@dataclass(frozen=True)
class SourceTree:
    """A read-only base tree. Reads refuse to leave the root, also through symlinks."""

    root: Path
    layout: str = "package"
    # Bazel stages every input file as a symlink into its own cache; directories stay real.
    allow_file_symlinks: bool = False

    def check_root(self) -> None:
        """Fails early when --base-root does not hold the package (wrong directory or layout)."""
        marker = self.root / (PACKAGE_DIR if self.layout == "package" else GIT_SOURCE_ROOT) / "__init__.py"
        if not marker.is_file():
            other = "git" if self.layout == "package" else "package"
            raise PathOutsideRootError(
                f"the base root {self.root} does not hold {marker.relative_to(self.root)}",
                Where(fix=f"point --base-root at the directory holding {PACKAGE_DIR}/ (layout package) or "
                      f"python/sglang/ (layout git), or pass --base-layout {other}"),
            )

    def read(self, path: str, where: Where) -> bytes | None:
        """The file's bytes, or None if absent. `path` must already be checked."""
        real_root = Path(os.path.realpath(self.root))
        rel = package_path(path) if self.layout == "package" else path
        current = real_root
        parts = rel.split("/")
        for i, part in enumerate(parts):
            current = current / part
            try:
                st = os.lstat(current)
            except FileNotFoundError:
                return None
            last = i == len(parts) - 1
            if stat.S_ISLNK(st.st_mode):
                target = Path(os.path.realpath(current))
                inside = target == real_root or real_root in target.parents
                if not last or not (self.allow_file_symlinks or inside):
                    where.file = path
                    where.details.append(f"symlink: {current} -> {os.readlink(current)}")
                    where.fix = (
                        "the base tree must hold the files themselves: replace the symlink "
                        "with the file, or point --base-root at the real tree"
                    )
                    raise PathOutsideRootError(
                        "path outside the source root: it goes through a symlink", where
                    )
                st = os.stat(current)
            if not last and not stat.S_ISDIR(st.st_mode):
                return None
        if not stat.S_ISREG(st.st_mode):
            where.file = path
            where.fix = "the path must name a regular file in the base tree"
            raise PathOutsideRootError("path is not a regular file in the base tree", where)
        return current.read_bytes()
