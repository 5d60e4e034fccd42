"""Generator of //patches:<series>_declaration (generated_files): the rehashed declaration.

  declare.py SERIES --patches-dir DIR --base-marker FILE --out-dir OUT

Writes OUT/SERIES/series.json: the declaration as `//patches:rehash -- SERIES --write` would
leave it (the hashes recomputed from the patches and the base; everything else kept).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.patches.private.patchchain.errors import PatchChainError
from tools.patches.private.patchchain.layout import SourceTree
from tools.patches.private.patchchain.rehash_main import rehash


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("series")
    ap.add_argument("--patches-dir", type=Path, required=True)
    ap.add_argument("--base-marker", type=Path, required=True, help="the base's sglang/__init__.py")
    ap.add_argument("--out-dir", type=Path, required=True)
    args = ap.parse_args(argv)
    try:
        # The sandbox links every input, so symlinked base files are expected here.
        tree = SourceTree(args.base_marker.absolute().parent.parent, "package", True)
        tree.check_root()
        _, _, new = rehash(args.series, args.patches_dir, tree)
    except PatchChainError as e:
        print(f"rehash {args.series}: {e}", file=sys.stderr)
        return 1
    out = args.out_dir / args.series / "series.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
