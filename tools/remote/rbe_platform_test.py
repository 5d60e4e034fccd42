"""The remote execution platform's container image is the execution image this graph builds."""

import os
from pathlib import Path

from pins import table


def test_rbe_image_digest_is_the_built_exec_image() -> None:
    pin = table.load().get("rbe_image", "tools/remote/BUILD.bazel")
    assert pin.resolved, "pin rbe_image is unresolved: write the digest //tools/remote:exec_image builds"
    built = Path(os.environ["EXEC_IMAGE_DIGEST"]).read_text().strip()
    assert pin.digest == built, (
        f"pins/repository_locations.bzl pins rbe_image at {pin.digest} but //tools/remote:exec_image "
        f"builds {built}: write the built digest (bazel-bin/tools/remote/exec_image.digest) and the time"
        f" into the row's digest and provenance.resolved_at"
    )
