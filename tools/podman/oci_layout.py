"""Reads an OCI image layout directory: the one image it holds, its config and layer blobs.

Only what the in-image runner and the release tools need; the layout is produced by
tools/oci (or by skopeo) and is trusted to be well formed, but every blob read is checked
against its digest so a damaged cache or a half-written layout fails loudly.
"""

from __future__ import annotations

import hashlib
import json
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
    path: Path  # blob file inside the layout


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


def read_image(layout: Path) -> Image:
    """Reads the single image of `layout` (its index.json must list exactly one manifest)."""
    layout = Path(layout)
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
    layers = [
        Layer(
            digest=item["digest"],
            media_type=item["mediaType"],
            size=int(item["size"]),
            path=_blob_path(layout, item["digest"]),
        )
        for item in manifest.get("layers", [])
    ]
    return Image(
        layout=layout,
        manifest_digest=desc["digest"],
        manifest_bytes=manifest_bytes,
        config_digest=config_digest,
        config=config,
        layers=layers,
    )
