"""The base read straight from its wheel (a zip), so the chain's action stages one input instead
of the unpacked tree's thousands of files (Bazel symlinks, and afterwards deletes, every input
of a sandboxed action).

WheelTree answers like SourceTree: a file's bytes, None for an absent path, an error for a
directory. zipfile checks each member's CRC-32 as it reads it; check_wheel compares the whole
file with the series' declared base (wheel name and sha256).
"""

from __future__ import annotations

import hashlib
import stat
import zipfile
from pathlib import Path

from .declaration import BasePin
from .errors import BaseDriftError, PatchChainError, PathOutsideRootError, Where
from .layout import PACKAGE_DIR, package_path


def check_wheel(path: Path, pin: BasePin) -> None:
    """`path` is the wheel the root series declares (its sha256)."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    except OSError as e:
        raise PatchChainError(f"the base wheel {path} cannot be read ({e.strerror})",
                              Where(file=str(path), fix="pass the wheel file itself (a zip)")) from None
    if h.hexdigest() != pin.sha256:
        raise BaseDriftError(
            "the base wheel is not the one the series declares",
            Where(file=str(path), expected=f"sha256 {pin.sha256} ({pin.wheel})", actual=f"sha256 {h.hexdigest()}",
                  fix="apply the series to the wheel its root series.json names (the patch_chain `base`), or "
                  "move the series to the new base: regenerate the patches against it and rehash"),
        )


class WheelTree:
    """A read-only base tree: the members of a wheel (package layout: sglang/... at the root)."""

    def __init__(self, wheel: Path) -> None:
        self.wheel = wheel
        try:
            self._zip = zipfile.ZipFile(wheel)
        except (OSError, zipfile.BadZipFile) as e:
            raise PatchChainError(f"the base wheel {wheel} cannot be read ({e})",
                                  Where(file=str(wheel), fix="pass the wheel file itself (a zip)")) from None
        self._files = {i.filename: i for i in self._zip.infolist() if not i.is_dir()}
        self._dirs = {name.rsplit("/", n)[0] for name in self._files for n in range(1, name.count("/") + 1)}
        self._dirs.update(i.filename.rstrip("/") for i in self._zip.infolist() if i.is_dir())

    def check_root(self) -> None:
        if f"{PACKAGE_DIR}/__init__.py" not in self._files:
            raise PathOutsideRootError(
                f"the base wheel {self.wheel} does not hold {PACKAGE_DIR}/__init__.py",
                Where(file=str(self.wheel), fix="pass the SGLang wheel the root series declares"),
            )

    def read(self, path: str, where: Where) -> bytes | None:
        """The file's bytes, or None if absent. `path` must already be checked."""
        rel = package_path(path)
        info = self._files.get(rel)
        if info is not None:
            if stat.S_ISLNK(info.external_attr >> 16):
                where.file = path
                where.fix = "the base must hold the files themselves, not symlinks"
                raise PathOutsideRootError("path is a symlink in the base wheel", where)
            try:
                return self._zip.read(info)
            except (OSError, zipfile.BadZipFile) as e:
                where.file = path
                where.fix = "fetch the wheel again (a corrupt wheel is never a valid base)"
                raise PatchChainError(f"the base wheel {self.wheel} is corrupt ({e})", where) from None
        if rel in self._dirs:
            where.file = path
            where.fix = "the path must name a regular file in the base tree"
            raise PathOutsideRootError("path is not a regular file in the base tree", where)
        return None
