"""The remote execution platform's container image is the CPU base the release records name."""

import json
from pathlib import Path

from pins import table

ROOT = Path(__file__).resolve().parent.parent.parent


def test_rbe_image_digest_is_the_recorded_cpu_base() -> None:
    pin = table.load().get("rbe_image", "tools/remote/BUILD.bazel")
    assert pin.resolved, f"pin rbe_image is unresolved: {pin.resolve_command}"
    records = sorted((ROOT / "recipes" / "releases").glob("*.json"))
    assert records, "no release records"
    cpu_bases = {json.loads(r.read_text())["base"]["digest"] for r in records
                 if json.loads(r.read_text())["base"].get("flavor", "cpu-test") == "cpu-test"}
    assert cpu_bases == {pin.digest}, (
        f"pins/repository_locations.bzl pins rbe_image at {pin.digest} but the release records "
        f"name the CPU base {sorted(cpu_bases)}: rebuild, push the CPU base and resolve the row "
        f"(`{pin.resolve_command}`)"
    )
