"""Shallow pull: an image's manifest and config by digest, through skopeo, verified by sha256.

Run by the `oci_pull` repository rule (tools/oci/private/pull.bzl) with the interpreter and the
skopeo binary the rule declares. The output directory holds what tools/oci needs to build on
the image without its layer blobs (rules_img's "shallow base"):

  digest                  'sha256:<hex>\\n' of the platform manifest the image builds on
  manifest.json, config.json   byte for byte as the registry serves them
  layers/NNN.json         one descriptor per layer {mediaType, digest, size, diff_id, created_by}
  contents.json           {image, digest, layers: [{descriptor, contents}]} (tools/oci format)
  pin.json                repository, the pinned digest, the platform manifest digest
  files.json              with --scan: {"prefixes": [...], "files": {path: sha256}} of every
                          regular file under the prefixes in the merged filesystem (whiteouts
                          applied); the layers are copied once into a scratch `dir:` (skopeo
                          checks each digest), read once more while hashed, then deleted

The pinned digest may name a multi-platform index; the manifest for --platform is then taken
from it (and verified by its own digest). Docker media types of layers are mapped to their OCI
equivalents in the descriptors (same bytes); the manifest blob itself is kept byte for byte.
skopeo checks config and layer blobs against their digests but not the manifest bytes that
`inspect --raw` prints, so every manifest is hashed here against the digest it was asked for.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tarfile
from pathlib import Path
from typing import BinaryIO

from tools.oci import layerwalk, registry
from tools.oci.mediatypes import oci_layer_type
from tools.oci.ocilayout import LayoutError, canonical_json, sha256_digest

INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)


class PullError(Exception):
    """The registry did not give the pinned, verifiable content."""


def verified(data: bytes, digest: str, what: str) -> bytes:
    actual = sha256_digest(data)
    if actual != digest:
        raise PullError(f"{what}: the registry served bytes that hash to {actual}, not the pinned {digest}; refusing them")
    return data


def platform_manifest(skopeo: registry.Skopeo, repo: registry.Repository, pinned: str, platform: str) -> tuple[bytes, str]:
    """(manifest bytes, digest) for `platform`: the pinned manifest, or its entry in a pinned index."""
    data = verified(skopeo.raw_manifest(repo, pinned), pinned, f"{repo}@{pinned}")
    doc = json.loads(data)
    if doc.get("mediaType") not in INDEX_TYPES and "manifests" not in doc:
        return data, pinned
    os_name, _, arch = platform.partition("/")
    for entry in doc.get("manifests", []):
        plat = entry.get("platform") or {}
        if plat.get("os") == os_name and plat.get("architecture") == arch:
            digest = registry.check_digest(entry["digest"], f"{repo}@{pinned} index entry")
            return verified(skopeo.raw_manifest(repo, digest), digest, f"{repo}@{digest} ({platform})"), digest
    found = sorted(f"{(e.get('platform') or {}).get('os')}/{(e.get('platform') or {}).get('architecture')}"
                   for e in doc.get("manifests", []))
    raise PullError(f"{repo}@{pinned} is an index without a {platform} manifest (it has: {', '.join(found) or 'none'})")


class _HashingReader:
    """A read-only file object that hashes what tarfile reads from it (stream mode)."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw, self.sha = raw, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.sha.update(data)
        return data

    def digest(self) -> str:
        while self.read(1 << 20):
            pass
        return "sha256:" + self.sha.hexdigest()


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")


def apply_layer(view: layerwalk.MergedView[str], tar: tarfile.TarFile, prefixes: list[str], where: str) -> None:
    """Applies one layer (a tar stream, read once) to `view` {path: sha256} of the layers below
    it: the regular files under `prefixes`, whiteouts applied by layerwalk. A hard link gets
    its target's hash (a file of this layer before it in the tar, or of a lower layer)."""
    members, hashes = [], {}
    for member in tar:
        members.append(member)
        if member.isreg() and any(_under(layerwalk.normalise(member.name, where), p) for p in prefixes):
            hashes[member] = hashlib.file_digest(tar.extractfile(member), "sha256").hexdigest()

    def sha256(change: layerwalk.Change) -> str | None:
        if not any(_under(change.path, p) for p in prefixes):
            return None
        if change.member.islnk():
            return view.paths.get(layerwalk.normalise(change.member.linkname, where))
        return hashes.get(change.member)

    view.apply(layerwalk.changes(members, where), sha256)


def file_hashes(blobs: Path, manifest: dict, prefixes: list[str]) -> dict[str, str]:
    """{path: sha256} of the regular files under `prefixes`, from the layer blobs in `blobs`/<hex>."""
    view: layerwalk.MergedView[str] = layerwalk.MergedView()
    for layer in manifest["layers"]:
        media = oci_layer_type(layer["mediaType"])
        if media.endswith("+zstd"):
            raise PullError(f"layer {layer['digest']} is zstd-compressed; the scan reads tar and tar+gzip")
        with (blobs / layer["digest"].split(":", 1)[1]).open("rb") as raw:
            reader = _HashingReader(raw)
            with tarfile.open(fileobj=reader, mode="r|gz" if media.endswith("+gzip") else "r|") as tar:
                apply_layer(view, tar, prefixes, f"blob {layer['digest']}")
            actual = reader.digest()
        if actual != layer["digest"]:
            raise PullError(f"layer blob {layer['digest']} hashes to {actual}; refusing it")
    return view.paths


def _descriptors(manifest: dict, config: dict, where: str) -> list[dict]:
    diff_ids = config.get("rootfs", {}).get("diff_ids", [])
    if len(diff_ids) != len(manifest["layers"]):
        raise PullError(f"{where}: {len(manifest['layers'])} layers but {len(diff_ids)} diff_ids in the config")
    history = [h for h in config.get("history", []) if not h.get("empty_layer")]
    return [{
        "mediaType": oci_layer_type(layer["mediaType"]),
        "digest": layer["digest"],
        "size": layer["size"],
        "diff_id": diff_id,
        "created_by": (history[i].get("created_by", "") if i < len(history) else "")[:200],
    } for i, (layer, diff_id) in enumerate(zip(manifest["layers"], diff_ids))]


def fetch(skopeo: registry.Skopeo, repo: registry.Repository, pinned: str, platform: str, out: Path,
          scan: list[str] | None = None) -> dict:
    """Writes the files listed in the module docstring into `out`; returns pin.json's content."""
    try:
        registry.check_digest(pinned, "the pinned digest")
    except registry.RefError as err:
        raise PullError(f"{err}; pin bases by digest") from None
    manifest_bytes, manifest_digest = platform_manifest(skopeo, repo, pinned, platform)
    manifest = json.loads(manifest_bytes)
    if manifest.get("schemaVersion") != 2 or "config" not in manifest:
        raise PullError(f"{repo}@{manifest_digest}: not a schema-2 image manifest")
    config_digest = registry.check_digest(manifest["config"]["digest"], f"{repo}@{manifest_digest} config")
    config_bytes = verified(skopeo.raw_config(repo, manifest_digest), config_digest, f"{repo}@{manifest_digest} config")
    descriptors = _descriptors(manifest, json.loads(config_bytes), f"{repo}@{manifest_digest}")

    out.mkdir(parents=True, exist_ok=True)
    (out / "manifest.json").write_bytes(manifest_bytes)
    (out / "config.json").write_bytes(config_bytes)
    (out / "digest").write_text(manifest_digest + "\n")
    (out / "layers").mkdir(exist_ok=True)
    for i, descriptor in enumerate(descriptors):
        (out / "layers" / f"{i:03d}.json").write_bytes(canonical_json(descriptor))
    (out / "contents.json").write_bytes(canonical_json({
        "image": str(repo), "digest": manifest_digest,
        "layers": [{"descriptor": d, "contents": {"kind": "shallow-base-layer"}} for d in descriptors],
    }))
    pin = {"repository": str(repo), "pinned_digest": pinned, "manifest_digest": manifest_digest,
           "platform": platform, "layers": len(descriptors)}
    (out / "pin.json").write_text(json.dumps(pin, indent=2, sort_keys=True) + "\n")
    if scan:
        prefixes = sorted({p.strip("/") for p in scan})
        scratch = out / ".pull-blobs"
        shutil.rmtree(scratch, ignore_errors=True)
        try:
            skopeo.copy_to_dir(repo, manifest_digest, scratch)
            files = file_hashes(scratch, manifest, prefixes)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        (out / "files.json").write_text(json.dumps({"prefixes": prefixes, "files": files}, indent=1, sort_keys=True) + "\n")
    return pin


def default_authfile() -> Path | None:
    """$DOCKER_CONFIG/config.json when set and $REGISTRY_AUTH_FILE is not (skopeo reads that one itself)."""
    if os.environ.get("REGISTRY_AUTH_FILE") or not os.environ.get("DOCKER_CONFIG"):
        return None
    path = Path(os.environ["DOCKER_CONFIG"]) / "config.json"
    return path if path.is_file() else None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repository", required=True, help="HOST[:PORT]/PATH, e.g. docker.io/lmsysorg/sglang")
    parser.add_argument("--digest", required=True, help="the pinned sha256:<hex> (manifest or index)")
    parser.add_argument("--platform", default="linux/amd64")
    parser.add_argument("--scan", action="append", default=[], metavar="PREFIX",
                        help="also record the sha256 of every file under this image path (files.json); repeatable")
    parser.add_argument("--skopeo", default="skopeo", help="the skopeo binary (default: %(default)s)")
    parser.add_argument("--authfile", type=Path, help="registry credentials (default: skopeo's lookup, or $DOCKER_CONFIG/config.json)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    where = f"{args.repository}@{args.digest}"
    try:
        repo = registry.parse_repository(args.repository)
        skopeo = registry.Skopeo(policy=args.out / ".pull-policy.json",
                                 authfile=args.authfile or default_authfile(), binary=args.skopeo)
        skopeo.write_policy()
        try:
            pin = fetch(skopeo, repo, args.digest, args.platform, args.out, args.scan)
        finally:
            skopeo.policy.unlink(missing_ok=True)
    except (PullError, registry.RegistryError, registry.RefError, LayoutError, KeyError, ValueError,
            tarfile.TarError) as err:
        print(f"pull: error: {where}: {err}", file=sys.stderr)
        return 1
    kept = "layers read once for files.json, not kept" if args.scan else "no layer blob fetched"
    print(f"pull: {repo}@{pin['manifest_digest']} ({pin['layers']} layers, {kept})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
