"""The remote execution platform's container image is the CPU base the release records name."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def test_rbe_image_digest_is_the_recorded_cpu_base() -> None:
    build = (ROOT / "tools" / "remote" / "BUILD.bazel").read_text()
    pinned = re.search(r'^RBE_IMAGE_DIGEST = "(sha256:[0-9a-f]{64})"$', build, re.M)
    assert pinned, "tools/remote/BUILD.bazel: RBE_IMAGE_DIGEST must be a sha256 digest"
    records = sorted((ROOT / "recipes" / "releases").glob("*.json"))
    assert records, "no release records"
    bases = {json.loads(r.read_text())["base"]["digest"] for r in records}
    assert bases == {pinned.group(1)}, (
        f"tools/remote/BUILD.bazel pins {pinned.group(1)} but the release records name {sorted(bases)}: "
        "set RBE_IMAGE_DIGEST to the CPU base digest the records hold"
    )
