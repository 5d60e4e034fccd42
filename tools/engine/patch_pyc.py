"""The bytecode of a patch chain's files, for the patch layer.

  patch_pyc.py --patched DIR --site /usr/lib/python3/dist-packages --out DIR

For every .py under DIR (a patch_chain's `patched`: sglang/...), OUT gets
sglang/.../__pycache__/<name>.cpython-311.pyc: unchecked-hash, compiled for the image path
<site>/sglang/... (tools/oci/python/pycompile.py's Compiler, with the python3 running this program).
A separate action from the layer's, keyed only on the patched files and `site`: an edit that
leaves the patched bytes alone (a patch's description, a declaration field) reuses these.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.oci import ocitar
from tools.oci.python import pycompile

# The tag of the interpreter the images run (Debian 12's python3.11); the layer's whiteouts
# for deleted files' bytecode use it too.
PYC_TAG = "cpython-311"


class PatchPycError(Exception):
    """The patched files cannot be compiled for the image."""


def build(patched: Path, site: str, out: Path) -> int:
    """Writes the .pyc of every .py under `patched` below `out`; returns how many."""
    site = ocitar.normalise_path(site)
    sources = sorted(p.relative_to(patched).as_posix() for p in patched.rglob("*.py") if p.is_file())
    compiler = pycompile.Compiler([sys.executable], workers=1)
    if compiler.cache_tag != PYC_TAG:
        raise PatchPycError(f"{sys.executable} writes {compiler.cache_tag} bytecode; the image runs {PYC_TAG}")
    for rel in sources:
        compiler.submit(f"/{site}/{rel}", (patched / rel).read_bytes())
    results = compiler.results()
    for rel in sources:
        pyc = results[f"/{site}/{rel}"]
        if pyc is None:
            # The stock .pyc of the base would then run instead of the patch.
            raise PatchPycError(f"{patched / rel} does not compile with {sys.executable}; the patch chain "
                                "checked that it compiles, so this interpreter differs from the chain's")
        dest = out / compiler.pyc_path(rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(pyc)
    return len(sources)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--patched", type=Path, required=True, help="PatchChainInfo.patched (holds sglang/...)")
    p.add_argument("--site", required=True, help="the directory holding sglang/ in the image")
    p.add_argument("--out", type=Path, required=True, help="receives sglang/.../__pycache__/*.pyc")
    args = p.parse_args(argv)
    try:
        build(args.patched, args.site, args.out)
    except (PatchPycError, ocitar.LayerError, pycompile.CompileError, OSError) as e:
        print(f"patch_pyc.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
