"""The bump check's view of a shipped package: which SGLang names it uses exist on a candidate.

A package a series ships (series.json `packages`, e.g. engine/glm53_offload) states the SGLang
names it uses per supported release in its `sglang_support.py` (USES: version -> module ->
names) and refuses to start when one is missing. The bump check reads that table for the
series' own release and looks each name up in the candidate's source, statically (the module's
top-level bindings, read with `ast`; nothing of SGLang is imported):

  upstream   the candidate's module binds the name;
  hooks      it does not, but a patch of the series adds a binding of it to that module (the
             hook carrying it must be re-anchored, as the bump check's patch rows say);
  missing    neither: the package needs a change, not only the hooks.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from .diffparse import parse_patch
from .errors import DeclarationError, Where
from .layout import GIT_SOURCE_ROOT, BaseTree

UPSTREAM = "upstream"
HOOKS = "hooks"
MISSING = "missing"


@dataclass(frozen=True)
class NameUse:
    module: str
    name: str
    state: str  # UPSTREAM, HOOKS or MISSING
    patch: str | None = None  # the patch adding it, for HOOKS


def load_uses(path: Path, version: str) -> dict[str, tuple[str, ...]]:
    """USES[version] of a package's sglang_support.py (stdlib only at import, by its contract)."""
    # Loaded as a module of its own, not registered in sys.modules: only its table is read.
    spec = importlib.util.spec_from_file_location("_package_support", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        table = module.USES
    except Exception as e:  # noqa: BLE001 -- any failure to read the table is the same bad input
        raise DeclarationError(f"{path}: cannot read its USES table: {e!r}",
                               Where(fix="keep sglang_support.py importable without SGLang")) from None
    if version not in table:
        raise DeclarationError(
            f"{path}: USES has no row for SGLang {version} (rows: {', '.join(sorted(table))})",
            Where(fix=f"add the {version!r} row the series' hooks are written against"))
    return dict(table[version])


def module_path(module: str) -> tuple[str, str]:
    """sglang.srt.x -> (python/sglang/srt/x.py, python/sglang/srt/x/__init__.py)."""
    rel = module.split(".", 1)[1].replace(".", "/") if "." in module else ""
    base = f"{GIT_SOURCE_ROOT}/{rel}" if rel else GIT_SOURCE_ROOT
    return f"{base}.py", f"{base}/__init__.py"


def top_level_names(source: bytes) -> set[str]:
    """Names a module binds at its top level, also inside top-level if/try blocks."""
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)

    visit(ast.parse(source).body)
    return names


_BINDING = r"^(?:(?:async\s+)?def|class)\s+{name}\b|^{name}\s*[:=]"


def _added_lines(patches: dict[str, bytes]) -> dict[tuple[str, str], list[str]]:
    """(patch, file path) -> the lines that patch adds to that file, in patch order."""
    added: dict[tuple[str, str], list[str]] = {}
    for patch_name, data in patches.items():
        for fp in parse_patch(patch_name, data).files:
            lines = added.setdefault((patch_name, fp.path), [])
            for hunk in fp.hunks:
                old = set(hunk.old_lines)
                lines += [line.decode("utf-8", errors="replace") for line in hunk.new_lines if line not in old]
    return added


def _adding_patch(added: dict[tuple[str, str], list[str]], paths: tuple[str, ...], name: str) -> str | None:
    """The first patch whose added lines bind `name` at the top level of one of `paths`."""
    pattern = re.compile(_BINDING.format(name=re.escape(name)))
    for (patch_name, path), lines in added.items():
        if path in paths and any(pattern.match(line) for line in lines):
            return patch_name
    return None


def check_uses(uses: dict[str, tuple[str, ...]], tree: BaseTree, patches: dict[str, bytes]) -> list[NameUse]:
    """Each (module, name) of `uses`, looked up in the candidate `tree`, then in `patches`."""
    out = []
    added = _added_lines(patches)
    for module, names in sorted(uses.items()):
        paths = module_path(module)
        source = None
        for path in paths:
            source = tree.read(path, Where(file=path))
            if source is not None:
                break
        bound = top_level_names(source) if source is not None else set()
        for name in names:
            if name in bound:
                out.append(NameUse(module, name, UPSTREAM))
                continue
            patch = _adding_patch(added, paths, name)
            out.append(NameUse(module, name, HOOKS if patch else MISSING, patch))
    return out
