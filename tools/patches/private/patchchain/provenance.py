"""PROVENANCE.json and the readable PROVENANCE, generated from the verified chain only."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path
from typing import Any

from . import VERSION
from .chain import ChainResult
from .declaration import patch_json
from .layout import package_path
from .packages import Packages

APPLIER = "patchchain (tools/patches)"


# The applier's entry point: its modules are this one and what it imports from the package.
_APPLIER_ENTRY = "apply_main"


def applier_modules() -> list[Path]:
    """The package's modules the applier runs: the import closure of apply_main (relative
    imports, read with ast), so the bump check or rehash, which apply nothing, are not in it."""
    here = Path(__file__).parent
    seen: set[str] = set()
    todo = ["__init__", _APPLIER_ENTRY]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for node in ast.walk(ast.parse((here / f"{name}.py").read_bytes())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    todo.append(node.module.split(".")[0])
                else:  # from . import x
                    todo.extend(a.name for a in node.names if (here / f"{a.name}.py").is_file())
    return sorted(here / f"{name}.py" for name in seen)


def applier_sources_sha256() -> str:
    """sha256 over the applier's own modules (name, NUL, bytes; sorted): which code applied it."""
    h = hashlib.sha256()
    for module in applier_modules():
        h.update(module.name.encode() + b"\0" + module.read_bytes())
    return h.hexdigest()


def provenance_json(result: ChainResult, packages: Packages | None = None) -> dict[str, Any]:
    packages = packages or Packages({}, {})
    chain = result.chain
    patches = []
    for i, p in enumerate(chain.patches, start=1):
        entry = {"index": i, **patch_json(p, with_location=True)}
        patches.append(entry)
    files: dict[str, Any] = {}

    def link(path: str, base: str | None) -> list[dict[str, Any]]:
        entry = files.setdefault(path, {"output": package_path(path), "chain": [{"by": "base", "sha256": base}]})
        return entry["chain"]

    for step in result.steps:
        if step.renamed_from:
            link(step.renamed_from, step.before).append({"by": step.patch.name, "sha256": None, "renamed_to": step.path})
            link(step.path, None).append({"by": step.patch.name, "sha256": step.after, "renamed_from": step.renamed_from})
        else:
            link(step.path, step.before).append({"by": step.patch.name, "sha256": step.after})
    outputs = {package_path(path): chain_entry["chain"][-1]["sha256"] for path, chain_entry in sorted(files.items())
               if chain_entry["chain"][-1]["sha256"] is not None}
    shipped = {name: {"sha256": digest, "files": packages.file_hashes(name)} for name, digest in packages.digests.items()}
    for package in shipped.values():
        outputs.update(package["files"])
    outputs = dict(sorted(outputs.items()))
    doc = {
        "schema": 1,
        "series": chain.name,
        "chain": [d.name for d in chain.series],
        "applier": {"name": APPLIER, "version": VERSION, "sources_sha256": applier_sources_sha256()},
        "base": {"wheel": chain.base.wheel, "sha256": chain.base.sha256},
        "patches": patches,
        "files": dict(sorted(files.items())),
        "pins": {p.path: {"series": p.series, "sha256": p.sha256, "reason": p.reason} for p in sorted(chain.pins, key=lambda p: p.path)},
        "outputs": outputs,
        "deleted": sorted(package_path(path) for path, f in files.items() if f["chain"][-1]["sha256"] is None),
    }
    if shipped:
        doc["packages"] = shipped
    return doc


def provenance_text(doc: dict[str, Any]) -> str:
    lines = [
        f"series: {doc['series']} (chain: {' -> '.join(doc['chain'])})",
        f"base: {doc['base']['wheel']} sha256:{doc['base']['sha256']}",
        f"applier: {doc['applier']['name']} {doc['applier']['version']} (sources sha256:{doc['applier']['sources_sha256']})",
        f"patches: {len(doc['patches'])}, applied in this order, each to the tree the previous ones left",
        "",
    ]
    for p in doc["patches"]:
        lines.append(f"patch {p['index']}: patches/{p['series']}/{p['file']}")
        lines.append(f"  sha256: {p['sha256']}")
        o = p["origin"]
        origin = f"new here ({o['date']})" if o["kind"] == "new-here" else "upstream PR, byte-identical"
        if "upstream" in o:
            u = o["upstream"]
            ref = f"{u['repository']}#{u['pr']} (head {u['head']})"
            origin += f", implements the intent of {ref}" if o["kind"] == "new-here" else f": {ref}"
        if "note" in o:
            origin += f"; {o['note']}"
        lines.append(f"  origin: {origin}")
        lines.append(f"  scope: {', '.join(p['scope'])}")
        a = p["activation"]
        act = {"unconditional": "unconditional", "opt-in": f"opt-in: {a.get('env')}={a.get('value')}",
               "on-by-default": f"on by default (off with {a.get('disable')})"}[a["kind"]]
        if a.get("settings"):
            act += "; settings: " + ", ".join(f"{k} (default {v})" for k, v in a["settings"].items())
        lines.append(f"  activation: {act}")
        for path, f in p["files"].items():
            extra = f" (renamed from {f['renamed_from']})" if "renamed_from" in f else ""
            lines.append(f"  {path}{extra}: {f['before'] or 'new'} -> {f['after'] or 'deleted'}")
        lines.append("")
    lines.append("hash chain per file (verified after every patch):")
    for path, f in doc["files"].items():
        lines.append(f"  {path} -> {f['output']}")
        for link in f["chain"]:
            lines.append(f"    {link['by']}: {link['sha256'] or 'absent'}")
    lines.append("")
    lines.append("identity pins (unchanged by the series, verified):")
    for path, pin in doc["pins"].items() or ():
        lines.append(f"  {path}: {pin['sha256']} ({pin['series']}: {pin['reason']})")
    if not doc["pins"]:
        lines.append("  (none)")
    lines.append("")
    for name, package in doc.get("packages", {}).items():
        lines.append(f"package {name} (engine/{name}), shipped with the series: sha256:{package['sha256']}")
        lines.append("")
    lines.append("outputs (package-relative):")
    for path, digest in doc["outputs"].items():
        lines.append(f"  {digest}  {path}")
    for path in doc["deleted"]:
        lines.append(f"  deleted  {path}")
    return "\n".join(lines) + "\n"
