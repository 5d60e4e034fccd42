"""One layer's tar members as the changes a runtime applies (OCI whiteouts), in order, and the
merged view of a stack of layers.

The single reader of whiteout semantics: `MergedView` folds the changes into a path map (the
structure test's merged filesystem, the shallow pull's file hashes), the bubblewrap backend
applies them to a directory (tools/podman/rootfs.py).

  * `.wh..wh..opq` in directory D hides everything the lower layers have in D, wherever the
    marker sits in the tar, so opaque changes come first;
  * `.wh.<name>` deletes <name> (and its subtree) of the lower layers;
  * anything else is an entry that replaces what was at its path (a non-directory also
    replaces the subtree of a directory it lands on; a directory merges with one).
"""

from __future__ import annotations

import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Generic, TypeVar

from tools.oci.ocilayout import LayoutError

WHITEOUT_PREFIX = ".wh."
OPAQUE = WHITEOUT_PREFIX + WHITEOUT_PREFIX + ".opq"

T = TypeVar("T")


class LayerPathError(LayoutError):
    """A member name that would leave the root filesystem."""


@dataclass(frozen=True)
class Change:
    kind: str  # "opaque" | "whiteout" | "entry"
    path: str  # relative, normalised; for "opaque" the directory, for "whiteout" the deleted path
    member: tarfile.TarInfo


def normalise(name: str, where: str) -> str:
    """'./usr//lib/' -> 'usr/lib'; '' for the root; refuses '..' components."""
    path = PurePosixPath(name.lstrip("/"))
    if ".." in path.parts:
        raise LayerPathError(f"layer {where}: entry {name!r} escapes the root ('..')")
    text = str(path)
    return "" if text == "." else text


def changes(members: list[tarfile.TarInfo], where: str) -> list[Change]:
    """The changes of one layer (`where` names it in errors): opaque markers first, then the
    whiteouts and entries in tar order. The root entry itself is skipped."""
    opaque, rest = [], []
    for member in members:
        path = normalise(member.name, where)
        if not path:
            continue
        parent, _, base = path.rpartition("/")
        if base == OPAQUE:
            opaque.append(Change("opaque", parent, member))
        elif base.startswith(WHITEOUT_PREFIX):
            rest.append(Change("whiteout", (parent + "/" if parent else "") + base[len(WHITEOUT_PREFIX):], member))
        else:
            rest.append(Change("entry", path, member))
    return opaque + rest


def read_changes(blob: Path, where: str, mode: str = "r:") -> list[Change]:
    with tarfile.open(blob, mode) as tar:
        return changes(tar.getmembers(), where)


class MergedView(Generic[T]):
    """path -> value of the filesystem the layers applied so far make (bottom layer first).

    `paths` holds a value for each path the caller's `value` function gave one; the paths
    between (directories nobody asked about) are only indexed, so a whiteout or a replaced
    directory drops exactly its subtree without a scan of the whole map.
    """

    def __init__(self) -> None:
        self.paths: dict[str, T] = {}
        self._children: dict[str, set[str]] = {}  # directory -> its indexed children (full paths)

    def apply(self, layer: Iterable[Change], value: Callable[[Change], T | None]) -> None:
        """One layer's changes (from `changes`, in that order); `value(change)` of an entry is
        what the view keeps at its path (None: nothing, but it still replaces what was there)."""
        for change in layer:
            if change.kind == "opaque":
                self._drop(change.path, keep_top=True)
                continue
            if change.kind == "whiteout" or not change.member.isdir():
                self._drop(change.path)
            else:
                self.paths.pop(change.path, None)
            if change.kind == "entry":
                kept = value(change)
                if kept is not None:
                    self.paths[change.path] = kept
                    self._index(change.path)

    def _index(self, path: str) -> None:
        while path:
            parent = path.rpartition("/")[0]
            siblings = self._children.setdefault(parent, set())
            if path in siblings:
                return
            siblings.add(path)
            path = parent

    def _drop(self, path: str, keep_top: bool = False) -> None:
        """Removes the subtree below `path`, and `path` itself unless keep_top."""
        if not keep_top:
            self.paths.pop(path, None)
            self._children.get(path.rpartition("/")[0], set()).discard(path)
        below = list(self._children.pop(path, ()))
        while below:
            p = below.pop()
            self.paths.pop(p, None)
            below.extend(self._children.pop(p, ()))
