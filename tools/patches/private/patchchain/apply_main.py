"""Verifies a patch series against a base tree and writes the patched files and PROVENANCE.

Used by the patch_chain Bazel rule (one action) and usable by hand, e.g. against a git checkout:

  python3 -m patchchain.apply_main --patches-dir patches --series v3 \
      --base-root ~/src/sglang --base-layout git --out-dir /tmp/v3 \
      --provenance-json /tmp/v3.json --provenance-text /tmp/v3.txt

or against an installed package (--base-root .../site-packages --base-layout package), or against
the wheel itself (--base-wheel, see wheel.py; what the rule passes).
Exit status 1 with a message naming the patch, hunk, file, hashes and fix on any bad input;
nothing is written then.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .chain import apply_chain, read_patch_files
from .declaration import DECLARATION_NAME, load_chain
from .errors import DeclarationError, PatchChainError, Where
from .layout import LAYOUTS, SourceTree
from .output import write_outputs
from .packages import read_packages
from .wheel import WheelTree, check_wheel


def _same(a: Path, b: Path) -> bool:
    return os.path.normpath(a) == os.path.normpath(b)


def check_inputs(chain, declarations: list[Path], patch_files: list[Path]) -> None:
    """With Bazel: the declarations and .diff files the rule passed are exactly the chain's."""
    wanted = [d.path for d in chain.series]
    for d in declarations:
        if not any(_same(d, w) for w in wanted):
            raise DeclarationError(
                f"{d} was given to the action but is not in the chain {' -> '.join(s.name for s in chain.series)}",
                Where(file=str(d), fix="make the patch_series `extends` attribute in BUILD.bazel match `extends` in series.json"),
            )
    for w in wanted:
        if not any(_same(d, w) for d in declarations):
            raise DeclarationError(
                f"{w} is in the chain but was not given to the action",
                Where(file=str(w), fix="make the patch_series `extends` attribute in BUILD.bazel match `extends` in series.json"),
            )
    declared = [p.path for p in chain.patches]
    for f in patch_files:
        if not any(_same(f, p) for p in declared):
            raise DeclarationError(
                f"{f} sits in a series directory but no series.json declares it",
                Where(file=str(f), fix=f"add an entry for it to {Path(f).parent / DECLARATION_NAME} "
                      f"and run `bazel run //patches:rehash -- {Path(f).parent.name}`, or delete the file"),
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--patches-dir", type=Path, required=True, help="directory holding <series>/series.json")
    ap.add_argument("--series", required=True, help="the series to apply (its parents come first)")
    base = ap.add_mutually_exclusive_group(required=True)
    base.add_argument("--base-root", type=Path, help="the tree the patches apply to")
    base.add_argument("--base-wheel", type=Path,
                      help="the wheel the root series declares, read in place (layout package); its sha256 is checked")
    ap.add_argument("--base-layout", choices=LAYOUTS, default="package",
                    help="package: the root holds sglang/ (wheel, site-packages); git: it holds python/sglang/")
    ap.add_argument("--allow-input-symlinks", action="store_true",
                    help="accept base files that are symlinks (Bazel stages inputs so); directory symlinks stay refused")
    ap.add_argument("--out-dir", type=Path, help="receives only the touched files (package-relative sglang/...)")
    ap.add_argument("--provenance-json", type=Path)
    ap.add_argument("--provenance-text", type=Path)
    ap.add_argument("--declaration-out", type=Path, help="the resolved declaration (parents included) as JSON")
    ap.add_argument("--expect-declaration", type=Path, action="append", default=[],
                    help="(Bazel) a declaration the rule passed; all must belong to the chain")
    ap.add_argument("--expect-patch", type=Path, action="append", default=[],
                    help="(Bazel) a patch file the rule passed; each must be declared")
    ap.add_argument("--package-file", action="append", default=[], metavar="NAME/PATH=FILE",
                    help="a file of a package the series ships (series.json `packages`), written to NAME/PATH")
    ap.add_argument("--check", action="store_true", help="verify only; write nothing")
    ap.add_argument("--quiet", action="store_true", help="print nothing on success (Bazel actions)")
    args = ap.parse_args(argv)
    if args.base_wheel and args.base_layout != "package":
        ap.error("a wheel holds sglang/ at its root: --base-wheel takes --base-layout package")
    if not args.check and not (args.out_dir and args.provenance_json and args.provenance_text):
        ap.error("--out-dir, --provenance-json and --provenance-text are required unless --check")
    try:
        chain = load_chain(args.patches_dir, args.series)
        if args.expect_declaration or args.expect_patch:
            check_inputs(chain, args.expect_declaration, args.expect_patch)
        patch_bytes = read_patch_files(chain)
        if args.base_wheel:
            check_wheel(args.base_wheel, chain.base)
            tree = WheelTree(args.base_wheel)
        else:
            tree = SourceTree(args.base_root, args.base_layout, args.allow_input_symlinks)
        tree.check_root()
        result = apply_chain(chain, tree, patch_bytes)
        packages = read_packages(chain, args.package_file)
        if not args.check:
            write_outputs(result, args.out_dir, args.provenance_json, args.provenance_text, args.declaration_out,
                          packages=packages)
    except PatchChainError as e:
        print(f"patch chain {args.series}: {e}", file=sys.stderr)
        return 1
    if args.quiet:
        return 0
    written = 0 if args.check else sum(1 for v in result.final.values() if v is not None)
    print(f"patch chain {chain.name}: verified and applied {len(chain.patches)} patches "
          f"({' -> '.join(d.name for d in chain.series)}) across {len(result.final)} files; {written} written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
