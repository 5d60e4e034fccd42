"""tools/ci/full_tier reads the tier tag from tools/ci/defs.bzl with sed; Starlark reads it by load.

Both must give the same tag, or .ci/run would run a different set of tests than the BUILD files
put in the full tier.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

RUNFILES = Path(os.environ.get("TEST_SRCDIR", ".")) / os.environ.get("TEST_WORKSPACE", "")


def test_the_script_reads_the_tag_starlark_loads():
    done = subprocess.run([str(RUNFILES / "tools" / "ci" / "full_tier"), "--print-tag"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == os.environ["FULL_TIER_TAG"]
