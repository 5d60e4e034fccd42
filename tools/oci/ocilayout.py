"""OCI image config, manifest, index and image-layout directories, as canonical JSON.

Canonical JSON = sorted keys, no whitespace, UTF-8: the same content always gives the same
bytes and therefore the same digest. `created` is fixed to the epoch.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"
MANIFEST_TYPES = (MEDIA_MANIFEST, "application/vnd.docker.distribution.manifest.v2+json")
EPOCH = "1970-01-01T00:00:00Z"
REF_NAME = "org.opencontainers.image.ref.name"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class LayoutError(Exception):
    """An OCI document or layout is malformed or inconsistent."""


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def check_digest(value: str, where: str) -> str:
    algo, _, hexpart = value.partition(":")
    if algo != "sha256" or len(hexpart) != 64 or any(c not in "0123456789abcdef" for c in hexpart):
        raise LayoutError(f"{where}: {value!r} is not a sha256:<64 lowercase hex> digest")
    return value


@dataclass(frozen=True)
class LayerDescriptor:
    """A layer as the manifest and config name it; `diff_id` is the uncompressed tar's digest."""

    media_type: str
    digest: str
    size: int
    diff_id: str
    created_by: str = ""

    def manifest_entry(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}

    def to_json(self) -> dict[str, Any]:
        return {
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": self.size,
            "diff_id": self.diff_id,
            "created_by": self.created_by,
        }

    @staticmethod
    def from_json(obj: dict[str, Any], where: str) -> "LayerDescriptor":
        try:
            return LayerDescriptor(
                media_type=obj["mediaType"],
                digest=check_digest(obj["digest"], where),
                size=int(obj["size"]),
                diff_id=check_digest(obj["diff_id"], where),
                created_by=obj.get("created_by", ""),
            )
        except KeyError as e:
            raise LayoutError(f"{where}: layer descriptor lacks {e}") from None

    @staticmethod
    def load(path: Path) -> "LayerDescriptor":
        return LayerDescriptor.from_json(json.loads(Path(path).read_text()), str(path))


def env_list_to_dict(env: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in env:
        key, _, value = item.partition("=")
        out[key] = value
    return out


def expand_env(value: str, current: dict[str, str]) -> str:
    """Expands $KEY / ${KEY} against the inherited environment (like rules_oci's env)."""
    out = []
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == "$" and i + 1 < len(value):
            if value[i + 1] == "{":
                end = value.find("}", i + 2)
                if end > 0:
                    out.append(current.get(value[i + 2:end], ""))
                    i = end + 1
                    continue
            j = i + 1
            while j < len(value) and (value[j].isalnum() or value[j] == "_"):
                j += 1
            if j > i + 1:
                out.append(current.get(value[i + 1:j], ""))
                i = j
                continue
        out.append(ch)
        i += 1
    return "".join(out)


@dataclass
class ConfigChanges:
    """What an image changes relative to its base (None = inherit)."""

    env: dict[str, str]
    labels: dict[str, str]
    entrypoint: list[str] | None = None
    cmd: list[str] | None = None
    user: str | None = None
    workdir: str | None = None
    exposed_ports: list[str] | None = None


def scratch_config() -> dict[str, Any]:
    return {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": ["PATH=" + DEFAULT_PATH]},
        "rootfs": {"type": "layers", "diff_ids": []},
        "history": [],
    }


def derive_config(base: dict[str, Any] | None, layers: list[LayerDescriptor], changes: ConfigChanges) -> dict[str, Any]:
    """The config of base + layers + changes. Base values not changed are kept verbatim."""
    cfg = json.loads(json.dumps(base)) if base is not None else scratch_config()
    cfg["created"] = EPOCH
    inner = cfg.setdefault("config", {})
    env = env_list_to_dict(inner.get("Env") or [])
    for key, value in changes.env.items():
        env[key] = expand_env(value, env)
    if env:
        inner["Env"] = [f"{k}={v}" for k, v in env.items()]
    if changes.labels:
        labels = dict(inner.get("Labels") or {})
        labels.update(changes.labels)
        inner["Labels"] = labels
    if changes.entrypoint is not None:
        inner["Entrypoint"] = changes.entrypoint
    if changes.cmd is not None:
        inner["Cmd"] = changes.cmd
    if changes.user is not None:
        inner["User"] = changes.user
    if changes.workdir is not None:
        inner["WorkingDir"] = changes.workdir
    if changes.exposed_ports:
        ports = dict(inner.get("ExposedPorts") or {})
        ports.update({p: {} for p in changes.exposed_ports})
        inner["ExposedPorts"] = ports
    rootfs = cfg.setdefault("rootfs", {"type": "layers", "diff_ids": []})
    rootfs.setdefault("diff_ids", [])
    history = cfg.setdefault("history", [])
    for layer in layers:
        rootfs["diff_ids"].append(layer.diff_id)
        history.append({"created": EPOCH, "created_by": layer.created_by or "tools/oci"})
    return cfg


def make_manifest(config_bytes: bytes, base_manifest: dict[str, Any] | None, layers: list[LayerDescriptor],
                  annotations: dict[str, str] | None = None) -> dict[str, Any]:
    base_layers = list(base_manifest.get("layers", [])) if base_manifest else []
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": sha256_digest(config_bytes), "size": len(config_bytes)},
        "layers": base_layers + [layer.manifest_entry() for layer in layers],
    }
    if annotations:
        manifest["annotations"] = dict(annotations)
    return manifest


def make_index(manifest_bytes: bytes, ref_name: str) -> dict[str, Any]:
    # A pulled base may be Docker-typed (tools/oci/shallow_layout.py): name it by its own type.
    media_type = json.loads(manifest_bytes).get("mediaType") or MEDIA_MANIFEST
    return {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [{
            "mediaType": media_type,
            "digest": sha256_digest(manifest_bytes),
            "size": len(manifest_bytes),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {REF_NAME: ref_name},
        }],
    }


def blob_path(layout: Path, digest: str) -> Path:
    return layout / "blobs" / "sha256" / digest.split(":", 1)[1]


def write_layout(out: Path, manifest_bytes: bytes, config_bytes: bytes, ref_name: str,
                 blobs: dict[str, Path] | None = None) -> str:
    """Writes oci-layout, index.json, the manifest and config blobs, plus `blobs` (digest->file).

    Layer blobs not passed are left out: the image-layout spec lets referenced blobs be missing
    and "fulfilled by an external blob store" (here: the Bazel outputs of the layer targets).
    Returns the manifest digest.
    """
    (out / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (out / "oci-layout").write_bytes(canonical_json({"imageLayoutVersion": "1.0.0"}))
    blob_path(out, sha256_digest(config_bytes)).write_bytes(config_bytes)
    blob_path(out, sha256_digest(manifest_bytes)).write_bytes(manifest_bytes)
    for digest, src in sorted((blobs or {}).items()):
        shutil.copyfile(src, blob_path(out, digest))
    (out / "index.json").write_bytes(canonical_json(make_index(manifest_bytes, ref_name)))
    return sha256_digest(manifest_bytes)


@dataclass(frozen=True)
class LayoutImage:
    """The single image of a layout directory."""

    layout: Path
    manifest_digest: str
    manifest: dict[str, Any]
    config: dict[str, Any]
    ref_name: str


def read_layout(layout: Path) -> LayoutImage:
    layout = Path(layout)
    try:
        index = json.loads((layout / "index.json").read_text())
    except FileNotFoundError:
        raise LayoutError(f"{layout}: no index.json; is this an OCI image layout directory?") from None
    manifests = index.get("manifests") or []
    if len(manifests) != 1:
        raise LayoutError(f"{layout}/index.json: expected exactly one manifest, found {len(manifests)}")
    desc = manifests[0]
    digest = check_digest(desc.get("digest", ""), f"{layout}/index.json")
    raw = blob_path(layout, digest).read_bytes()
    if sha256_digest(raw) != digest:
        raise LayoutError(f"{layout}: manifest blob {digest} does not hash to its name; rebuild the image")
    manifest = json.loads(raw)
    cfg_digest = check_digest(manifest["config"]["digest"], f"{layout} manifest config")
    cfg_raw = blob_path(layout, cfg_digest).read_bytes()
    if sha256_digest(cfg_raw) != cfg_digest:
        raise LayoutError(f"{layout}: config blob {cfg_digest} does not hash to its name; rebuild the image")
    ref = (desc.get("annotations") or {}).get(REF_NAME, "")
    return LayoutImage(layout, digest, manifest, json.loads(cfg_raw), ref)


def link_or_copy(src: Path, dst: Path, mode: str) -> None:
    """Puts `src` at `dst` by 'copy', 'hardlink' (falls back to copy across devices) or 'symlink'."""
    if mode == "symlink":
        os.symlink(os.path.realpath(src), dst)
    elif mode == "hardlink":
        try:
            os.link(os.path.realpath(src), dst)
        except OSError:
            shutil.copyfile(src, dst)
    elif mode == "copy":
        shutil.copyfile(src, dst)
    else:
        raise LayoutError(f"unknown materialise mode {mode!r}: use copy, hardlink or symlink")
