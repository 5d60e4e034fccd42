"""oci_fetch against a scripted registry: token auth, index selection, refusing wrong bytes."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from pathlib import Path

import pytest

from tools.release import oci_fetch


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


CONFIG = json.dumps({"rootfs": {"type": "layers", "diff_ids": ["sha256:" + "d" * 64]},
                     "history": [{"created_by": "base layer"}]}).encode()
MANIFEST = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                       "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                                  "digest": _digest(CONFIG), "size": len(CONFIG)},
                       "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                                   "digest": "sha256:" + "e" * 64, "size": 123}]}).encode()
INDEX = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [
    {"mediaType": "application/vnd.docker.distribution.manifest.v2+json", "digest": "sha256:" + "a" * 64,
     "size": 1, "platform": {"os": "linux", "architecture": "arm64"}},
    {"mediaType": "application/vnd.docker.distribution.manifest.v2+json", "digest": _digest(MANIFEST),
     "size": len(MANIFEST), "platform": {"os": "linux", "architecture": "amd64"}},
]}).encode()


class _Handler(http.server.BaseHTTPRequestHandler):
    blobs: dict[str, bytes] = {}
    tamper: set[str] = set()

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        if self.path.startswith("/token"):
            return self._send(200, json.dumps({"token": "t0k"}).encode())
        if self.headers.get("Authorization") != "Bearer t0k":
            self.send_response(401)
            host = self.headers["Host"]
            self.send_header("WWW-Authenticate", f'Bearer realm="http://{host}/token",service="test"')
            self.end_headers()
            return
        digest = self.path.rsplit("/", 1)[-1]
        if digest not in self.blobs:
            return self._send(404, b"{}")
        data = self.blobs[digest]
        self._send(200, data + b" " if digest in self.tamper else data)

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server():
    _Handler.blobs = {_digest(d): d for d in (CONFIG, MANIFEST, INDEX)}
    _Handler.tamper = set()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_index_pin_resolves_the_platform_manifest(server: str, tmp_path: Path) -> None:
    pin = oci_fetch.fetch(server, "lmsysorg/sglang", _digest(INDEX), "linux/amd64", tmp_path)
    assert pin["manifest_digest"] == _digest(MANIFEST) and pin["pinned_digest"] == _digest(INDEX)
    assert (tmp_path / "digest").read_text() == _digest(MANIFEST) + "\n"
    assert (tmp_path / "manifest.json").read_bytes() == MANIFEST  # byte for byte
    descriptor = json.loads((tmp_path / "layers/000.json").read_text())
    assert descriptor == {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": "sha256:" + "e" * 64,
                          "size": 123, "diff_id": "sha256:" + "d" * 64, "created_by": "base layer"}
    blobs = sorted(p.name for p in (tmp_path / "layout/blobs/sha256").iterdir())
    assert blobs == sorted([_digest(MANIFEST)[7:], _digest(CONFIG)[7:]])


def test_tampered_manifest_is_refused(server: str, tmp_path: Path) -> None:
    _Handler.tamper = {_digest(MANIFEST)}
    with pytest.raises(oci_fetch.FetchError, match="not the pinned"):
        oci_fetch.fetch(server, "x/y", _digest(MANIFEST), "linux/amd64", tmp_path)


def test_tampered_config_is_refused(server: str, tmp_path: Path) -> None:
    _Handler.tamper = {_digest(CONFIG)}
    with pytest.raises(oci_fetch.FetchError, match="not the pinned"):
        oci_fetch.fetch(server, "x/y", _digest(MANIFEST), "linux/amd64", tmp_path)


def test_missing_platform_and_bad_pin(server: str, tmp_path: Path) -> None:
    with pytest.raises(oci_fetch.FetchError, match="without a linux/s390x manifest"):
        oci_fetch.fetch(server, "x/y", _digest(INDEX), "linux/s390x", tmp_path)
    with pytest.raises(oci_fetch.FetchError, match="pin bases by digest"):
        oci_fetch.fetch(server, "x/y", "latest", "linux/amd64", tmp_path)


def test_docker_hub_names() -> None:
    registry = oci_fetch.Registry("docker.io", "ubuntu")
    assert registry.api_host == "registry-1.docker.io" and registry.repo_path == "library/ubuntu"
    assert registry.scheme == "https" and oci_fetch.Registry("127.0.0.1:5000", "x").scheme == "http"
