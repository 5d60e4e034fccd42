"""Recomputes a series' declared hashes after an intentional edit and shows the change.

  bazel run //patches:rehash -- v2            # print the change to patches/v2/series.json
  bazel run //patches:rehash -- v2 --write    # ... and write it

The parent series must verify as declared (rehash them first, root first). For each patch of
the series: its sha256, and for every file it touches the sha256 just before and after it
(renames, deletes and binary changes are recorded as the patch makes them; review them);
identity pins are re-read from the base. Declared offsets, origins, scopes and activations are
kept. Without --write nothing is written.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from dataclasses import replace
from pathlib import Path

from .chain import apply_chain, read_patch_files, sha256
from .declaration import FileStep, SeriesDecl, dump_json, load_chain, series_json
from .errors import PatchChainError, Where
from .layout import LAYOUTS, SourceTree


def rehash(chain_series: str, patches_dir: Path, tree: SourceTree) -> tuple[SeriesDecl, str, str]:
    """Returns (updated declaration, old text, new text)."""
    chain = load_chain(patches_dir, chain_series, rehashing=chain_series)
    decl = chain.series[-1]
    patch_bytes = read_patch_files(chain, series_to_skip=decl.name)
    result = apply_chain(chain, tree, patch_bytes, observe=decl.name)
    patches = []
    for p in decl.patches:
        declared = {s.path: s for s in p.files or ()}
        files = []
        for step in result.steps:
            if step.patch.name != p.name:
                continue
            offsets = declared[step.path].offsets if step.path in declared else ()
            files.append(FileStep(step.path, step.before, step.after, step.renamed_from, step.binary, offsets))
        patches.append(replace(p, sha256=sha256(patch_bytes[p.name]), files=tuple(sorted(files, key=lambda s: s.path))))
    pins = tuple(replace(pin, sha256=sha256(tree.read(pin.path, Where(file=pin.path)))) for pin in decl.pins)
    new = replace(decl, patches=tuple(patches), pins=pins)
    return new, decl.path.read_text(encoding="utf-8"), dump_json(series_json(new))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("series", help="the series whose declaration to recompute, e.g. v2")
    ap.add_argument("--patches-dir", type=Path,
                    help="directory holding <series>/series.json")
    ap.add_argument("--patches-dir-from-workspace", metavar="SUBDIR",
                    help="(bazel run) use $BUILD_WORKSPACE_DIRECTORY/SUBDIR as --patches-dir")
    ap.add_argument("--base-root", type=Path, help="the base tree (default: from --base-marker)")
    ap.add_argument("--base-marker", type=Path, help="the base's sglang/__init__.py (set by the Bazel target)")
    ap.add_argument("--base-layout", choices=LAYOUTS, default="package")
    ap.add_argument("--allow-input-symlinks", action="store_true",
                    help="accept base files that are symlinks (Bazel runfiles are)")
    ap.add_argument("--write", action="store_true", help="write the updated declaration (otherwise only print the change)")
    args = ap.parse_args(argv)
    patches_dir = args.patches_dir
    if patches_dir is None:
        workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
        if not workspace:
            ap.error("--patches-dir is required outside `bazel run`")
        patches_dir = Path(workspace) / (args.patches_dir_from_workspace or "patches")
    if args.base_root is not None:
        base_root = args.base_root
    elif args.base_marker is not None:
        base_root = args.base_marker.absolute().parent.parent
    else:
        ap.error("give --base-root or --base-marker")
    try:
        tree = SourceTree(base_root, args.base_layout, args.allow_input_symlinks)
        tree.check_root()
        decl, old, new = rehash(args.series, patches_dir, tree)
    except PatchChainError as e:
        print(f"rehash {args.series}: {e}", file=sys.stderr)
        return 1
    rel = f"patches/{args.series}/series.json"
    if old == new:
        print(f"{rel} is up to date")
        return 0
    sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel}"))
    if args.write:
        decl.path.write_text(new, encoding="utf-8")
        print(f"wrote {decl.path}")
    else:
        print(f"\n(not written; review the change above, then rerun with --write: bazel run //patches:rehash -- {args.series} --write)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
