"""Reads an OCI image layout directory: the one image it holds, its config and layer blobs.

Only what the in-image runner and the release tools need; the layout is produced by
tools/oci (or by skopeo) and is trusted to be well formed, but every manifest and config blob
read is checked against its digest so a damaged cache or a half-written layout fails loudly.

tools/oci's image layouts hold only the manifest, the config and the embedded (patch) layer;
the base layers stay the outputs of the layer targets ("fulfilled by an external blob store"
in the image-layout spec). Those are passed as `DESCRIPTOR=BLOB` pairs (tools/oci's
layer_args format), and link_view() makes a complete layout of symlinks for podman, skopeo
and syft without copying gigabytes.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)


class LayoutError(Exception):
    """The directory is not a usable single-image OCI layout."""


@dataclass(frozen=True)
class Layer:
    digest: str  # sha256:<hex> of the blob as stored (== diff_id for uncompressed layers)
    media_type: str
    size: int
    path: Path | None  # blob file (inside the layout or given with --blob); None: shallow, in a registry


@dataclass(frozen=True)
class Image:
    layout: Path
    manifest_digest: str
    manifest_bytes: bytes
    config_digest: str
    config: dict
    layers: list[Layer] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for item in self.config.get("config", {}).get("Env") or []:
            key, _, value = item.partition("=")
            out[key] = value
        return out

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.config.get("config", {}).get("Labels") or {})

    @property
    def working_dir(self) -> str:
        return self.config.get("config", {}).get("WorkingDir") or "/"

    @property
    def diff_ids(self) -> list[str]:
        return list(self.config.get("rootfs", {}).get("diff_ids") or [])


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def _blob_path(layout: Path, digest: str) -> Path:
    algo, _, hexpart = digest.partition(":")
    if algo != "sha256" or len(hexpart) != 64:
        raise LayoutError(f"{layout}: unsupported digest {digest!r} (only sha256:<64 hex>)")
    return layout / "blobs" / "sha256" / hexpart


def _read_blob(layout: Path, digest: str) -> bytes:
    path = _blob_path(layout, digest)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise LayoutError(f"{layout}: blob {digest} is missing ({path})") from None
    actual = "sha256:" + hashlib.sha256(data).hexdigest()
    if actual != digest:
        raise LayoutError(f"{path}: content hashes to {actual}, not {digest}; rebuild the layout")
    return data


def parse_blob_args(items: list[str]) -> dict[str, Path]:
    """`DESCRIPTOR=BLOB` pairs -> {layer digest: blob path}; sizes are checked, not hashes."""
    blobs: dict[str, Path] = {}
    for item in items:
        descriptor, sep, blob = item.partition("=")
        if not sep:
            raise LayoutError(f"--blob {item!r}: expected DESCRIPTOR_JSON=BLOB_FILE")
        desc = json.loads(Path(descriptor).read_text())
        path = Path(blob)
        if path.stat().st_size != int(desc["size"]):
            raise LayoutError(f"{blob}: {path.stat().st_size} bytes, but {descriptor} says {desc['size']}")
        blobs[desc["digest"]] = path
    return blobs


def link_view(image: "Image", dest: Path) -> Path:
    """An OCI layout at `dest` whose blobs are symlinks to the real files.

    Complete unless the image has shallow layers (path None), which are left out.
    """
    blob_dir = dest / "blobs" / "sha256"
    blob_dir.mkdir(parents=True)
    for name in ("oci-layout", "index.json"):
        (dest / name).write_bytes((image.layout / name).read_bytes())
    sources = {image.manifest_digest: _blob_path(image.layout, image.manifest_digest),
               image.config_digest: _blob_path(image.layout, image.config_digest)}
    sources.update({layer.digest: layer.path for layer in image.layers if layer.path is not None})
    for digest, source in sources.items():
        link = blob_dir / digest.split(":", 1)[1]
        if not link.exists():
            os.symlink(os.path.realpath(source), link)
    return dest


def find_layout(candidates: list[Path]) -> Path:
    """Returns the one candidate that is an OCI layout (a directory holding index.json).

    Bazel's $(rootpaths) of an image target lists the layout directory and its .digest
    file; this picks the directory.
    """
    layouts = [c for c in candidates if (c / "index.json").is_file()]
    if len(layouts) != 1:
        raise LayoutError(
            f"expected exactly one OCI layout directory among {[str(c) for c in candidates]},"
            f" found {len(layouts)}"
        )
    return layouts[0]


def read_image(layout: Path, blobs: dict[str, Path] | None = None, allow_shallow: bool = False) -> Image:
    """Reads the single image of `layout` (its index.json must list exactly one manifest).

    `blobs` supplies layer blobs kept outside the layout (see parse_blob_args). With
    `allow_shallow`, layers whose blob is nowhere (a shallow-pulled base: the blobs stay in the
    registry) get path None instead of an error.
    """
    layout = Path(layout)
    blobs = blobs or {}
    index_path = layout / "index.json"
    try:
        index = json.loads(index_path.read_text())
    except FileNotFoundError:
        raise LayoutError(f"{layout}: no index.json; is this an OCI layout directory?") from None
    manifests = index.get("manifests") or []
    if len(manifests) != 1:
        raise LayoutError(f"{index_path}: expected exactly one manifest, found {len(manifests)}")
    desc = manifests[0]
    if desc.get("mediaType") not in MANIFEST_TYPES:
        raise LayoutError(f"{index_path}: manifest media type {desc.get('mediaType')!r} unsupported")
    manifest_bytes = _read_blob(layout, desc["digest"])
    manifest = json.loads(manifest_bytes)
    config_digest = manifest["config"]["digest"]
    config = json.loads(_read_blob(layout, config_digest))
    layers = []
    for item in manifest.get("layers", []):
        path = blobs.get(item["digest"]) or _blob_path(layout, item["digest"])
        if not path.exists() and allow_shallow:
            path = None
        elif not path.exists():
            raise LayoutError(
                f"{layout}: layer {item['digest']} is neither in the layout nor given with --blob"
                " (pass the image's layer blobs, or use the self-contained <image>.layout target)"
            )
        layers.append(Layer(item["digest"], item["mediaType"], int(item["size"]), path))
    return Image(
        layout=layout,
        manifest_digest=desc["digest"],
        manifest_bytes=manifest_bytes,
        config_digest=config_digest,
        config=config,
        layers=layers,
    )
