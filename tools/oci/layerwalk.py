"""One layer's tar members as the changes a runtime applies (OCI whiteouts), in order.

The single reader of whiteout semantics: the structure test folds the changes into a path
map (merged_view), the bubblewrap backend applies them to a directory (tools/podman/rootfs.py).

  * `.wh..wh..opq` in directory D hides everything the lower layers have in D, wherever the
    marker sits in the tar, so opaque changes come first;
  * `.wh.<name>` deletes <name> (and its subtree) of the lower layers;
  * anything else is an entry that replaces what was at its path.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

if __package__ in (None, ""):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.oci.ocilayout import LayoutError  # noqa: E402

WHITEOUT_PREFIX = ".wh."
OPAQUE = WHITEOUT_PREFIX + WHITEOUT_PREFIX + ".opq"


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
