"""The patch layer of an engine image, and the per-patch labels, from a verified patch chain.

The layer holds only what the chain produced, so it is the same bytes on every base:
  <site>/sglang/...                    the patched files (and unchecked-hash .pyc for them, from
                                       patch_pyc.py: the CPU base ships unchecked .pyc of the
                                       stock files, which would otherwise shadow the patched sources)
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
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from tools.engine.patch_pyc import PYC_TAG
from tools.oci import ocitar
from tools.oci.layer import contents
from tools.oci.ocilayout import LayerDescriptor, write_canonical

LABEL_PREFIX = "ai.glm53.patch."


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


def _files(root: Path, prefix: str) -> list[ocitar.Entry]:
    """The files below `root` as 0644 entries under `prefix` (write_layer adds their parents).
    Bazel may stage them as symlinks: the entries hold what the links point at."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            if Path(dirpath, name).is_symlink():
                raise PatchLayerError(f"{Path(dirpath, name)} is a symlinked directory; the chain's outputs are plain files")
        for name in filenames:
            host = Path(dirpath, name)
            if not host.is_file():
                raise PatchLayerError(f"{host} is not a regular file; the chain's outputs are plain files")
            out.append(ocitar.Entry(f"{prefix}/{host.relative_to(root).as_posix()}", "file", ocitar.FILE_MODE, src=host))
    return out


def _check_pyc(patched: Path, pyc: Path) -> None:
    """Every patched .py has its .pyc: without it the base's stock bytecode would run."""
    for source in patched.rglob("*.py"):
        rel = source.relative_to(patched)
        if not (pyc / rel.parent / "__pycache__" / f"{rel.stem}.{PYC_TAG}.pyc").is_file():
            raise PatchLayerError(f"{pyc} holds no .pyc of {rel}; pass patch_pyc.py's output for {patched}")


def build(args: argparse.Namespace) -> None:
    declaration = json.loads(args.declaration.read_text())
    provenance = json.loads(args.provenance_json.read_text())
    table = patch_table(declaration)
    site = ocitar.normalise_path(args.site)
    recipe_dir = ocitar.normalise_path(args.recipe_dir)
    if not (args.patched / "sglang").is_dir():
        raise PatchLayerError(f"{args.patched} holds no sglang/ directory; is it a patch_chain's `patched` output?")
    _check_pyc(args.patched, args.pyc)
    # patches.json is an output too: the layer takes its bytes from there.
    write_canonical(args.out_patches, table)
    with tempfile.TemporaryDirectory(prefix="patch-layer-") as tmp:
        empty = Path(tmp, "whiteout")
        empty.write_bytes(b"")
        entries = _files(args.patched, site) + _files(args.pyc, site)
        for rel in provenance.get("deleted", []):
            d, _, name = f"{site}/{rel}".rpartition("/")
            entries.append(ocitar.Entry(f"{d}/.wh.{name}", "file", ocitar.FILE_MODE, src=empty))
            if name.endswith(".py"):
                entries.append(ocitar.Entry(f"{d}/__pycache__/.wh.{name[:-3]}.{PYC_TAG}.pyc", "file",
                                            ocitar.FILE_MODE, src=empty))
        recipe_files = [("series.json", args.declaration), ("PROVENANCE.json", args.provenance_json),
                        ("PROVENANCE", args.provenance_text), ("patches.json", args.out_patches)]
        tests = set()
        for item in args.test:
            src, _, short = item.partition("=")
            dst = test_destination(short)
            if dst in tests:
                raise PatchLayerError(f"two test files map to {recipe_dir}/{dst}")
            tests.add(dst)
            recipe_files.append((dst, Path(src)))
        entries += [ocitar.Entry(f"{recipe_dir}/{dst}", "file", ocitar.FILE_MODE, src=src) for dst, src in recipe_files]
        entries = ocitar.with_parents(entries)
        digest = ocitar.write_layer(entries, args.out)
        layer_contents = contents(entries)
    desc = LayerDescriptor.uncompressed(
        digest.digest, digest.size,
        f"patch layer: series {declaration.get('series')} ({len(table)} patches), recipe {args.recipe}")
    desc.write(args.out_descriptor)
    args.out_digest.write_text(digest.digest + "\n")
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
    p.add_argument("--pyc", type=Path, required=True, help="patch_pyc.py's output for --patched (sglang/.../__pycache__)")
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
    except (PatchLayerError, ocitar.LayerError, OSError, KeyError, json.JSONDecodeError) as e:
        print(f"patch_layer.py: error: {e!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
