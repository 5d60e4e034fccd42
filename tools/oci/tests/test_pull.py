"""pull.py (the oci_pull repository rule's program) against the test registry (Debian's
docker-registry on 127.0.0.1, tools/oci/testing/local_registry.py): index selection, refusing
bytes that do not hash to the pin, credentials from an auth file, and the file scan with
whiteouts on gzip layers."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from tools.oci import layerwalk, pull
from tools.oci.registry import RegistryError
from tools.oci.testing.local_registry import LocalRegistry
from tools.podman.tests.host_image import layer_of, whiteout, write_layout, write_tree

SITE = "usr/lib/python3/dist-packages"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _image(tmp: Path, name: str, files: dict[str, str], extra=()) -> Path:
    layout = tmp / name
    write_layout(layout, [layer_of(write_tree(tmp / f"{name}.root", files), list(extra))])
    return layout


def _multi_platform(tmp: Path) -> tuple[Path, str, str]:
    """An OCI layout whose one entry is an index of a linux/amd64 and a linux/arm64 image."""
    out = tmp / "multi"
    entries = []
    for arch in ("arm64", "amd64"):
        single = _image(tmp, arch, {"etc/arch": arch})
        for blob in (single / "blobs/sha256").iterdir():
            (out / "blobs/sha256").mkdir(parents=True, exist_ok=True)
            (out / "blobs/sha256" / blob.name).write_bytes(blob.read_bytes())
        entry = json.loads((single / "index.json").read_text())["manifests"][0]
        entry.pop("annotations")
        entries.append({**entry, "platform": {"os": "linux", "architecture": arch}})
    index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                        "manifests": entries}).encode()
    (out / "blobs/sha256" / _sha(index)).write_bytes(index)
    (out / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (out / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.index.v1+json", "digest": "sha256:" + _sha(index),
        "size": len(index), "annotations": {"org.opencontainers.image.ref.name": "multi"}}]}))
    return out, "sha256:" + _sha(index), entries[1]["digest"]


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    with LocalRegistry(tmp_path_factory.mktemp("registry")) as reg:
        yield reg


def test_index_pin_resolves_the_platform_manifest(registry: LocalRegistry, tmp_path: Path, capsys) -> None:
    layout, index_digest, amd64 = _multi_platform(tmp_path)
    assert registry.seed(f"oci:{layout}:multi", "lmsysorg/sglang", "multi", "--all", "--preserve-digests") == index_digest
    out = tmp_path / "out"
    status = pull.main(["--repository", f"{registry.address}/lmsysorg/sglang", "--digest", index_digest, "--out", str(out)])
    assert status == 0, capsys.readouterr().err
    assert (out / "digest").read_text() == amd64 + "\n"
    manifest = (out / "manifest.json").read_bytes()
    assert "sha256:" + _sha(manifest) == amd64  # byte for byte
    config = json.loads((out / "config.json").read_text())
    assert "sha256:" + _sha((out / "config.json").read_bytes()) == json.loads(manifest)["config"]["digest"]
    descriptor = json.loads((out / "layers/000.json").read_text())
    assert descriptor["digest"] == json.loads(manifest)["layers"][0]["digest"]
    assert descriptor["diff_id"] == config["rootfs"]["diff_ids"][0]
    pin = json.loads((out / "pin.json").read_text())
    assert pin["pinned_digest"] == index_digest and pin["manifest_digest"] == amd64
    # Nothing else: no layer blob, no scan, no skopeo policy left behind.
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "contents.json", "digest", "layers", "manifest.json", "pin.json"]

    with pytest.raises(pull.PullError, match=r"without a linux/s390x manifest \(it has: linux/amd64, linux/arm64\)"):
        pull.fetch(registry.skopeo, registry.repository("lmsysorg/sglang"), index_digest, "linux/s390x", tmp_path / "s390x")


def test_a_pin_that_is_not_a_digest_or_not_there_fails(registry: LocalRegistry, tmp_path: Path) -> None:
    repo = registry.repository("lmsysorg/sglang")
    with pytest.raises(pull.PullError, match="pin bases by digest"):
        pull.fetch(registry.skopeo, repo, "latest", "linux/amd64", tmp_path / "a")
    with pytest.raises(RegistryError, match="manifest unknown"):
        pull.fetch(registry.skopeo, repo, "sha256:" + "0" * 64, "linux/amd64", tmp_path / "b")


def test_bytes_that_do_not_hash_to_the_pin_are_refused(tmp_path: Path) -> None:
    # A registry of its own: its storage is altered to play a registry serving wrong bytes.
    with LocalRegistry(tmp_path / "bad") as registry:
        digest = registry.seed(f"oci:{_image(tmp_path, 'img', {'f': 'x'})}", "x/y", "1", "--preserve-digests")
        repo = registry.repository("x/y")
        manifest = registry.blob_file(digest)
        good = manifest.read_bytes()
        manifest.write_bytes(good.replace(b'"schemaVersion":2', b'"schemaVersion": 2'))
        with pytest.raises(pull.PullError, match=f"hash to sha256:[0-9a-f]{{64}}, not the pinned {digest}"):
            pull.fetch(registry.skopeo, repo, digest, "linux/amd64", tmp_path / "m")
        manifest.write_bytes(good)
        config = registry.blob_file(json.loads(good)["config"]["digest"])
        config.write_bytes(config.read_bytes().replace(b'"os":"linux"', b'"os":"linux" '))
        with pytest.raises((pull.PullError, RegistryError), match="does not match|not the pinned"):
            pull.fetch(registry.skopeo, repo, digest, "linux/amd64", tmp_path / "c")


def test_credentials_come_from_the_auth_file(tmp_path: Path, monkeypatch, capsys) -> None:
    with LocalRegistry(tmp_path / "auth", users={"puller": "s3cret"}) as registry:
        digest = registry.seed(f"oci:{_image(tmp_path, 'img', {'f': 'x'})}", "private/base", "1", "--preserve-digests")
        args = ["--repository", f"{registry.address}/private/base", "--digest", digest]
        monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
        monkeypatch.delenv("DOCKER_CONFIG", raising=False)
        monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
        monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no default auth file either
        assert pull.main([*args, "--out", str(tmp_path / "anonymous")]) == 1
        assert "authentication required" in capsys.readouterr().err
        # The variables the oci_pull rule passes through (its `environ`).
        monkeypatch.setenv("REGISTRY_AUTH_FILE", str(registry.auth_file))
        assert pull.main([*args, "--out", str(tmp_path / "registry-auth-file")]) == 0
        monkeypatch.delenv("REGISTRY_AUTH_FILE")
        docker_config = tmp_path / "docker-config"
        docker_config.mkdir()
        (docker_config / "config.json").write_bytes(registry.auth_file.read_bytes())
        monkeypatch.setenv("DOCKER_CONFIG", str(docker_config))
        assert pull.main([*args, "--out", str(tmp_path / "docker-config-out")]) == 0
        assert "s3cret" not in capsys.readouterr().out


def _opaque(directory: str) -> tarfile.TarInfo:
    return whiteout(f"{directory}/.wh..wh..opq")


def test_scan_hashes_the_merged_files_of_gzip_layers(registry: LocalRegistry, tmp_path: Path) -> None:
    lower = layer_of(write_tree(tmp_path / "l1", {
        f"{SITE}/sglang/a.py": "a1", f"{SITE}/sglang/b.py": "b1", f"{SITE}/sglang/c/d.py": "d1", "etc/x": "x"}))
    upper = layer_of(write_tree(tmp_path / "l2", {f"{SITE}/sglang/a.py": "a2", f"{SITE}/sglang/c/e.py": "e2"}),
                     [whiteout(f"{SITE}/sglang/.wh.b.py"), _opaque(f"{SITE}/sglang/c")])
    layout = tmp_path / "two"
    write_layout(layout, [lower, upper])
    # --format v2s2: a Docker schema-2 manifest with gzip layers, as registries hold most bases.
    digest = registry.seed(f"oci:{layout}", "base/scan", "1", "--format", "v2s2")
    out = tmp_path / "out"
    pull.fetch(registry.skopeo, registry.repository("base/scan"), digest, "linux/amd64", out, scan=[f"/{SITE}/sglang/"])
    layers = [json.loads(p.read_text()) for p in sorted((out / "layers").iterdir())]
    assert {d["mediaType"] for d in layers} == {"application/vnd.oci.image.layer.v1.tar+gzip"}
    scanned = json.loads((out / "files.json").read_text())
    assert scanned == {"prefixes": [f"{SITE}/sglang"], "files": {
        f"{SITE}/sglang/a.py": _sha(b"a2"),  # the upper layer's copy
        f"{SITE}/sglang/c/e.py": _sha(b"e2"),  # the opaque c/ keeps only the upper layer's entries
    }}
    assert not (out / ".pull-blobs").exists()  # the scratch copy of the layers is deleted

    # A stored layer that no longer hashes to its digest is refused.
    gz = json.loads((out / "manifest.json").read_text())["layers"][1]["digest"]
    blob = registry.blob_file(gz)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    with pytest.raises(RegistryError, match="Digest did not match"):
        pull.fetch(registry.skopeo, registry.repository("base/scan"), digest, "linux/amd64", tmp_path / "bad", scan=[SITE])
    assert not (tmp_path / "bad" / ".pull-blobs").exists()


def _tar(*entries: tuple[str, bytes | None]) -> tarfile.TarFile:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return tarfile.open(fileobj=buf, mode="r|")


def _view(files: dict[str, str]) -> layerwalk.MergedView[str]:
    view: layerwalk.MergedView[str] = layerwalk.MergedView()
    for path, sha in files.items():
        view.apply([layerwalk.Change("entry", path, tarfile.TarInfo(path))], lambda _c, sha=sha: sha)
    return view


def test_whiteouts_apply_to_lower_layers_only_whatever_their_order() -> None:
    view = _view({"p/old.py": _sha(b"old"), "p/gone.py": _sha(b"gone")})
    # The opaque marker after the same layer's new file: the new file stays, the lower ones go.
    pull.apply_layer(view, _tar(("p", None), ("p/new.py", b"new"), ("p/.wh..wh..opq", b"")), ["p"], "l2")
    assert view.paths == {"p/new.py": _sha(b"new")}
    # A file replacing a directory removes what was below it.
    view = _view({"p/d/x.py": _sha(b"x")})
    pull.apply_layer(view, _tar(("p/d", b"now a file")), ["p"], "l2")
    assert view.paths == {"p/d": _sha(b"now a file")}


def test_root_whiteouts_dotted_names_and_replaced_files() -> None:
    """The cases the shallow pull's own whiteout reader got wrong (it stripped every leading
    '.' and '/' from member names, and only knew opaque markers below the root)."""
    lower = {"etc/x": _sha(b"x"), "p.py": _sha(b"p"), ".hidden": _sha(b"h"), "d": _sha(b"file")}
    view = _view(lower)
    # An opaque marker at the root hides every lower path.
    pull.apply_layer(view, _tar(("./.wh..wh..opq", b""), ("./new", b"n")), ["etc", "p.py", ".hidden", "new"], "l2")
    assert view.paths == {"new": _sha(b"n")}
    view = _view(lower)
    # `./.wh.p.py` deletes p.py (not a file named "wh.p.py"); `./.hidden` keeps its dot.
    pull.apply_layer(view, _tar(("./.wh.p.py", b""), ("./.hidden", b"h2")), ["etc", "p.py", ".hidden"], "l2")
    assert view.paths == {"etc/x": _sha(b"x"), ".hidden": _sha(b"h2"), "d": _sha(b"file")}
    view = _view(lower)
    # A directory replacing a lower file: the file is gone.
    pull.apply_layer(view, _tar(("d", None), ("d/y", b"y")), ["d"], "l2")
    assert view.paths == {"etc/x": _sha(b"x"), "p.py": _sha(b"p"), ".hidden": _sha(b"h"), "d/y": _sha(b"y")}


def test_hard_links_take_their_targets_hash_under_the_prefixes_only() -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = b"shared"
        info = tarfile.TarInfo("p/a.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for name in ("p/b.py", "q/c.py"):
            link = tarfile.TarInfo(name)
            link.type, link.linkname = tarfile.LNKTYPE, "./p/a.py"
            tar.addfile(link)
    buf.seek(0)
    view = _view({})
    pull.apply_layer(view, tarfile.open(fileobj=buf, mode="r|"), ["p"], "l1")
    assert view.paths == {"p/a.py": _sha(b"shared"), "p/b.py": _sha(b"shared")}


def test_entries_escaping_the_root_are_refused() -> None:
    with pytest.raises(layerwalk.LayerPathError, match="escapes the root"):
        pull.apply_layer(_view({}), _tar(("p/../../etc/passwd", b"x")), ["p"], "l1")
