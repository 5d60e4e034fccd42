"""shallow_layout.py: the layout of a pulled base, and the check of the files it must hold."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tools.oci import ocilayout, shallow_layout

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _pulled(tmp: Path, files: dict[str, bytes]) -> Path:
    """What pull.py leaves for a Docker-typed base (manifest, config, digest, files.json)."""
    config = b'{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}'
    manifest = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "config": {
        "mediaType": "application/vnd.docker.container.image.v1+json", "digest": "sha256:" + _sha(config),
        "size": len(config)}, "layers": []}).encode()
    (tmp / "manifest.json").write_bytes(manifest)
    (tmp / "config.json").write_bytes(config)
    (tmp / "digest").write_text("sha256:" + _sha(manifest) + "\n")
    (tmp / "files.json").write_text(json.dumps({"prefixes": ["site/sglang"],
                                                "files": {p: _sha(d) for p, d in files.items()}}))
    return tmp


def _expect(tmp: Path, files: dict[str, bytes]) -> Path:
    path = tmp / "expect.json"
    path.write_text(json.dumps({"what": "the patch series v9", "fix": "pin another base with `the fix`", "files": [
        {"path": "/" + p, "sha256": _sha(d), "note": f"series file python/{p[5:]}"} for p, d in files.items()]}))
    return path


def _run(tmp: Path, *extra: str) -> int:
    return shallow_layout.main(["--manifest", str(tmp / "manifest.json"), "--config", str(tmp / "config.json"),
                                "--digest", str(tmp / "digest"), "--out", str(tmp / "layout"), "--name", "reg/base",
                                *extra])


def test_a_base_holding_the_files_gives_a_layout_of_manifest_and_config(tmp_path: Path) -> None:
    files = {"site/sglang/a.py": b"a", "site/sglang/b/c.py": b"c"}
    pulled = _pulled(tmp_path, files)
    assert _run(pulled, "--files", str(pulled / "files.json"), "--expect", str(_expect(tmp_path, files))) == 0
    image = ocilayout.read_layout(pulled / "layout")
    assert image.manifest_digest == (pulled / "digest").read_text().strip() and image.ref_name == "base"
    index = json.loads((pulled / "layout/index.json").read_text())
    assert index["manifests"][0]["mediaType"] == DOCKER_MANIFEST  # named by its own type


def test_each_missing_or_different_file_is_named_with_both_hashes(tmp_path: Path, capsys) -> None:
    pulled = _pulled(tmp_path, {"site/sglang/a.py": b"edited"})
    expect = _expect(tmp_path, {"site/sglang/a.py": b"a", "site/sglang/gone.py": b"g", "site/other/x.py": b"x"})
    assert _run(pulled, "--files", str(pulled / "files.json"), "--expect", str(expect)) == 1
    err = capsys.readouterr().err
    assert "reg/base does not hold the files the patch series v9 expects:" in err
    assert (f"/site/sglang/a.py (series file python/sglang/a.py) has sha256 {_sha(b'edited')}, "
            f"the patch series v9 expects {_sha(b'a')}") in err
    assert f"/site/sglang/gone.py (series file python/sglang/gone.py) is missing; the patch series v9 expects sha256 {_sha(b'g')}" in err
    assert "/site/other/x.py (series file python/other/x.py) is outside the pull's scanned prefixes (site/sglang)" in err
    assert err.rstrip().endswith("pin another base with `the fix`")
    assert not (pulled / "layout").exists()


def test_bad_inputs_are_errors_naming_the_file(tmp_path: Path, capsys) -> None:
    pulled = _pulled(tmp_path, {})
    bad = tmp_path / "bad.json"
    bad.write_text('{"what": "w", "files": []}')
    assert _run(pulled, "--files", str(pulled / "files.json"), "--expect", str(bad)) == 1
    assert f"{bad}: missing key 'fix'" in capsys.readouterr().err
    (pulled / "digest").write_text("sha256:" + "0" * 64 + "\n")
    assert _run(pulled) == 1
    assert "does not hash to sha256:000" in capsys.readouterr().err
