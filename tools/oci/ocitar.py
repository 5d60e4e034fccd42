"""Deterministic tar layers, written as a stream while they are hashed.

Every entry gets mtime 0, uid/gid 0 and empty user/group names; entries are sorted by path and
parents come before children. The archive is GNU format: long names and link targets use GNU
`././@LongLink` records, which carry no timestamps, so no PAX header (with its atime/ctime) is
ever written. Content is copied in chunks: a multi-GB layer never sits in memory.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

CHUNK = 1 << 20

# Modes a walked tree is normalised to, so the result does not depend on the umask or on
# whether the build ran as root (dpkg-deb -x keeps modes only for root).
DIR_MODE = 0o755
EXEC_MODE = 0o755
FILE_MODE = 0o644
SYMLINK_MODE = 0o777


class LayerError(Exception):
    """A layer cannot be written as asked."""


@dataclass(frozen=True)
class Entry:
    """One tar member. `path` is relative to the image root, without a leading '/'."""

    path: str
    kind: str  # "file" | "dir" | "symlink"
    mode: int
    src: Path | None = None  # host file holding the content (kind "file")
    data: bytes | None = None  # inline content (kind "file"), instead of src
    target: str | None = None  # link target (kind "symlink")
    # Content read from a stream opened when the entry is written (kind "file"; e.g. a zip
    # member), `length` bytes long: nothing is staged on disk or held in memory.
    opener: Callable[[], BinaryIO] | None = None
    length: int = 0

    def size(self) -> int:
        if self.kind != "file":
            return 0
        if self.data is not None:
            return len(self.data)
        if self.opener is not None:
            return self.length
        assert self.src is not None
        return os.stat(self.src).st_size


@dataclass(frozen=True)
class Digest:
    """sha256 and size of a written blob."""

    sha256: str  # 64 hex
    size: int

    @property
    def digest(self) -> str:
        return "sha256:" + self.sha256


class HashingWriter:
    """A write-only file object that hashes what passes through it."""

    def __init__(self, sink: BinaryIO) -> None:
        self._sink = sink
        self._hash = hashlib.sha256()
        self._size = 0

    def write(self, data: bytes) -> int:
        self._sink.write(data)
        self._hash.update(data)
        self._size += len(data)
        return len(data)

    def tell(self) -> int:
        return self._size

    def flush(self) -> None:
        self._sink.flush()

    def result(self) -> Digest:
        return Digest(self._hash.hexdigest(), self._size)


def normalise_path(path: str) -> str:
    """'/usr//lib/' -> 'usr/lib'; rejects '..' and empty paths."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts):
        raise LayerError(f"invalid path in layer: {path!r} (need a path below the image root, no '..')")
    return "/".join(parts)


def walk_tree(root: Path, prefix: str = "", modes: dict[str, int] | None = None,
              file_mode: int | None = None) -> Iterator[Entry]:
    """Entries for everything below `root` (not root itself), placed under `prefix`.

    Modes are normalised (dirs 0755, files 0755 if the owner may execute them, else 0644, or
    `file_mode` for every file: Bazel marks all its outputs executable); `modes` overrides them
    per layer path (e.g. {"tmp": 0o1777}). Sockets, fifos and device nodes are refused: a layer
    should not carry them (runtimes create /dev themselves).
    """
    modes = modes or {}
    prefix = normalise_path(prefix) if prefix.strip("/") else ""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root)
        for name in sorted(dirnames + filenames):
            host = Path(dirpath) / name
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            path = f"{prefix}/{rel}" if prefix else rel
            st = os.lstat(host)
            if stat.S_ISLNK(st.st_mode):
                yield Entry(path, "symlink", modes.get(path, SYMLINK_MODE), target=os.readlink(host))
            elif stat.S_ISDIR(st.st_mode):
                yield Entry(path, "dir", modes.get(path, DIR_MODE))
            elif stat.S_ISREG(st.st_mode):
                if file_mode is not None:
                    default = file_mode
                else:
                    default = EXEC_MODE if st.st_mode & stat.S_IXUSR else FILE_MODE
                yield Entry(path, "file", modes.get(path, default), src=host)
            else:
                raise LayerError(
                    f"{host}: not a regular file, directory or symlink (mode {oct(st.st_mode)}); "
                    "remove it from the tree before layering"
                )


def with_parents(entries: Iterable[Entry]) -> list[Entry]:
    """Sorted entries plus a 0755 dir entry for every missing parent; duplicates are errors."""
    by_path: dict[str, Entry] = {}
    for e in entries:
        path = normalise_path(e.path)
        if path in by_path:
            raise LayerError(f"two entries for {path!r} in one layer; each path may appear once")
        by_path[path] = replace(e, path=path)
    for path in list(by_path):
        parts = path.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            existing = by_path.get(parent)
            if existing is None:
                by_path[parent] = Entry(parent, "dir", DIR_MODE)
            elif existing.kind != "dir":
                raise LayerError(f"{parent!r} is a {existing.kind} but {path!r} needs it to be a directory")
    return [by_path[p] for p in sorted(by_path)]


def _tarinfo(e: Entry) -> tarfile.TarInfo:
    info = tarfile.TarInfo(e.path)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = e.mode
    if e.kind == "dir":
        info.type = tarfile.DIRTYPE
    elif e.kind == "symlink":
        info.type = tarfile.SYMTYPE
        info.linkname = e.target or ""
    elif e.kind == "file":
        info.type = tarfile.REGTYPE
        info.size = e.size()
    else:
        raise LayerError(f"{e.path}: unknown entry kind {e.kind!r}")
    return info


def write_layer(entries: Iterable[Entry], out: Path) -> Digest:
    """Writes the entries (parents added, sorted) as an uncompressed tar; returns its digest."""
    ordered = with_parents(entries)
    with open(out, "wb") as raw:
        sink = HashingWriter(raw)
        with tarfile.open(fileobj=sink, mode="w", format=tarfile.GNU_FORMAT) as tar:  # type: ignore[call-overload]
            for e in ordered:
                info = _tarinfo(e)
                if e.kind != "file":
                    tar.addfile(info)
                elif e.data is not None:
                    tar.addfile(info, io.BytesIO(e.data))
                elif e.opener is not None:
                    with e.opener() as f:
                        tar.addfile(info, f)
                        if f.read(1):
                            raise LayerError(f"{e.path}: its stream is longer than the {e.length} bytes planned")
                else:
                    assert e.src is not None
                    with open(e.src, "rb") as f:
                        tar.addfile(info, f)
                        if f.tell() != info.size:
                            raise LayerError(f"{e.src} changed size while it was being layered")
        return sink.result()


def hash_file(path: Path) -> Digest:
    """sha256 and size of a file, read in chunks: the one file hasher of the repository."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return Digest(h.hexdigest(), size)
