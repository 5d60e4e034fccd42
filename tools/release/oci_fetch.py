"""Shallow pull: fetch only an image's manifest and config from a registry, verified by sha256.

Run by the `oci_pull` repository rule (tools/release/pull.bzl) and by its end-to-end test. The
output directory holds what tools/oci needs to build on the image without its layer blobs
(rules_img's "shallow base"):

  layout/                 OCI layout: oci-layout, index.json, manifest and config blobs only
  digest                  'sha256:<hex>\\n' of the platform manifest the image builds on
  manifest.json, config.json
  layers/NNN.json         one descriptor per layer {mediaType, digest, size, diff_id, created_by}
  contents.json           {image, digest, layers: [{descriptor, contents}]} (tools/oci format)
  pin.json                registry, repository, the pinned digest, the platform manifest digest
  files.json              with --scan-prefix: {path: sha256} of every regular file under the
                          prefix in the image's merged filesystem (whiteouts applied); the
                          layers are streamed once for it, verified by digest, and not kept

The pinned digest may name a multi-platform index; the manifest for --platform is then taken
from it (and verified by its own digest). Docker media types of layers are mapped to their OCI
equivalents in the descriptors (same bytes); the manifest blob itself is kept byte for byte.

Registry protocol: GET /v2/<repo>/manifests/<digest> with an Accept list; on 401 a Bearer
token is requested from the WWW-Authenticate realm (anonymous, or with credentials from a
docker/podman auth file: $REGISTRY_AUTH_FILE, $DOCKER_CONFIG/config.json,
~/.docker/config.json). Plain http only for 127.0.0.1 / localhost.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import sys
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.oci.mediatypes import oci_layer_type  # noqa: E402

MANIFEST_TYPES = [
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
]
INDEX_TYPES = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
]
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
_DOCKER_HUB = {"docker.io": "registry-1.docker.io", "index.docker.io": "registry-1.docker.io"}


class FetchError(Exception):
    """The registry did not give the pinned, verifiable content."""


def canonical_json(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class Registry:
    host: str  # as written in the pin, e.g. docker.io or 127.0.0.1:5000
    repository: str
    auth_file: Path | None = None
    token: str | None = None

    @property
    def api_host(self) -> str:
        return _DOCKER_HUB.get(self.host, self.host)

    @property
    def repo_path(self) -> str:
        # Docker Hub's official images live under library/.
        if self.host in _DOCKER_HUB and "/" not in self.repository:
            return "library/" + self.repository
        return self.repository

    @property
    def scheme(self) -> str:
        hostname = self.host.split("]")[0] + "]" if self.host.startswith("[") else self.host.split(":")[0]
        return "http" if hostname in LOOPBACK else "https"

    def _credentials(self) -> str | None:
        candidates = []
        if os.environ.get("REGISTRY_AUTH_FILE"):
            candidates.append(Path(os.environ["REGISTRY_AUTH_FILE"]))
        if self.auth_file:
            candidates.append(self.auth_file)
        if os.environ.get("DOCKER_CONFIG"):
            candidates.append(Path(os.environ["DOCKER_CONFIG"]) / "config.json")
        candidates.append(Path.home() / ".docker" / "config.json")
        keys = {self.host, self.api_host, f"https://{self.api_host}", "https://index.docker.io/v1/"}
        for path in candidates:
            try:
                auths = json.loads(path.read_text()).get("auths", {})
            except (OSError, ValueError):
                continue
            for key in keys:
                if key in auths and auths[key].get("auth"):
                    return auths[key]["auth"]
        return None

    def _fetch_token(self, challenge: str) -> None:
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.pop("realm", None)
        if not challenge.lower().startswith("bearer") or not realm:
            raise FetchError(f"{self.host}: unsupported auth challenge {challenge!r}")
        params.setdefault("scope", f"repository:{self.repo_path}:pull")
        request = urllib.request.Request(realm + "?" + urllib.parse.urlencode(params))
        basic = self._credentials()
        if basic:
            request.add_header("Authorization", "Basic " + basic)
        try:
            with urllib.request.urlopen(request, timeout=60) as resp:
                body = json.load(resp)
        except urllib.error.URLError as err:
            raise FetchError(f"{realm}: token request failed ({err}); check network access and credentials") from None
        self.token = body.get("token") or body.get("access_token")
        if not self.token:
            raise FetchError(f"{realm}: no token in the answer")

    def get(self, kind: str, digest: str, accept: list[str]) -> tuple[bytes, str]:
        """GET /v2/<repo>/<kind>/<digest>; returns (bytes, content type), verified by digest."""
        url = f"{self.scheme}://{self.api_host}/v2/{self.repo_path}/{kind}/{digest}"
        for attempt in range(2):
            request = urllib.request.Request(url, headers={"Accept": ", ".join(accept)})
            if self.token:
                request.add_header("Authorization", f"Bearer {self.token}")
            try:
                with urllib.request.urlopen(request, timeout=120) as resp:
                    data, ctype = resp.read(), resp.headers.get("Content-Type", "")
                break
            except urllib.error.HTTPError as err:
                if err.code == 401 and attempt == 0:
                    self._fetch_token(err.headers.get("WWW-Authenticate", ""))
                    continue
                raise FetchError(f"GET {url}: HTTP {err.code} {err.reason}") from None
            except urllib.error.URLError as err:
                raise FetchError(f"GET {url}: {err.reason}; is the registry reachable?") from None
        actual = _sha(data)
        if actual != digest:
            raise FetchError(f"GET {url}: content hashes to {actual}, not the pinned {digest}; refusing it")
        return data, ctype.split(";")[0].strip()


class _HashingReader:
    """A file object over a response that hashes what is read (tarfile reads it as a stream)."""

    def __init__(self, resp) -> None:
        self.resp, self.sha = resp, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.resp.read(size)
        self.sha.update(data)
        return data

    def drain(self) -> str:
        while self.read(1 << 20):
            pass
        return "sha256:" + self.sha.hexdigest()


def scan_files(registry: Registry, manifest: dict, prefix: str) -> dict[str, str]:
    """{path: sha256} of the regular files under `prefix` in the image's merged filesystem."""
    files: dict[str, str] = {}
    prefix = prefix.strip("/") + "/"
    for layer in manifest["layers"]:
        media = oci_layer_type(layer["mediaType"])
        if media.endswith("+zstd"):
            raise FetchError(f"layer {layer['digest']} is zstd-compressed; this scanner reads tar and tar+gzip")
        url = f"{registry.scheme}://{registry.api_host}/v2/{registry.repo_path}/blobs/{layer['digest']}"
        request = urllib.request.Request(url)
        if registry.token:
            request.add_header("Authorization", f"Bearer {registry.token}")
        try:
            resp = urllib.request.urlopen(request, timeout=600)
        except urllib.error.HTTPError as err:
            raise FetchError(f"GET {url}: HTTP {err.code} {err.reason}") from None
        with resp:
            reader = _HashingReader(resp)
            with tarfile.open(fileobj=reader, mode="r|gz" if media.endswith("+gzip") else "r|") as tar:
                for member in tar:
                    name = member.name.lstrip("./")
                    head, _, base = name.rpartition("/")
                    if base == ".wh..wh..opq":  # opaque directory: lower layers' entries go
                        for path in [p for p in files if p.startswith(head + "/")]:
                            del files[path]
                    elif base.startswith(".wh."):
                        gone = f"{head}/{base[4:]}" if head else base[4:]
                        for path in [p for p in files if p == gone or p.startswith(gone + "/")]:
                            del files[path]
                    elif name.startswith(prefix):
                        files.pop(name, None)
                        if member.isfile():
                            files[name] = hashlib.sha256(tar.extractfile(member).read()).hexdigest()
            actual = reader.drain()
        if actual != layer["digest"]:
            raise FetchError(f"GET {url}: content hashes to {actual}, not {layer['digest']}; refusing it")
    return files


def _platform_manifest(registry: Registry, pinned: str, platform: str) -> tuple[bytes, str]:
    data, ctype = registry.get("manifests", pinned, MANIFEST_TYPES + INDEX_TYPES)
    doc = json.loads(data)
    media = doc.get("mediaType") or ctype
    if media not in INDEX_TYPES and "manifests" not in doc:
        return data, pinned
    os_name, _, arch = platform.partition("/")
    for entry in doc.get("manifests", []):
        plat = entry.get("platform") or {}
        if plat.get("os") == os_name and plat.get("architecture") == arch:
            digest = entry["digest"]
            manifest, _ = registry.get("manifests", digest, MANIFEST_TYPES)
            return manifest, digest
    raise FetchError(f"{pinned} is an index without a {platform} manifest")


def fetch(host: str, repository: str, pinned: str, platform: str, out: Path, auth_file: Path | None = None,
          scan_prefix: str | None = None) -> dict:
    if not DIGEST_RE.match(pinned):
        raise FetchError(f"digest {pinned!r} is not sha256:<64 lowercase hex>; pin bases by digest")
    registry = Registry(host, repository, auth_file)
    manifest_bytes, manifest_digest = _platform_manifest(registry, pinned, platform)
    manifest = json.loads(manifest_bytes)
    if manifest.get("schemaVersion") != 2 or "config" not in manifest:
        raise FetchError(f"{manifest_digest}: not a schema-2 image manifest")
    config_bytes, _ = registry.get("blobs", manifest["config"]["digest"], ["application/json", "*/*"])
    config = json.loads(config_bytes)
    diff_ids = config.get("rootfs", {}).get("diff_ids", [])
    if len(diff_ids) != len(manifest["layers"]):
        raise FetchError(f"{manifest_digest}: {len(manifest['layers'])} layers but {len(diff_ids)} diff_ids in the config")

    blobs = out / "layout" / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    (blobs / manifest_digest.split(":")[1]).write_bytes(manifest_bytes)
    (blobs / manifest["config"]["digest"].split(":")[1]).write_bytes(config_bytes)
    (out / "layout" / "oci-layout").write_bytes(canonical_json({"imageLayoutVersion": "1.0.0"}))
    media = manifest.get("mediaType") or MANIFEST_TYPES[0]
    (out / "layout" / "index.json").write_bytes(canonical_json({
        "schemaVersion": 2,
        "manifests": [{"mediaType": media, "digest": manifest_digest, "size": len(manifest_bytes),
                       "annotations": {"org.opencontainers.image.ref.name": "base"}}],
    }))
    (out / "manifest.json").write_bytes(manifest_bytes)
    (out / "config.json").write_bytes(config_bytes)
    (out / "digest").write_text(manifest_digest + "\n")
    history = [h for h in config.get("history", []) if not h.get("empty_layer")]
    layers_dir = out / "layers"
    layers_dir.mkdir(exist_ok=True)
    contents_layers = []
    for i, (layer, diff_id) in enumerate(zip(manifest["layers"], diff_ids)):
        descriptor = {
            "mediaType": oci_layer_type(layer["mediaType"]),
            "digest": layer["digest"],
            "size": layer["size"],
            "diff_id": diff_id,
            "created_by": (history[i].get("created_by", "") if i < len(history) else "")[:200],
        }
        (layers_dir / f"{i:03d}.json").write_text(json.dumps(descriptor, sort_keys=True) + "\n")
        contents_layers.append({"descriptor": descriptor, "contents": {"kind": "shallow-base-layer"}})
    name = f"{host}/{repository}"
    (out / "contents.json").write_bytes(canonical_json({"image": name, "digest": manifest_digest, "layers": contents_layers}))
    pin = {"registry": host, "repository": repository, "pinned_digest": pinned,
           "manifest_digest": manifest_digest, "platform": platform, "layers": len(contents_layers)}
    (out / "pin.json").write_text(json.dumps(pin, indent=2, sort_keys=True) + "\n")
    if scan_prefix is not None:
        files = scan_files(registry, manifest, scan_prefix)
        (out / "files.json").write_text(json.dumps(files, indent=1, sort_keys=True) + "\n")
    return pin


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--registry", required=True, help="e.g. docker.io, 127.0.0.1:5000")
    parser.add_argument("--repository", required=True, help="e.g. lmsysorg/sglang")
    parser.add_argument("--digest", required=True, help="the pinned sha256:<hex> (manifest or index)")
    parser.add_argument("--platform", default="linux/amd64")
    parser.add_argument("--auth-file", type=Path, help="docker/podman auth file with credentials")
    parser.add_argument("--scan-prefix", help="also record the sha256 of every file under this image path (files.json)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        pin = fetch(args.registry, args.repository, args.digest, args.platform, args.out, args.auth_file,
                    args.scan_prefix)
    except (FetchError, KeyError, ValueError, tarfile.TarError) as err:
        print(f"oci_fetch: error: {args.registry}/{args.repository}@{args.digest}: {err}", file=sys.stderr)
        return 1
    kept = "layers streamed once for files.json, not kept" if args.scan_prefix else "blobs not fetched"
    print(f"oci_fetch: {args.registry}/{args.repository}@{pin['manifest_digest']} ({pin['layers']} layers, {kept})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
