"""layer_sbom.py: syft on one layer (reproducible, independent of the image), the merged image
SBOM naming the patched sglang and its patches, and the errors."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tools.oci.ocilayout import MEDIA_LAYER
from tools.podman.tests.host_image import layer_of, write_tree
from tools.release import layer_sbom
from tools.release.sbom import SbomError
from tools.release.tests.fixtures import DECLARATION

METADATA = "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.19\n"


def layer_files(tmp: Path, name: str, files: dict[str, str]) -> tuple[Path, Path]:
    data = layer_of(write_tree(tmp / f"{name}-root", files))
    blob, desc = tmp / f"{name}.tar", tmp / f"{name}.json"
    blob.write_bytes(data)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    desc.write_text(json.dumps({"mediaType": MEDIA_LAYER, "digest": digest, "size": len(data),
                                "diff_id": digest, "created_by": name}))
    return desc, blob


@pytest.fixture(scope="module")
def layers(tmp_path_factory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("layers")
    wheels = layer_files(tmp, "wheels", {
        "usr/lib/python3/dist-packages/sglang-0.5.19.dist-info/METADATA": METADATA,
        "usr/lib/python3/dist-packages/sglang/__init__.py": "",
    })
    patch = layer_files(tmp, "patch", {"usr/lib/python3/dist-packages/sglang/x.py": "patched\n"})
    out = {}
    for name, (desc, blob) in {"wheels": wheels, "patch": patch}.items():
        sbom = tmp / f"{name}.spdx.json"
        assert layer_sbom.main(["layer", "--descriptor", str(desc), "--blob", str(blob), "--name", f"//t:{name}",
                                "--out", str(sbom)]) == 0
        out[name] = {"desc": desc, "blob": blob, "sbom": sbom}
    return out


def merged(tmp: Path, layers: dict, declaration: dict | None) -> dict:
    digest = tmp / "img.digest"
    digest.write_text("sha256:" + "e" * 64 + "\n")
    args = ["merge", "--name", "glm53_v3", "--digest-file", str(digest), "--out", str(tmp / "sbom.json")]
    for name in ("wheels", "patch"):
        args += ["--layer", f"{layers[name]['desc']}={layers[name]['sbom']}"]
    if declaration is not None:
        (tmp / "decl.json").write_text(json.dumps(declaration))
        args += ["--declaration", str(tmp / "decl.json")]
    assert layer_sbom.main(args) == 0
    return json.loads((tmp / "sbom.json").read_text())


def test_layer_sbom_is_reproducible_and_finds_the_stock_package(layers, tmp_path: Path) -> None:
    again = tmp_path / "again.json"
    w = layers["wheels"]
    assert layer_sbom.main(["layer", "--descriptor", str(w["desc"]), "--blob", str(w["blob"]),
                            "--name", "//t:wheels", "--out", str(again)]) == 0
    assert again.read_bytes() == w["sbom"].read_bytes()
    doc = json.loads(again.read_text())
    assert ("sglang", "0.5.19") in {(p["name"], p.get("versionInfo")) for p in doc["packages"]}
    assert str(tmp_path) not in again.read_text()


def test_merged_sbom_names_the_patched_sglang_and_each_patch(layers, tmp_path: Path) -> None:
    doc = merged(tmp_path, layers, DECLARATION)
    by_id = {p["SPDXID"]: p for p in doc["packages"]}
    patched = by_id[layer_sbom.PATCHED_ID]
    assert patched["name"] == "sglang" and patched["versionInfo"] == "0.5.19+glm53.v3"
    rels = {(r["spdxElementId"], r["relationshipType"], r["relatedSpdxElement"]) for r in doc["relationships"]}
    stock = [i for i, p in by_id.items() if p["name"] == "sglang" and p.get("versionInfo") == "0.5.19"]
    assert len(stock) == 1 and stock[0].startswith("SPDXRef-L0-")
    assert (layer_sbom.PATCHED_ID, "VARIANT_OF", stock[0]) in rels
    patches = {f["fileName"]: f for f in doc["files"] if f["SPDXID"].startswith("SPDXRef-Patch-")}
    assert sorted(patches) == ["patches/v1/a.diff", "patches/v3/stall.diff"]
    assert patches["patches/v1/a.diff"]["checksums"] == [{"algorithm": "SHA256", "checksumValue": "1" * 64}]
    for f in patches.values():
        assert (f["SPDXID"], "PATCH_APPLIED", layer_sbom.PATCHED_ID) in rels
    assert ("SPDXRef-DOCUMENT", "DESCRIBES", layer_sbom.IMAGE_ID) in rels
    # Every relationship points at an element of the document.
    ids = set(by_id) | {f["SPDXID"] for f in doc["files"]} | {"SPDXRef-DOCUMENT"}
    assert all(a in ids and b in ids for a, _, b in rels)


def test_stock_and_other_series_are_told_apart(layers, tmp_path: Path) -> None:
    (tmp_path / "stock").mkdir()
    (tmp_path / "v1").mkdir()
    stock = merged(tmp_path / "stock", layers, None)
    assert [p["versionInfo"] for p in stock["packages"] if p["name"] == "sglang"] == ["0.5.19"]
    v1 = merged(tmp_path / "v1", layers, dict(DECLARATION, series="v1", chain=["v1"], patches=DECLARATION["patches"][:1]))
    assert [p["versionInfo"] for p in v1["packages"] if p["SPDXID"] == layer_sbom.PATCHED_ID] == ["0.5.19+glm53.v1"]


def test_merge_refuses_a_declaration_without_patches(layers, tmp_path: Path) -> None:
    with pytest.raises(SbomError, match="no series/patches"):
        layer_sbom.merge("x", "sha256:" + "e" * 64, [], {"series": "v3", "base": DECLARATION["base"]}, "decl.json")


def test_layer_refuses_a_blob_of_the_wrong_size(layers, tmp_path: Path) -> None:
    short = tmp_path / "short.tar"
    short.write_bytes(layers["wheels"]["blob"].read_bytes()[:-512])
    assert layer_sbom.main(["layer", "--descriptor", str(layers["wheels"]["desc"]), "--blob", str(short),
                            "--name", "x", "--out", str(tmp_path / "o.json")]) == 1
