"""The OCI core: digests, descriptors, canonical JSON, config/manifest/index, layout read/write.

Canonical JSON = sorted keys, no whitespace, UTF-8 (non-ASCII kept as is): the same content
always gives the same bytes and therefore the same digest. `created` is fixed to the epoch.
Every tool of the project that writes or reads OCI documents uses this module (import
`tools.oci.ocilayout`, Bazel `//tools/oci:ocilayout_lib`).

Layouts written by tools/oci hold the manifest, the config and the embedded layers; the other
layer blobs are "fulfilled by an external blob store" (the layer targets' outputs) and are
passed to readers as `DESCRIPTOR=BLOB` pairs (`parse_blob_args`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.oci import reference

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


def write_canonical(path: Path, obj: Any) -> None:
    """`path` gets canonical_json(obj) plus a newline (the project's JSON side files)."""
    Path(path).write_bytes(canonical_json(obj) + b"\n")


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def parse_pairs(items: list[str], what: str) -> dict[str, str]:
    """KEY=VALUE command-line items (--env, --label, ...) -> dict; `what` names the flag."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise LayoutError(f"--{what} {item!r}: expected KEY=VALUE")
        out[key] = value
    return out


def check_digest(value: object, where: str) -> str:
    """reference.check_digest (the one digest grammar), failing as the LayoutError layout tools report."""
    try:
        return reference.check_digest(value, where)
    except reference.ReferenceError as err:
        raise LayoutError(str(err)) from None


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

    @staticmethod
    def uncompressed(digest: str, size: int, created_by: str) -> "LayerDescriptor":
        """An uncompressed tar layer: its digest is its diff_id."""
        return LayerDescriptor(MEDIA_LAYER, digest, size, digest, created_by)

    def write(self, path: Path) -> None:
        write_canonical(path, self.to_json())


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
class Layer:
    """A manifest layer and where its blob is."""

    digest: str  # sha256:<hex> of the blob as stored (== diff_id for uncompressed layers)
    media_type: str
    size: int
    path: Path | None  # blob file (in the layout or given as DESCRIPTOR=BLOB); None: not here (shallow)


@dataclass(frozen=True)
class Image:
    """The single image of a layout directory; manifest and config blobs checked against their digests."""

    layout: Path
    manifest_digest: str
    manifest_bytes: bytes
    manifest: dict[str, Any]
    config_digest: str
    config: dict[str, Any]
    ref_name: str
    layers: list[Layer] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return env_list_to_dict(self.config.get("config", {}).get("Env") or [])

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.config.get("config", {}).get("Labels") or {})

    @property
    def working_dir(self) -> str:
        return self.config.get("config", {}).get("WorkingDir") or "/"

    @property
    def diff_ids(self) -> list[str]:
        return list(self.config.get("rootfs", {}).get("diff_ids") or [])

    def missing_layers(self) -> list[str]:
        return [layer.digest for layer in self.layers if layer.path is None]


def _read_blob(layout: Path, digest: str, what: str) -> bytes:
    path = blob_path(layout, check_digest(digest, f"{layout}: {what}"))
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise LayoutError(f"{layout}: {what} blob {digest} is missing ({path})") from None
    if sha256_digest(data) != digest:
        raise LayoutError(f"{path}: {what} blob does not hash to {digest}; rebuild the image")
    return data


def read_layout(layout: Path, blobs: dict[str, Path] | None = None, require_blobs: bool = False) -> Image:
    """Reads the single image of `layout` (its index.json must list exactly one manifest).

    `blobs` supplies layer blobs kept outside the layout (see parse_blob_args). A layer whose
    blob is nowhere gets path None (a shallow base: the blobs stay in the registry), or, with
    `require_blobs`, is an error.
    """
    layout = Path(layout)
    blobs = blobs or {}
    index_path = layout / "index.json"
    try:
        index = json.loads(index_path.read_text())
    except FileNotFoundError:
        raise LayoutError(f"{layout}: no index.json; is this an OCI image layout directory?") from None
    manifests = index.get("manifests") or []
    if len(manifests) != 1:
        raise LayoutError(f"{index_path}: expected exactly one manifest, found {len(manifests)}")
    desc = manifests[0]
    if desc.get("mediaType", MEDIA_MANIFEST) not in MANIFEST_TYPES:
        raise LayoutError(f"{index_path}: manifest media type {desc.get('mediaType')!r} unsupported")
    digest = desc.get("digest", "")
    manifest_bytes = _read_blob(layout, digest, "manifest")
    manifest = json.loads(manifest_bytes)
    config_digest = manifest["config"]["digest"]
    config = json.loads(_read_blob(layout, config_digest, "config"))
    layers = []
    for item in manifest.get("layers", []):
        path = blobs.get(item["digest"]) or blob_path(layout, check_digest(item["digest"], f"{layout} manifest layer"))
        if not path.exists():
            if require_blobs:
                raise LayoutError(
                    f"{layout}: layer {item['digest']} is neither in the layout nor given with --blob"
                    " (pass the image's layer blobs, or use the self-contained <image>.layout target)")
            path = None
        layers.append(Layer(item["digest"], item["mediaType"], int(item["size"]), path))
    ref = (desc.get("annotations") or {}).get(REF_NAME, "")
    return Image(layout, digest, manifest_bytes, manifest, config_digest, config, ref, layers)


def parse_blob_args(items: list[str]) -> dict[str, Path]:
    """`DESCRIPTOR=BLOB` pairs (tools/oci's layer_args) -> {layer digest: blob file}.

    Sizes are checked against the descriptors (cheap); hashes are not (Bazel made the pair).
    """
    blobs: dict[str, Path] = {}
    for item in items:
        descriptor, sep, blob = item.partition("=")
        if not sep:
            raise LayoutError(f"--blob {item!r}: expected DESCRIPTOR_JSON=BLOB_FILE")
        # Only digest and size matter here: a manifest's layer entry serves as well.
        try:
            desc = json.loads(Path(descriptor).read_text())
            digest, size = check_digest(desc["digest"], descriptor), int(desc["size"])
        except (KeyError, TypeError, ValueError) as e:
            raise LayoutError(f"{descriptor}: not a layer descriptor with digest and size ({e})") from None
        path = Path(blob)
        if path.stat().st_size != size:
            raise LayoutError(f"{blob}: {path.stat().st_size} bytes, but {descriptor} says {size}; rebuild the layer")
        blobs[digest] = path
    return blobs


def find_layout(candidates: list[Path]) -> Path:
    """The one candidate that is an OCI layout (a directory holding index.json).

    Bazel's $(rootpaths) of an image target lists the layout directory and its .digest file.
    """
    layouts = [c for c in candidates if (Path(c) / "index.json").is_file()]
    if len(layouts) != 1:
        raise LayoutError(
            f"expected exactly one OCI layout directory among {[str(c) for c in candidates]}, found {len(layouts)}")
    return Path(layouts[0])


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
