"""@host_tools//:versions.txt describes this host: every program the integration tests run, and the kernel."""

from __future__ import annotations

import os
import platform
from pathlib import Path

from tools.ci import host_tools


def test_the_file_is_what_the_probe_prints_now() -> None:
    written = Path(os.environ["HOST_TOOLS"]).read_text()
    assert written == host_tools.render(), "stale @host_tools: `bazel sync --configure` re-probes the host"


def test_every_tool_and_the_kernel_have_a_line() -> None:
    lines = Path(os.environ["HOST_TOOLS"]).read_text().splitlines()
    assert lines[0] == f"kernel {platform.release()}"
    assert [line.split()[0] for line in lines[1:]] == [t.name for t in host_tools.TOOLS]
    # The tests need podman and skopeo at least; an absent one is written, never skipped.
    for line in lines[1:]:
        name, rest = line.split(" ", 1)
        assert rest == "absent" or rest.startswith("/"), line
