"""The patch layer of an engine image, and the per-patch labels, from a verified patch chain.

The layer holds only what the chain produced, so it is the same bytes on every base:
  <site>/sglang/...                    the patched files (and unchecked-hash .pyc for them:
                                       the CPU base ships unchecked .pyc of the stock files,
                                       which would otherwise shadow the patched sources)
  <site>/sglang/.../.wh.<name>         whiteouts for files the chain deletes (and their .pyc)
  <recipe dir>/                        series.json (resolved declaration), PROVENANCE,
                                       PROVENANCE.json, patches.json, tests/<series>/...

patches.json lists every patch as {name, version, activation, series, file}; the labels file
holds one `ai.glm53.patch.<name_with_underscores>=<version>[-<activation>]` line per patch
(e.g. `ai.glm53.patch.event_loop_stall_dump=v1-on-30s`; unconditional patches: just `v1`).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.oci import ocitar, pycompile  # noqa: E402
from tools.oci.layer import contents  # noqa: E402
from tools.oci.ocilayout import LayerDescriptor, write_canonical  # noqa: E402

LABEL_PREFIX = "ai.glm53.patch."
PYC_TAG = "cpython-311"


class PatchLayerError(Exception):
    """The chain's outputs cannot be turned into a patch layer."""


def _token(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9._]+", "_", value).strip("_")


def patch_name(file: str) -> str:
    """'event-loop-stall-dump.diff' -> 'event-loop-stall-dump'."""
    return re.sub(r"\.(diff|patch)$", "", file)


def activation_summary(activation: dict[str, Any]) -> str:
    """'always' (unconditional), 'opt-in', or 'on' (on by default) plus the default of the
    setting that turns it off: on by default, disable "SGLANG_EVENT_LOOP_STALL_DUMP_SECS=0",
    settings {"SGLANG_EVENT_LOOP_STALL_DUMP_SECS": "30", ...} -> 'on-30s' (a *_SECS/*_SECONDS
    number gets an "s")."""
    kind = activation.get("kind")
    head = {"unconditional": "always", "on-by-default": "on", "opt-in": "opt-in"}.get(kind)
    if head is None:
        raise PatchLayerError(f"unknown activation kind {kind!r} in the series declaration")
    settings = activation.get("settings") or {}
    switch = str(activation.get("disable") or "").partition("=")[0]
    if kind == "on-by-default" and switch in settings:
        value = str(settings[switch])
        if re.search(r"_(SECS|SECONDS)$", switch) and re.fullmatch(r"\d+(\.\d+)?", value):
            value += "s"
        head += "-" + _token(value)
    return head


def patch_table(declaration: dict[str, Any]) -> list[dict[str, str]]:
    """One row per patch: name, version (the declaration's `version`, default v1), activation."""
    out = []
    for p in declaration.get("patches", []):
        series = p.get("series") or declaration.get("series", "")
        out.append({
            "name": patch_name(p["file"]),
            "version": p.get("version") or "v1",
            "activation": activation_summary(p.get("activation") or {}),
            "series": series,
            "file": p["file"],
        })
    return out


def label_value(row: dict[str, str]) -> str:
    """v1 (unconditional), v1-opt-in, v1-on-30s: the convention of the reference images."""
    return row["version"] if row["activation"] == "always" else f"{row['version']}-{row['activation']}"


def labels(table: list[dict[str, str]]) -> list[str]:
    return [f"{LABEL_PREFIX}{_token(p['name'].replace('-', '_'))}={label_value(p)}" for p in table]


def test_destination(short_path: str) -> str:
    """'patches/v3/tests/test_x.py' -> 'tests/v3/tests/test_x.py' (keeps per-series dirs apart)."""
    parts = short_path.split("/")
    if "patches" in parts:
        parts = parts[parts.index("patches") + 1:]
    return "tests/" + "/".join(parts)


def build(args: argparse.Namespace) -> None:
    declaration = json.loads(args.declaration.read_text())
    provenance = json.loads(args.provenance_json.read_text())
    table = patch_table(declaration)
    site = ocitar.normalise_path(args.site)
    recipe_dir = ocitar.normalise_path(args.recipe_dir)
    with tempfile.TemporaryDirectory(prefix="patch-layer-") as tmp:
        root = Path(tmp)
        shutil.copytree(args.patched, root / site, symlinks=False, dirs_exist_ok=True)
        if not (root / site / "sglang").is_dir():
            raise PatchLayerError(f"{args.patched} holds no sglang/ directory; is it a patch_chain's `patched` output?")
        pycompile.compile_tree(root, [f"{site}/sglang"], workers=1)
        for rel in provenance.get("deleted", []):
            d, _, name = f"{site}/{rel}".rpartition("/")
            (root / d).mkdir(parents=True, exist_ok=True)
            (root / d / f".wh.{name}").write_bytes(b"")
            if name.endswith(".py"):
                (root / d / "__pycache__").mkdir(exist_ok=True)
                (root / d / "__pycache__" / f".wh.{name[:-3]}.{PYC_TAG}.pyc").write_bytes(b"")
        rd = root / recipe_dir
        rd.mkdir(parents=True)
        shutil.copyfile(args.declaration, rd / "series.json")
        shutil.copyfile(args.provenance_json, rd / "PROVENANCE.json")
        shutil.copyfile(args.provenance_text, rd / "PROVENANCE")
        write_canonical(rd / "patches.json", table)
        for item in args.test:
            src, _, short = item.partition("=")
            dst = rd / test_destination(short)
            if dst.exists():
                raise PatchLayerError(f"two test files map to {dst.relative_to(root)}")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
        entries = list(ocitar.walk_tree(root, file_mode=ocitar.FILE_MODE))
        digest = ocitar.write_layer(entries, args.out)
        layer_contents = contents(entries)
    desc = LayerDescriptor.uncompressed(
        digest.digest, digest.size,
        f"patch layer: series {declaration.get('series')} ({len(table)} patches), recipe {args.recipe}")
    desc.write(args.out_descriptor)
    args.out_digest.write_text(digest.digest + "\n")
    write_canonical(args.out_patches, table)
    args.out_labels.write_text("".join(line + "\n" for line in labels(table)))
    manifest = {
        "kind": "patch-layer",
        "series": declaration.get("series"),
        "recipe": args.recipe,
        "site": "/" + site,
        "recipe_dir": "/" + recipe_dir,
        "patches": table,
        "outputs": provenance.get("outputs", {}),
        "deleted": provenance.get("deleted", []),
        "files": layer_contents["files"],
        "layer": desc.to_json(),
    }
    write_canonical(args.out_contents, manifest)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--patched", type=Path, required=True, help="PatchChainInfo.patched (holds sglang/...)")
    p.add_argument("--declaration", type=Path, required=True, help="PatchChainInfo.declaration")
    p.add_argument("--provenance-json", type=Path, required=True)
    p.add_argument("--provenance-text", type=Path, required=True)
    p.add_argument("--test", action="append", default=[], metavar="FILE=SHORT_PATH", help="a CPU test file")
    p.add_argument("--recipe", required=True, help="recipe name, e.g. glm53_v3")
    p.add_argument("--recipe-dir", required=True,
                   help="where the recipe files go in the image, e.g. /usr/share/glm53-engine/glm53_v3")
    p.add_argument("--site", default="/usr/lib/python3/dist-packages", help="the directory holding sglang/ in the image")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--out-descriptor", type=Path, required=True)
    p.add_argument("--out-digest", type=Path, required=True)
    p.add_argument("--out-contents", type=Path, required=True)
    p.add_argument("--out-patches", type=Path, required=True)
    p.add_argument("--out-labels", type=Path, required=True)
    args = p.parse_args(argv)
    try:
        build(args)
    except (PatchLayerError, ocitar.LayerError, pycompile.CompileError, OSError, KeyError, json.JSONDecodeError) as e:
        print(f"patch_layer.py: error: {e!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
