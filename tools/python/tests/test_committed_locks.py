"""The committed locks are complete, hash-pinned, and agree with the pins of their .in files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

# //third_party/python:lock_files, in the runfiles (the test runs at their root).
HERE = Path("third_party/python")
LOCKS = ("tools", "sglang_cpu", "sglang_cpu_0_5_23")
CPU_LOCKS = ("sglang_cpu", "sglang_cpu_0_5_23")
ENTRY = re.compile(r"^# url: (?P<url>\S+)\n(?P<name>[a-z0-9][a-z0-9._-]*)==(?P<version>\S+) --hash=sha256:(?P<sha>[0-9a-f]{64})$", re.M)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _entries(lock: str) -> dict[str, re.Match]:
    text = (HERE / f"{lock}.lock").read_text()
    found = {_norm(m["name"]): m for m in ENTRY.finditer(text)}
    requirement_lines = [l for l in text.splitlines() if l and not l.startswith("#")]
    assert len(requirement_lines) == len(found), f"{lock}.lock has lines without url/hash: {requirement_lines}"
    return found


@pytest.mark.parametrize("lock", LOCKS)
def test_every_entry_is_one_wheel_with_url_and_sha256(lock: str) -> None:
    entries = _entries(lock)
    assert entries, f"{lock}.lock is empty"
    for name, match in entries.items():
        assert match["url"].endswith(".whl"), f"{lock}.lock: {name} is not a wheel: {match['url']}"


@pytest.mark.parametrize("lock", LOCKS)
def test_in_file_pins_are_what_the_lock_holds(lock: str) -> None:
    entries = _entries(lock)
    for in_file in (HERE / f"{lock}.in", HERE / f"{lock}.nodeps.in"):
        if not in_file.exists():
            continue
        for line in in_file.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            name, _, version = line.partition("==")
            key = _norm(name)
            assert key in entries, f"{in_file.name}: {name} missing from {lock}.lock; rerun the lock"
            if version:
                assert entries[key]["version"] == version, (
                    f"{in_file.name} pins {name}=={version} but {lock}.lock has {entries[key]['version']}; "
                    f"run `./tools/bazel run //tools/python:lock -- {lock} --upgrade-package {key}`"
                )


@pytest.mark.parametrize("lock", CPU_LOCKS)
def test_sglang_cpu_has_no_cuda_packages(lock: str) -> None:
    cuda = [n for n in _entries(lock) if n.startswith(("nvidia-", "cuda-", "flashinfer", "sgl-kernel", "sglang-kernel"))]
    assert not cuda, f"{lock}.lock must stay CPU-only, found {cuda}"
    assert _entries(lock)["torch"]["version"].endswith("+cpu")


def test_a_torch_that_departs_from_sglang_s_pin_says_so_in_the_header() -> None:
    # sglang 0.5.23 pins torch==2.14.1; only 2.13.0+cpu can be had here.
    text = (HERE / "sglang_cpu_0_5_23.lock").read_text()
    header = text[: text.index("# url: ")]
    assert "torch is 2.13.0+cpu although sglang 0.5.23 pins torch==2.14.1" in header


@pytest.mark.parametrize("lock", LOCKS)
def test_urls_are_public_and_mirrors_hold_the_same_file(lock: str) -> None:
    """The first url of every wheel is a public index; a local file only ever follows as a mirror."""
    for name, match in _entries(lock).items():
        assert match["url"].startswith("https://"), (
            f"{lock}.lock: {name} points at {match['url']}, not a public index: add `# lock-index: {name} "
            f"<index URL>` to {lock}.in and run `./tools/bazel run //tools/python:lock -- {lock}`"
        )
    mirrors: list[str] = []
    for line in (HERE / f"{lock}.lock").read_text().splitlines():
        if line.startswith("# mirror: "):
            mirrors.append(line[len("# mirror: "):])
        elif line.startswith("# url: "):
            basename = line.rsplit("/", 1)[1]
            assert all(m.rsplit("/", 1)[1] == basename for m in mirrors), f"{lock}.lock: mirrors {mirrors} of {line}"
            mirrors = []
