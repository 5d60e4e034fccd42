"""Unpacks an OCI image's layers into a root filesystem directory, for bubblewrap.

Each prefix of the layer chain is cached under its OCI ChainID, so v1, v2 and v3 (same base,
different patch layer) share the unpacked base: a new patch layer costs a hard-link copy of
the base tree plus the patch layer, not a second 2 GB extraction. Files are always unlinked
before they are written, so writing a layer never modifies a hard-linked file of the cached
parent. Whiteouts (`.wh.<name>`, `.wh..wh..opq`) follow the OCI image spec, read by
tools/oci/layerwalk.py (the one whiteout reader).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from tools.oci import layerwalk
from tools.oci.ocilayout import Image, Layer

# Mount points bubblewrap needs in a read-only root; created empty in every cached rootfs.
MOUNT_POINTS = ("proc", "dev", "sys", "tmp", "root")

_TAR_TYPES = {
    "application/vnd.oci.image.layer.v1.tar": "r:",
    "application/vnd.oci.image.layer.v1.tar+gzip": "r:gz",
    "application/vnd.docker.image.rootfs.diff.tar.gzip": "r:gz",
}


# Ownership is only restored when running as root (bubblewrap also runs unprivileged).
_AS_ROOT = os.geteuid() == 0


class UnpackError(Exception):
    """A layer cannot be unpacked safely."""


def chain_ids(diff_ids: list[str]) -> list[str]:
    """OCI ChainIDs: ChainID(L0) = DiffID(L0); ChainID(Ln) = sha256(ChainID(Ln-1) + " " + DiffID(Ln))."""
    out: list[str] = []
    for diff_id in diff_ids:
        if not out:
            out.append(diff_id)
        else:
            out.append("sha256:" + hashlib.sha256(f"{out[-1]} {diff_id}".encode()).hexdigest())
    return out


def _check_inside(root: Path, target: Path, name: str, layer: Layer) -> None:
    # A symlink planted by an earlier entry must not redirect a later write outside the root.
    parent = os.path.realpath(target.parent)
    if parent != str(root) and not parent.startswith(str(root) + os.sep):
        raise UnpackError(f"layer {layer.digest}: entry {name!r} resolves outside the root ({parent})")


def _remove(path: Path) -> None:
    if path.is_symlink() or not path.exists():
        if path.is_symlink():
            path.unlink()
        return
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()


def apply_layer(root: Path, layer: Layer) -> None:
    """Applies one layer (with whiteouts) on top of the tree at `root`."""
    root = Path(os.path.realpath(root))
    mode = _TAR_TYPES.get(layer.media_type)
    if mode is None:
        raise UnpackError(f"layer {layer.digest}: media type {layer.media_type!r} is not supported")
    with tarfile.open(layer.path, mode) as tar:
        try:
            changes = layerwalk.changes(tar.getmembers(), layer.digest)
        except layerwalk.LayerPathError as err:
            raise UnpackError(str(err)) from None
        dirs: list[tuple[Path, tarfile.TarInfo]] = []
        for change in changes:
            member = change.member
            target = root / change.path
            if change.kind == "opaque":
                _check_inside(root, target / "x", member.name, layer)
                if target.is_dir() and not target.is_symlink():
                    for child in target.iterdir():
                        _remove(child)
                continue
            _check_inside(root, target, member.name, layer)
            if change.kind == "whiteout":
                _remove(target)
                continue
            if member.isdir():
                if target.exists() and not target.is_dir():
                    _remove(target)
                target.mkdir(parents=True, exist_ok=True)
                dirs.append((target, member))
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink() or target.exists():
                _remove(target)  # never write through a hard link shared with the parent chain
            if member.issym():
                os.symlink(member.linkname, target)
            elif member.islnk():
                try:
                    source = root / layerwalk.normalise(member.linkname, layer.digest)
                except layerwalk.LayerPathError as err:
                    raise UnpackError(str(err)) from None
                _check_inside(root, source, member.linkname, layer)
                os.link(source, target)
                continue
            elif member.isreg():
                with tar.extractfile(member) as src, open(target, "xb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            else:
                continue  # devices, fifos: the runtime provides /dev
            if _AS_ROOT:
                os.lchown(target, member.uid, member.gid)
            if not member.issym():
                os.chmod(target, member.mode)
                os.utime(target, (member.mtime, member.mtime))
        # Directory modes last: a read-only directory would block its own entries.
        for target, member in reversed(dirs):
            if _AS_ROOT:
                os.lchown(target, member.uid, member.gid)
            os.chmod(target, member.mode)
            os.utime(target, (member.mtime, member.mtime))


def unpack(image: Image, cache_dir: Path) -> Path:
    """Returns a read-only-usable rootfs for `image`, unpacking only layers not yet cached."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    if len(image.diff_ids) != len(image.layers):
        raise UnpackError(
            f"{image.layout}: config lists {len(image.diff_ids)} diff_ids for {len(image.layers)} layers"
        )
    chain = chain_ids(image.diff_ids)
    start = len(chain)
    while start > 0 and not (cache_dir / chain[start - 1].split(":")[1]).is_dir():
        start -= 1
    for index in range(start, len(chain)):
        final = cache_dir / chain[index].split(":")[1]
        work = Path(tempfile.mkdtemp(prefix=".unpack-", dir=cache_dir))
        tree = work / "rootfs"
        if index == 0:
            tree.mkdir()
        else:
            parent = cache_dir / chain[index - 1].split(":")[1] / "rootfs"
            # Hard links share the parent's data; apply_layer unlinks before every write.
            subprocess.run(["cp", "-al", str(parent), str(tree)], check=True)
        apply_layer(tree, image.layers[index])
        for name in MOUNT_POINTS:
            point = tree / name
            if not point.exists() and not point.is_symlink():
                point.mkdir()
        try:
            work.rename(final)
        except OSError:
            # Another runner finished the same chain first; theirs is identical.
            shutil.rmtree(work, ignore_errors=True)
    return cache_dir / chain[-1].split(":")[1] / "rootfs"
