"""Assembles an OCI image (config + manifest + layout) from a base and layer descriptors.

Only descriptors are read, never layer bytes: the cost of an image does not grow with the
size of its base. The layout directory written holds oci-layout, index.json, the manifest and
config blobs and the blobs passed with --embed; other layer blobs are "fulfilled by an external
blob store" as the image-layout spec allows (the layer targets' outputs; see
tools/oci/materialize.py for a self-contained copy).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tools.oci.mediatypes import oci_layer_type
from tools.oci.ocilayout import (
    ConfigChanges,
    LayerDescriptor,
    LayoutError,
    canonical_json,
    derive_config,
    make_manifest,
    parse_blob_args,
    parse_pairs,
    read_layout,
    sha256_digest,
    write_canonical,
    write_layout,
)


def read_pairs_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines (blank lines and # comments skipped)."""
    out: dict[str, str] = {}
    for lineno, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key:
            raise LayoutError(f"{path}:{lineno}: expected KEY=VALUE, got {line!r}")
        out[key] = value
    return out


def json_list(value: str | None, what: str) -> list[str] | None:
    if value is None:
        return None
    parsed = json.loads(value)
    if not isinstance(parsed, list) or not all(isinstance(x, str) for x in parsed):
        raise LayoutError(f"--{what} must be a JSON list of strings, got {value!r}")
    return parsed


def write_contents(args: argparse.Namespace, digest: str, base_manifest: dict | None,
                   layers: list[LayerDescriptor]) -> None:
    entries = []
    if args.base_contents:
        entries = json.loads(args.base_contents.read_text())["layers"]
    elif base_manifest:
        entries = [{"descriptor": d, "contents": None} for d in base_manifest.get("layers", [])]
    if args.layer_contents and len(args.layer_contents) != len(layers):
        raise LayoutError("--layer-contents must be given once per --layer")
    for i, layer in enumerate(layers):
        src = args.layer_contents[i] if args.layer_contents else "-"
        entries.append({"descriptor": layer.to_json(),
                        "contents": json.loads(Path(src).read_text()) if src != "-" else None})
    doc = {"image": args.ref_name, "digest": digest, "layers": entries}
    write_canonical(args.out_contents, doc)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", type=Path, help="layout directory of the base image (omit for scratch)")
    p.add_argument("--layer", type=Path, action="append", default=[], help="descriptor JSON of a layer to append, in order")
    p.add_argument("--embed", action="append", default=[], metavar="DESCRIPTOR=BLOB",
                   help="copy this layer's blob into the layout directory")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="$KEY expands against the base env")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--labels-file", type=Path, action="append", default=[], help="KEY=VALUE lines")
    p.add_argument("--label-from-file", action="append", default=[], metavar="KEY=PATH",
                   help="label whose value is the stripped content of PATH (e.g. a digest file)")
    p.add_argument("--annotation", action="append", default=[], metavar="KEY=VALUE", help="manifest annotation")
    p.add_argument("--annotation-from-file", action="append", default=[], metavar="KEY=PATH",
                   help="manifest annotation whose value is the stripped content of PATH")
    p.add_argument("--entrypoint", help="JSON list; omitted = inherit")
    p.add_argument("--cmd", help="JSON list; omitted = inherit")
    p.add_argument("--user")
    p.add_argument("--workdir")
    p.add_argument("--exposed-port", action="append", default=[])
    p.add_argument("--ref-name", required=True, help="org.opencontainers.image.ref.name in index.json")
    p.add_argument("--out-layout", type=Path, required=True)
    p.add_argument("--out-digest", type=Path, required=True, help="gets 'sha256:<hex>\\n'")
    p.add_argument("--out-manifest", type=Path)
    p.add_argument("--out-config", type=Path)
    p.add_argument("--layer-contents", action="append", default=[], metavar="PATH|-",
                   help="contents JSON of each --layer, in the same order ('-' = none)")
    p.add_argument("--base-contents", type=Path, help="the base image's contents JSON")
    p.add_argument("--out-contents", type=Path,
                   help="JSON: image digest and, per layer (base first), its descriptor and contents (debs, wheels, files)")
    args = p.parse_args(argv)
    try:
        base_manifest = base_config = None
        if args.base:
            base = read_layout(args.base)
            base_manifest, base_config = base.manifest, base.config
            # A Docker-typed base's layers get their OCI types in this OCI manifest.
            base_manifest = dict(base_manifest, layers=[
                dict(layer, mediaType=oci_layer_type(layer["mediaType"]))
                for layer in base_manifest.get("layers", [])])
        layers = [LayerDescriptor.load(d) for d in args.layer]
        labels = parse_pairs(args.label, "label")
        for f in args.labels_file:
            labels.update(read_pairs_file(f))
        for key, path in parse_pairs(args.label_from_file, "label-from-file").items():
            labels[key] = Path(path).read_text().strip()
        changes = ConfigChanges(
            env=parse_pairs(args.env, "env"),
            labels=labels,
            entrypoint=json_list(args.entrypoint, "entrypoint"),
            cmd=json_list(args.cmd, "cmd"),
            user=args.user,
            workdir=args.workdir,
            exposed_ports=args.exposed_port,
        )
        annotations = parse_pairs(args.annotation, "annotation")
        for key, path in parse_pairs(args.annotation_from_file, "annotation-from-file").items():
            annotations[key] = Path(path).read_text().strip()
        config_bytes = canonical_json(derive_config(base_config, layers, changes))
        manifest_bytes = canonical_json(make_manifest(config_bytes, base_manifest, layers, annotations))
        embed = parse_blob_args(args.embed)
        args.out_layout.mkdir(parents=True, exist_ok=True)
        digest = write_layout(args.out_layout, manifest_bytes, config_bytes, args.ref_name, embed)
        assert digest == sha256_digest(manifest_bytes)
        args.out_digest.write_text(digest + "\n")
        if args.out_manifest:
            args.out_manifest.write_bytes(manifest_bytes)
        if args.out_config:
            args.out_config.write_bytes(config_bytes)
        if args.out_contents:
            write_contents(args, digest, base_manifest, layers)
    except (LayoutError, OSError, json.JSONDecodeError) as e:
        print(f"image.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
