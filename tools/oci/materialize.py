"""Turns an image's layout directory plus its layer blobs into a self-contained OCI layout.

`bazel build` leaves each image as a small layout (manifest, config, embedded blobs) whose
other layer blobs are separate Bazel outputs. Tools that need every blob in one directory
(skopeo copy, podman pull oci:) get one from this program:

  --mode symlink   instant; for `bazel run`/test scratch directories (skopeo and podman follow
                   symlinks). Never inside a Bazel output directory (Bazel 4 rejects them).
  --mode hardlink  instant on one filesystem; never for Bazel outputs either (linking changes
                   the source file's ctime, which makes Bazel redo the action that made it).
  --mode copy      what the `<image>.layout` Bazel targets use; costs a full copy.

Under `bazel run` (the `<image>.view` targets) a relative --out is taken from the directory
the user ran Bazel in, and --replace rewrites a previous view there.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from tools.oci import ocitar
from tools.oci.ocilayout import Image, LayoutError, blob_path, link_or_copy, parse_blob_args, read_layout


def materialize(image: Path, blobs: dict[str, Path], out: Path, mode: str, verify: bool = False) -> str:
    """Writes the full layout to `out`; returns the manifest digest. `blobs`: digest -> file."""
    return materialize_image(read_layout(image, blobs), out, mode, verify)


def materialize_image(img: Image, out: Path, mode: str, verify: bool = False, partial: bool = False) -> str:
    """materialize() of an image already read (its layers' paths say where the blobs are).

    `partial`: layers without a blob (a shallow base's, kept in a registry) are left out
    instead of refused (a push or a scan of what is here).
    """
    image = img.layout
    out.mkdir(parents=True, exist_ok=True)
    (out / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    # The small files (index, oci-layout, manifest, config, embedded blobs) are always copied.
    for src in sorted(Path(image).rglob("*")):
        rel = src.relative_to(image)
        dst = out / rel
        if src.is_dir():
            dst.mkdir(parents=True, exist_ok=True)
        elif not dst.exists():
            shutil.copyfile(src, dst)
    missing = []
    for layer in img.layers:
        digest, size, src = layer.digest, layer.size, layer.path
        dst = blob_path(out, digest)
        if dst.exists():
            continue
        if src is None:
            if not partial:
                missing.append(digest)
            continue
        actual = os.stat(src).st_size
        if actual != size:
            raise LayoutError(f"{src}: {actual} bytes, but the manifest says {digest} has {size}; rebuild the layer")
        if verify and ocitar.hash_file(src).digest != digest:
            raise LayoutError(f"{src} does not hash to {digest}; rebuild the layer")
        link_or_copy(src, dst, mode)
    if missing:
        raise LayoutError(
            f"{image}: no blob given for layer(s) {', '.join(missing)}; pass --blob DESCRIPTOR=BLOB "
            "for every layer (a shallow base has no blobs: pull it first)")
    return img.manifest_digest


def link_view(image: Image, dest: Path) -> Path:
    """`dest`: a layout of symlinks to every blob the image has here (shallow layers left out)."""
    materialize_image(image, dest, "symlink", partial=True)
    return dest


def prepare_out(out: Path, replace: bool) -> Path:
    """The --out directory: relative to where `bazel run` was started; an old layout there is
    removed with --replace (anything else that is not empty is refused)."""
    if not out.is_absolute() and os.environ.get("BUILD_WORKING_DIRECTORY"):
        out = Path(os.environ["BUILD_WORKING_DIRECTORY"]) / out
    if out.is_dir() and any(out.iterdir()):
        if not replace:
            raise LayoutError(f"{out} is not empty; give an empty or new directory (or --replace for an old layout)")
        if not (out / "oci-layout").is_file():
            raise LayoutError(f"{out} is not empty and holds no oci-layout file; refusing to replace it")
        shutil.rmtree(out)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--image", type=Path, required=True, help="the image's layout directory")
    p.add_argument("--blob", action="append", default=[], metavar="DESCRIPTOR=BLOB",
                   help="a layer descriptor JSON and its blob file (repeat for every layer)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--mode", choices=("copy", "hardlink", "symlink"), default="copy")
    p.add_argument("--verify", action="store_true", help="re-hash every blob (slow; sizes are always checked)")
    p.add_argument("--replace", action="store_true", help="remove an OCI layout already at --out first")
    args = p.parse_args(argv)
    try:
        args.out = prepare_out(args.out, args.replace)
        digest = materialize(args.image, parse_blob_args(args.blob), args.out, args.mode, args.verify)
    except (LayoutError, OSError) as e:
        print(f"materialize.py: error: {e}", file=sys.stderr)
        return 1
    print(digest)
    if os.environ.get("BUILD_WORKING_DIRECTORY"):
        ref = read_layout(args.out).ref_name
        print(f"{args.out}: OCI layout ({args.mode}), e.g. skopeo inspect oci:{args.out}:{ref}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
