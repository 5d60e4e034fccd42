"""Debian lock handling: lock format, and the soft/strict reaction when versions left the archive."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.oci import debroot
from tools.oci.debian import RELOCK, DebianError, Lock, Pin

SHA = "a" * 64
ROOTS = ["python3.11-minimal"]


def lock(*pins: Pin, roots=ROOTS, exclude=("dpkg",)) -> Lock:
    return Lock(tuple(roots), tuple(exclude), tuple(pins))


def test_lock_round_trip() -> None:
    original = lock(Pin("libc6", "2.36-9+deb12u14", SHA), Pin("zlib1g", "1:1.2.13.dfsg-1", "b" * 64))
    text = original.render()
    assert "# roots: python3.11-minimal" in text and RELOCK in text
    assert Lock.parse(text, "debian.lock") == original


def test_malformed_lock_line_names_the_line_and_the_fix() -> None:
    with pytest.raises(DebianError, match=r"debian.lock:4: .*run `\./tools/bazel run //recipes/bases:lock`"):
        Lock.parse("# x\n# roots: a\n# exclude:\nlibc6 2.36\n", "debian.lock")


class FakeApt:
    """Indexes that hold `available` (name -> version); `private()` = after apt-get update."""

    def __init__(self, available: dict[str, str], lists_dir: Path = Path("/var/lib/apt/lists")) -> None:
        self.available = available
        self.lists_dir = lists_dir
        self.updates = 0

    def private(self) -> "FakeApt":
        self.updates += 1
        return FakeApt(self.available, Path("/cache/apt/lists"))

    def resolve(self, roots: list[str]) -> list[Pin]:
        return sorted(Pin(n, v) for n, v in self.available.items())


def fake_fetch(apt: FakeApt, cache, pins: list[Pin]):
    found, missing = {}, []
    for p in pins:
        if apt.available.get(p.name) == p.version:
            found[Pin(p.name, p.version, p.sha256 or SHA)] = Path(f"/debs/{p.name}.deb")
        else:
            missing.append(p)
    return found, missing


@pytest.fixture(autouse=True)
def _fetch(monkeypatch):
    monkeypatch.setattr(debroot, "fetch", fake_fetch)


def test_current_lock_is_used_without_drift(capsys) -> None:
    apt = FakeApt({"libc6": "2.36-9+deb12u14"})
    found, drift = debroot.gather(lock(Pin("libc6", "2.36-9+deb12u14", SHA)), ROOTS, ["dpkg"], "soft", apt, None, "debian.lock")
    assert [p.version for p in found] == ["2.36-9+deb12u14"] and drift == []
    assert capsys.readouterr().err == ""


def test_soft_mode_warns_once_and_uses_current_versions(capsys) -> None:
    apt = FakeApt({"libc6": "2.36-9+deb12u15", "zlib1g": "1:1.2.13.dfsg-1"})
    old = lock(Pin("libc6", "2.36-9+deb12u14", SHA), Pin("zlib1g", "1:1.2.13.dfsg-1", SHA))
    found, drift = debroot.gather(old, ROOTS, ["dpkg"], "soft", apt, None, "recipes/bases/debian.lock")
    assert sorted(p.version for p in found) == ["1:1.2.13.dfsg-1", "2.36-9+deb12u15"]
    assert drift == [{"name": "libc6", "locked": "2.36-9+deb12u14", "used": "2.36-9+deb12u15"}]
    err = capsys.readouterr().err
    assert err.count("WARNING") == 1
    assert "libc6 2.36-9+deb12u14 -> 2.36-9+deb12u15" in err and RELOCK in err and "zlib1g" not in err


def test_strict_mode_refuses_a_stale_lock() -> None:
    apt = FakeApt({"libc6": "2.36-9+deb12u15"})
    with pytest.raises(DebianError, match=r"stale .*libc6=2.36-9\+deb12u14.*" + RELOCK.replace(".", r"\.")):
        debroot.gather(lock(Pin("libc6", "2.36-9+deb12u14", SHA)), ROOTS, ["dpkg"], "strict", apt, None, "debian.lock")


def test_changed_roots_count_as_a_stale_lock() -> None:
    apt = FakeApt({"libc6": "2.36-9+deb12u14"})
    current = lock(Pin("libc6", "2.36-9+deb12u14", SHA))
    with pytest.raises(DebianError, match="other roots"):
        debroot.gather(current, ROOTS + ["tzdata"], ["dpkg"], "strict", apt, None, "debian.lock")


def test_missing_pin_refreshes_the_indexes_before_giving_up(capsys) -> None:
    apt = FakeApt({"libc6": "2.36-9+deb12u14"})
    debroot.gather(lock(Pin("libc6", "2.36-9+deb12u99", SHA)), ROOTS, ["dpkg"], "soft", apt, None, "debian.lock")
    assert apt.updates == 1
