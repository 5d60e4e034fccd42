"""Each candidate's pinned wheel (pins/repository_locations.bzl) is the one its CPU base's lock installs."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

ENTRY = re.compile(r"^# url: (?P<url>\S+)\nsglang==(?P<version>\S+) --hash=sha256:(?P<sha>[0-9a-f]{64})$", re.M)


def _lock_path(label: str) -> Path:
    # //third_party/python:sglang_cpu_0_5_23.lock -> third_party/python/sglang_cpu_0_5_23.lock (runfiles)
    package, _, name = label.removeprefix("//").partition(":")
    return Path(package) / name


def test_candidate_rows_agree_with_their_cpu_base_locks() -> None:
    config = json.loads(Path(os.environ["BUMP_CHECK_CONFIG"]).read_text())
    checked = 0
    for version, row in config["candidates"].items():
        assert row["wheel"] == row["url"].rsplit("/", 1)[1], f"candidate {version!r}: wheel is not the URL's file"
        assert row["wheel"].startswith(f"sglang-{version}-"), f"candidate {version!r}: wheel of another version"
        if not row.get("cpu_lock"):
            continue
        lock = _lock_path(row["cpu_lock"])
        m = ENTRY.search(lock.read_text())
        assert m, f"{lock}: no sglang entry"
        assert (m["version"], m["url"], m["sha"]) == (version, row["url"], row["sha256"]), (
            f"pins/repository_locations.bzl sglang_src_{version.replace('.', '_')} and {lock} disagree on the sglang wheel: "
            f"fix the row or relock with `./tools/bazel run //tools/python:lock -- {lock.stem}`"
        )
        checked += 1
    assert checked, "no candidate names a CPU lock"
