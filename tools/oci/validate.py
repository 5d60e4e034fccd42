"""Checks an image against the OCI image spec with `oci-image-tool validate` (Debian's package).

The image's layout is thin (base layer blobs are separate Bazel outputs), so a symlink view
of the full layout is made in a scratch directory first; oci-image-tool then reads index,
manifest, config and every layer blob of that view, checks them against the spec's schemas
and checks each blob's size and digest.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.oci.materialize import materialize
from tools.oci.ocilayout import LayoutError, parse_blob_args, read_layout

TOOL = "oci-image-tool"


def validate(layout: Path, ref: str) -> subprocess.CompletedProcess:
    """Runs oci-image-tool on a full layout; returns the finished process (output captured)."""
    if shutil.which(TOOL) is None:
        raise LayoutError(f"{TOOL} is not installed (tools/bazel installs Debian's oci-image-tool)")
    return subprocess.run(
        [TOOL, "validate", "--type", "image", "--ref", f"name={ref}", str(layout)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--image", type=Path, required=True, help="the image's (thin) layout directory")
    p.add_argument("--blob", action="append", default=[], metavar="DESCRIPTOR=BLOB",
                   help="a layer descriptor JSON and its blob file (every layer not in the layout)")
    p.add_argument("--digest-file", type=Path, help="the image's .digest file; the view must have this digest")
    args = p.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="oci-validate.", dir=os.environ.get("TEST_TMPDIR")))
    try:
        view = scratch / "view"
        digest = materialize(args.image, parse_blob_args(args.blob), view, "symlink")
        if args.digest_file and args.digest_file.read_text().strip() != digest:
            raise LayoutError(f"{args.image} has manifest {digest}, but {args.digest_file} says "
                              f"{args.digest_file.read_text().strip()}; rebuild the image")
        done = validate(view, read_layout(view).ref_name)
    except (LayoutError, OSError) as e:
        print(f"validate.py: error: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(done.stdout, end="")
    if done.returncode != 0 or "Validation succeeded" not in done.stdout:
        print(f"FAIL: {TOOL} rejects {args.image} ({digest}), rc {done.returncode}")
        return 1
    print(f"PASS: {args.image} ({digest}) conforms to the OCI image spec ({TOOL})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
