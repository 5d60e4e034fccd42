"""Debian packages: lock format, version order, drift resolution, .deb unpacking, the layer's lock checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.oci import debian, debroot, sandbox_check
from tools.oci.debian import RELOCK, Archive, DebianError, Drift, Lock, Pin
from tools.oci.tests.debfixture import build_deb, packages_index

SHA = "a" * 64
ARCHIVES = (Archive("debian", ("bookworm", "bookworm-updates"), ("https://deb.example/debian", "http://m2.example/debian")),
            Archive("debian-security", ("bookworm-security",), ("https://deb.example/debian-security",)))


def lock(*pins: Pin, drift=()) -> Lock:
    return Lock(("python3.11-minimal",), ("dpkg",), ARCHIVES, tuple(pins), tuple(drift))


def pin(name: str, version: str, sha: str = SHA, archive: str = "debian") -> Pin:
    return Pin(name, version, sha, archive, f"pool/main/{name[0]}/{name}/{name}_{version}_amd64.deb")


def test_lock_round_trip_and_urls() -> None:
    original = lock(pin("libc6", "2.36-9+deb12u14"), pin("libssl3", "3.0.22-1~deb12u2", "b" * 64, "debian-security"),
                    drift=[Drift("libc6", "2.36-9+deb12u13", "2.36-9+deb12u14")])
    text = original.render()
    assert "# roots: python3.11-minimal" in text and RELOCK in text
    assert Lock.parse(text, "debian.lock") == original
    assert original.urls(original.pins[1]) == [
        "https://deb.example/debian-security/pool/main/l/libssl3/libssl3_3.0.22-1~deb12u2_amd64.deb"]
    assert original.urls(original.pins[0])[1].startswith("http://m2.example/debian/pool/main/")


@pytest.mark.parametrize("text, match", [
    ("# roots: a\nlibc6 2.36 " + SHA + "\n", r"debian.lock:2: expected `name version sha256 archive pool/...deb`"),
    ("# roots: a\nlibc6 2.36 " + SHA + " nosuch pool/x.deb\n", r"no `# archive: nosuch"),
    ("# roots: a\n# archive: debian bookworm\n", r"debian.lock:2: expected `NAME SUITE"),
])
def test_malformed_lock_names_the_line_and_the_fix(text: str, match: str) -> None:
    with pytest.raises(DebianError, match=match):
        Lock.parse(text, "debian.lock")


@pytest.mark.parametrize("a, b", [
    ("1.0", "1.1"), ("1.0~rc1", "1.0"), ("2.36-9+deb12u9", "2.36-9+deb12u14"), ("1:1.0", "2:0.1"),
    ("9.9", "1:0.1"), ("3.0.22-1~deb12u1", "3.0.22-1~deb12u2"), ("1.0-1", "1.0-1+b1"), ("1.0a", "1.0b"),
    ("1.0", "1.0+"), ("1.0", "1.0-0.1"), ("10.0.0", "10.0.0.1"), ("1.2.3", "1.10"),
])
def test_debian_version_order(a: str, b: str) -> None:
    assert debian.compare_versions(a, b) < 0 < debian.compare_versions(b, a)
    assert debian.compare_versions(a, a) == 0


def test_resolve_takes_the_newest_version_from_every_archive(tmp_path: Path) -> None:
    main = tmp_path / "main.xz"
    main.write_bytes(packages_index([("libc6", "2.36-9+deb12u15", "c" * 64, "pool/main/g/glibc/libc6_15.deb", "libnew (>= 1)"),
                                     ("zlib1g", "1:1.2.13.dfsg-1", SHA, "pool/main/z/zlib/z.deb", "")]))
    sec = tmp_path / "sec.xz"
    sec.write_bytes(packages_index([("libc6", "2.36-9+deb12u7", "d" * 64, "pool/updates/main/g/glibc/libc6_7.deb", "")]))
    old = lock(pin("libc6", "2.36-9+deb12u14"), pin("zlib1g", "1:1.2.13.dfsg-1"))
    resolved, notes = debian.resolve(old, {"libc6"}, {"debian": [main], "debian-security": [sec]})
    assert resolved.drift == (Drift("libc6", "2.36-9+deb12u14", "2.36-9+deb12u15"),)
    assert Pin("libc6", "2.36-9+deb12u15", "c" * 64, "debian", "pool/main/g/glibc/libc6_15.deb") in resolved.pins
    assert pin("zlib1g", "1:1.2.13.dfsg-1") in resolved.pins
    assert notes == ["libc6 2.36-9+deb12u15 depends on libnew, which the lock does not hold"]


def test_resolve_program_refuses_a_package_gone_from_every_index(tmp_path: Path, capsys) -> None:
    (tmp_path / "lock").write_text(lock(pin("libc6", "2.36-9+deb12u14")).render())
    (tmp_path / "main.xz").write_bytes(packages_index([]))
    rc = debian.main(["resolve", "--lock", str(tmp_path / "lock"), "--lock-name", "recipes/bases/debian.lock",
                      "--missing", "libc6", "--index", f"debian={tmp_path / 'main.xz'}", "--out", str(tmp_path / "out")])
    assert rc == 1
    assert "libc6=2.36-9+deb12u14: on no mirror and in no Packages index" in capsys.readouterr().err


def test_plan_lists_every_mirror_and_index(tmp_path: Path, capsys) -> None:
    (tmp_path / "lock").write_text(lock(pin("libc6", "2.36-9+deb12u14")).render())
    assert debian.main(["plan", "--lock", str(tmp_path / "lock"), "--lock-name", "l"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["debs"][0]["file"] == SHA + ".deb" and len(plan["debs"][0]["urls"]) == 2
    assert [i["file"] for i in plan["indexes"]] == ["indexes/debian/bookworm/Packages.xz",
                                                    "indexes/debian/bookworm-updates/Packages.xz",
                                                    "indexes/debian-security/bookworm-security/Packages.xz"]


def test_unpack_is_dpkg_deb_x(tmp_path: Path) -> None:
    deb = tmp_path / "a.deb"
    build_deb(deb, "a", "1", {"usr": None, "usr/bin": None, "usr/bin/tool.sh": b"#!x\n", "usr/lib/liba.so.1": b"elf",
                              "usr/lib/liba.so": ("link", "liba.so.1"), "usr/lib/copy": ("hard", "./usr/lib/liba.so.1")})
    build_deb(tmp_path / "b.deb", "b", "1", {"usr/lib/liba.so.1": b"newer"})
    root = tmp_path / "root"
    root.mkdir()
    d = debian.Deb.open(deb)
    assert d.control.startswith(b"Package: a\nVersion: 1\n") and d.md5sums
    debian.unpack(d, root)
    debian.unpack(debian.Deb.open(tmp_path / "b.deb"), root)  # a later package overwrites, like dpkg-deb -x
    assert (root / "usr/bin/tool.sh").stat().st_mode & 0o111
    assert (root / "usr/lib/liba.so").readlink() == Path("liba.so.1")
    assert (root / "usr/lib/liba.so.1").read_bytes() == b"newer" and (root / "usr/lib/copy").read_bytes() == b"elf"


def test_unpack_refuses_zstd_and_escapes(tmp_path: Path) -> None:
    build_deb(tmp_path / "z.deb", "z", "1", {"x": b"1"}, data_member="data.tar.zst")
    with pytest.raises(DebianError, match="zstd-compressed"):
        debian.Deb.open(tmp_path / "z.deb")
    build_deb(tmp_path / "e.deb", "e", "1", {"lib": ("link", "/usr/lib"), "lib/x": b"1"})
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(DebianError, match="below the symlink /lib"):
        debian.unpack(debian.Deb.open(tmp_path / "e.deb"), root)


def _runtime_debs(tmp_path: Path) -> list[Pin]:
    files = {"usr/bin/python3.11": b"", "usr/lib/python3.11/m.py": b"X = 1\n",
             "usr/share/ca-certificates/mozilla/A.crt": b"-----A-----"}
    sha = build_deb(tmp_path / "debs/py.deb", "python3.11-minimal", "3.11.2-6", files)
    (tmp_path / "debs/py.deb").rename(tmp_path / f"debs/{sha}.deb")
    return [Pin("python3.11-minimal", "3.11.2-6", sha, "debian", "pool/main/p/py.deb")]


def _build(tmp_path: Path, the_lock: Lock, mode: str) -> int:
    (tmp_path / "resolved.lock").write_text(the_lock.render())
    return debroot.main(["build", "--root-pkg", "python3.11-minimal", "--exclude", "dpkg", "--mode", mode,
                         "--lock", str(tmp_path / "resolved.lock"),
                         *[f"--deb={p}" for p in sorted((tmp_path / "debs").glob("*.deb"))],
                         "--out", str(tmp_path / "l.tar"), "--out-descriptor", str(tmp_path / "d.json"),
                         "--out-manifest", str(tmp_path / "m.json")])


def test_layer_records_drift_in_soft_mode_and_refuses_it_in_strict(tmp_path: Path, capsys) -> None:
    pins = _runtime_debs(tmp_path)
    drifted = Lock(("python3.11-minimal",), ("dpkg",), ARCHIVES, tuple(pins),
                   (Drift("python3.11-minimal", "3.11.2-5", "3.11.2-6"),), "recipes/bases/debian.lock")
    assert _build(tmp_path, drifted, "soft") == 0
    manifest = json.loads((tmp_path / "m.json").read_text())
    assert manifest["lock_current"] is False and manifest["lock"] == "recipes/bases/debian.lock"
    assert manifest["drift"] == [{"name": "python3.11-minimal", "locked": "3.11.2-5", "used": "3.11.2-6"}]
    assert _build(tmp_path, drifted, "strict") == 1
    err = capsys.readouterr().err
    assert "recipes/bases/debian.lock is stale" in err and "python3.11-minimal=3.11.2-5" in err and RELOCK in err
    current = Lock(drifted.roots, drifted.exclude, ARCHIVES, tuple(pins), (), drifted.source)
    assert _build(tmp_path, current, "strict") == 0
    assert json.loads((tmp_path / "m.json").read_text())["lock_current"] is True


def test_layer_refuses_a_deb_with_another_sha256_and_changed_roots(tmp_path: Path, capsys) -> None:
    pins = _runtime_debs(tmp_path)
    wrong = Pin(pins[0].name, pins[0].version, "f" * 64, "debian", pins[0].path)
    assert _build(tmp_path, lock(wrong), "soft") == 1
    assert "no " + "f" * 64 + ".deb" in capsys.readouterr().err
    other_roots = Lock(("tzdata",), ("dpkg",), ARCHIVES, tuple(pins))
    assert _build(tmp_path, other_roots, "soft") == 1
    assert "other roots/exclusions" in capsys.readouterr().err


def _aquery(*actions: tuple[str, list[str]]) -> dict:
    return {"targets": [{"id": i, "label": f"//x:t{i}"} for i in range(len(actions))],
            "actions": [{"targetId": i, "mnemonic": m, "executionInfo": [{"key": k} for k in keys]}
                        for i, (m, keys) in enumerate(actions)]}


def test_sandbox_check_refuses_unsandboxed_build_actions_and_unexplained_local_tests() -> None:
    ok = _aquery(("DebianRootfs", []), ("PythonWheelsLayer", ["no-remote-exec"]),
                 ("TestRunner", ["local", "no-sandbox", "requires-podman"]))
    assert sandbox_check.violations(ok) == []
    bad = _aquery(("DebianRootfs", ["no-sandbox", "requires-network"]), ("TestRunner", ["local"]))
    assert sandbox_check.violations(bad) == [
        "//x:t0 (DebianRootfs): build action with no-sandbox, requires-network; declare its inputs and let it run sandboxed",
        "//x:t1 (TestRunner): test with local but no requires-<reason> tag saying why",
    ]
