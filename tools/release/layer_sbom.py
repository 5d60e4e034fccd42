"""SBOM once per layer, merged per image, naming the patched SGLang.

    layer_sbom.py layer --descriptor D --blob B --name LABEL --out layer.spdx.json
    layer_sbom.py merge --name glm53_v3 --digest-file F --layer DESCRIPTOR=SBOM ... \
                        [--declaration series.resolved.json] --out sbom.spdx.json

`layer` runs syft on a one-layer OCI layout (scratch config, the blob symlinked in): its result
depends on the layer alone, so the 2 GiB wheels layer is scanned once for every image built on
it. `merge` joins the layer documents (bottom first; each layer's SPDX ids prefixed `L<i>-`) under
one package for the image (its manifest digest and purl) and, with the series declaration, adds
the patched SGLang: a `sglang` package versioned `<stock>+glm53.<series>` (a PEP 440 local
version, so it never equals the stock release), VARIANT_OF the stock sglang a layer holds, and
every patch of the chain as a file with its sha256, PATCH_APPLIED to it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from tools.oci.ocilayout import (
    ConfigChanges, LayerDescriptor, LayoutError, blob_path, canonical_json, derive_config, make_manifest,
    write_layout,
)
from tools.release.sbom import EPOCH, NAMESPACE, SbomError, normalize, scan

DOCUMENT = "SPDXRef-DOCUMENT"
IMAGE_ID = "SPDXRef-Image"
PATCHED_ID = "SPDXRef-Patched-sglang"


def one_layer_layout(desc: LayerDescriptor, blob: Path, out: Path) -> None:
    """An OCI layout holding just this layer (blob symlinked, not copied)."""
    config = canonical_json(derive_config(None, [desc], ConfigChanges(env={}, labels={})))
    manifest = canonical_json(make_manifest(config, None, [desc]))
    write_layout(out, manifest, config, "layer")
    os.symlink(os.path.realpath(blob), blob_path(out, desc.digest))


def layer_sbom(desc: LayerDescriptor, blob: Path, name: str) -> dict[str, Any]:
    if os.stat(blob).st_size != desc.size:
        raise SbomError(f"{blob}: {os.stat(blob).st_size} bytes, but its descriptor says {desc.size}; rebuild the layer")
    with tempfile.TemporaryDirectory(prefix="layer-sbom.") as tmp:
        layout = Path(tmp) / "layout"
        one_layer_layout(desc, blob, layout)
        return normalize(scan(layout, name, desc.digest, Path(tmp)), name, desc.digest)


def _prefixed(spdx_id: str, prefix: str) -> str:
    return spdx_id if spdx_id == DOCUMENT else spdx_id.replace("SPDXRef-", f"SPDXRef-{prefix}", 1)


def _describes(doc: dict[str, Any]) -> list[str]:
    roots = [r["relatedSpdxElement"] for r in doc.get("relationships", [])
             if r.get("spdxElementId") == DOCUMENT and r.get("relationshipType") == "DESCRIBES"]
    return roots or list(doc.get("documentDescribes", []))


def _stock_version(declaration: dict[str, Any], where: str) -> str:
    wheel = declaration.get("base", {}).get("wheel", "")
    m = re.match(r"sglang-(\d[^-]*?)(?:-|\.whl$)", wheel)
    if not m:
        raise SbomError(f"{where}: base.wheel {wheel!r} is not an sglang wheel name; is this a resolved series declaration?")
    return m.group(1)


def patched_sglang(declaration: dict[str, Any], where: str, stock_ids: list[str]) -> tuple[list, list, list]:
    """(packages, files, relationships) naming the patched SGLang and its patches."""
    series = declaration.get("series")
    patches = declaration.get("patches")
    if not series or not isinstance(patches, list) or not patches:
        raise SbomError(f"{where}: no series/patches; give the patch chain's resolved declaration")
    stock = _stock_version(declaration, where)
    version = f"{stock}+glm53.{series}"
    package = {
        "SPDXID": PATCHED_ID,
        "name": "sglang",
        "versionInfo": version,
        "downloadLocation": "NOASSERTION",
        "filesAnalyzed": False,
        "licenseConcluded": "NOASSERTION",
        "licenseDeclared": "NOASSERTION",
        "copyrightText": "NOASSERTION",
        "sourceInfo": f"sglang {stock} ({declaration['base']['wheel']}, sha256 {declaration['base'].get('sha256', 'NOASSERTION')}) "
                      f"with patch series {series} ({', '.join(declaration.get('chain', [series]))}) applied",
        "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                          "referenceLocator": f"pkg:pypi/sglang@{version.replace('+', '%2B')}"}],
    }
    files, rels = [], [{"spdxElementId": IMAGE_ID, "relationshipType": "CONTAINS", "relatedSpdxElement": PATCHED_ID}]
    rels += [{"spdxElementId": PATCHED_ID, "relationshipType": "VARIANT_OF", "relatedSpdxElement": s} for s in stock_ids]
    for i, patch in enumerate(patches):
        try:
            path, sha = f"patches/{patch.get('series', series)}/{patch['file']}", patch["sha256"]
        except KeyError as err:
            raise SbomError(f"{where}: patches[{i}] lacks {err}") from None
        spdx_id = "SPDXRef-Patch-" + re.sub(r"[^A-Za-z0-9.-]", "-", path)
        files.append({"SPDXID": spdx_id, "fileName": path, "fileTypes": ["SOURCE"],
                      "checksums": [{"algorithm": "SHA256", "checksumValue": sha}],
                      "licenseConcluded": "NOASSERTION", "copyrightText": "NOASSERTION",
                      "comment": f"patch {i + 1} of {len(patches)} applied to sglang {stock}"})
        rels.append({"spdxElementId": spdx_id, "relationshipType": "PATCH_APPLIED", "relatedSpdxElement": PATCHED_ID})
    return [package], files, rels


def merge(name: str, digest: str, layers: list[tuple[LayerDescriptor, dict[str, Any]]],
          declaration: dict[str, Any] | None, where: str = "--declaration") -> dict[str, Any]:
    image = {
        "SPDXID": IMAGE_ID,
        "name": name,
        "versionInfo": digest,
        "downloadLocation": "NOASSERTION",
        "filesAnalyzed": False,
        "licenseConcluded": "NOASSERTION",
        "licenseDeclared": "NOASSERTION",
        "copyrightText": "NOASSERTION",
        "primaryPackagePurpose": "CONTAINER",
        "checksums": [{"algorithm": "SHA256", "checksumValue": digest.split(":", 1)[1]}],
        "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                          "referenceLocator": f"pkg:oci/{name}@{digest.replace(':', '%3A')}"}],
    }
    packages, files = [image], []
    rels = [{"spdxElementId": DOCUMENT, "relationshipType": "DESCRIBES", "relatedSpdxElement": IMAGE_ID}]
    creators = {"Tool: glm53-engine-layer-sbom"}
    for i, (desc, doc) in enumerate(layers):
        prefix = f"L{i}-"
        creators.update(doc.get("creationInfo", {}).get("creators", []))
        roots = _describes(doc)
        for pkg in doc.get("packages", []):
            pkg = dict(pkg, SPDXID=_prefixed(pkg["SPDXID"], prefix))
            if "hasFiles" in pkg:
                pkg["hasFiles"] = [_prefixed(f, prefix) for f in pkg["hasFiles"]]
            if pkg["SPDXID"] in [_prefixed(r, prefix) for r in roots]:
                pkg["comment"] = f"layer {i}: {desc.digest} ({desc.created_by})"
            packages.append(pkg)
        files += [dict(f, SPDXID=_prefixed(f["SPDXID"], prefix)) for f in doc.get("files", [])]
        for r in doc.get("relationships", []):
            if r.get("spdxElementId") == DOCUMENT and r.get("relationshipType") == "DESCRIBES":
                continue
            rels.append(dict(r, spdxElementId=_prefixed(r["spdxElementId"], prefix),
                             relatedSpdxElement=_prefixed(r["relatedSpdxElement"], prefix)))
        rels += [{"spdxElementId": IMAGE_ID, "relationshipType": "CONTAINS", "relatedSpdxElement": _prefixed(r, prefix)}
                 for r in roots]
    if declaration is not None:
        stock = [p["SPDXID"] for p in packages if p.get("name") == "sglang" and p["SPDXID"] != PATCHED_ID]
        extra_packages, extra_files, extra_rels = patched_sglang(declaration, where, stock)
        packages += extra_packages
        files += extra_files
        rels += extra_rels
    return {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": DOCUMENT,
        "name": name,
        "documentNamespace": f"{NAMESPACE}/{name}/{digest.split(':', 1)[1]}",
        "creationInfo": {"created": EPOCH, "creators": sorted(creators)},
        "packages": packages,
        "files": files,
        "relationships": rels,
    }


def _write(doc: dict[str, Any], out: Path) -> None:
    out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    lay = sub.add_parser("layer", help="SBOM of one layer")
    lay.add_argument("--descriptor", type=Path, required=True)
    lay.add_argument("--blob", type=Path, required=True)
    lay.add_argument("--name", required=True, help="the layer's name in the document (its target label)")
    lay.add_argument("--out", type=Path, required=True)
    mer = sub.add_parser("merge", help="the image's SBOM from its layers' SBOMs")
    mer.add_argument("--name", required=True)
    mer.add_argument("--digest-file", type=Path, required=True, help="the image's .digest file")
    mer.add_argument("--layer", action="append", default=[], metavar="DESCRIPTOR=SBOM", help="bottom layer first")
    mer.add_argument("--declaration", type=Path, help="resolved series declaration: adds the patched sglang")
    mer.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    try:
        if args.cmd == "layer":
            doc = layer_sbom(LayerDescriptor.load(args.descriptor), args.blob, args.name)
            _write(doc, args.out)
            print(f"layer sbom: {len(doc.get('packages', []))} packages -> {args.out}")
            return 0
        layers = []
        for item in args.layer:
            desc, sep, sbom = item.partition("=")
            if not sep:
                raise SbomError(f"--layer {item!r}: expected DESCRIPTOR=SBOM")
            layers.append((LayerDescriptor.load(Path(desc)), json.loads(Path(sbom).read_text())))
        declaration = json.loads(args.declaration.read_text()) if args.declaration else None
        doc = merge(args.name, args.digest_file.read_text().strip(), layers, declaration, str(args.declaration))
        _write(doc, args.out)
        print(f"image sbom: {len(doc['packages'])} packages, {len(layers)} layers -> {args.out}")
    except (SbomError, LayoutError, OSError, json.JSONDecodeError) as err:
        print(f"layer_sbom.py: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
