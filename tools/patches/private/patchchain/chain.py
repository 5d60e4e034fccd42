"""Verifies and applies a resolved series chain in memory; nothing is written here.

Order of checks (each fails before any output exists):
  1. every patch file's sha256 against its declaration;
  2. every patch parses strictly and names only paths under the source root;
  3. every file a patch touches is declared for that patch (renames, deletes, binaries too);
  4. the declared hash chain: each before-hash equals the base (first touch) or the after-hash
     of the previous patch touching that file; identity pins equal the base;
  5. the patches apply in order, each to the tree the previous ones left, hunks exactly at the
     declared offsets; after each patch the touched files' sha256 equal the declared after;
  6. every touched Python file parses and compiles (as py_compile would).
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass

from .apply import apply_file
from .declaration import Chain, FileStep, PatchDecl
from .diffparse import FilePatch, ParsedPatch, parse_patch
from .errors import (
    BaseDriftError,
    CompileError,
    DeclarationError,
    PatchChecksumError,
    PatchOrderError,
    PinError,
    StepHashError,
    UndeclaredFileError,
    UndeclaredOperationError,
    Where,
)
from .layout import BaseTree

REHASH = "bazel run //patches:rehash -- {series}"


def sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _short(h: str | None) -> str:
    return "absent (null)" if h is None else h


@dataclass(frozen=True)
class Step:
    """What one patch did to one file (hashes as observed)."""

    patch: PatchDecl
    path: str
    before: str | None
    after: str | None
    renamed_from: str | None
    binary: bool


@dataclass(frozen=True)
class ChainResult:
    chain: Chain
    steps: tuple[Step, ...]
    base_hashes: dict[str, str | None]  # every touched or pinned path -> its base sha256
    final: dict[str, bytes | None]  # every touched path -> final bytes (None: deleted)


class _Tree:
    """The base overlaid with what the patches applied so far produced."""

    def __init__(self, base: BaseTree) -> None:
        self.base = base
        self.overlay: dict[str, bytes | None] = {}
        self.base_hashes: dict[str, str | None] = {}

    def base_read(self, path: str, where: Where) -> bytes | None:
        data = self.base.read(path, where)
        self.base_hashes[path] = sha256(data)
        return data

    def read(self, path: str, where: Where) -> bytes | None:
        if path in self.overlay:
            return self.overlay[path]
        return self.base_read(path, where)


def read_patch_files(chain: Chain, series_to_skip: str | None = None) -> dict[str, bytes]:
    """Reads every patch file and checks its sha256 (skipping the series being rehashed)."""
    out = {}
    for p in chain.patches:
        try:
            data = p.path.read_bytes()
        except FileNotFoundError:
            raise DeclarationError(
                f"{p.series}/series.json declares {p.file}, but {p.path} does not exist",
                Where(patch=p.name, fix=f"add the patch file or remove its entry from {p.series}/series.json"),
            ) from None
        if p.series != series_to_skip:
            actual = sha256(data)
            if actual != p.sha256:
                raise PatchChecksumError(
                    "patch file changed: its sha256 differs from the declaration",
                    Where(
                        patch=p.name,
                        file=str(p.path),
                        expected=f"sha256 {p.sha256} (patches/{p.series}/series.json)",
                        actual=f"sha256 {actual}",
                        fix=f"if the edit is intentional run `{REHASH.format(series=p.series)}` and review the "
                        f"printed change (add --write to record it); otherwise restore the file: "
                        f"`git checkout -- patches/{p.name}`",
                    ),
                )
        out[p.name] = data
    return out


def _check_section(p: PatchDecl, fp: FilePatch, step: FileStep | None) -> None:
    rehash = REHASH.format(series=p.series)
    where = Where(patch=p.name, file=fp.path, details=[f"patch line {fp.line_no}"])
    if fp.copy:
        where.fix = "express the copy as a new file (--- /dev/null) instead"
        raise UndeclaredOperationError("copy patches are not supported", where)
    modes = {m for m in (fp.old_mode, fp.new_mode) if m is not None}
    if modes - {"100644"} or (fp.old_mode and fp.new_mode and fp.old_mode != fp.new_mode):
        where.actual = f"mode {fp.old_mode} -> {fp.new_mode}"
        where.fix = "outputs are plain 0644 files: drop the mode change from the patch"
        raise UndeclaredOperationError("file mode changes are not supported", where)
    op = fp.op
    if op == "rename" and (step is None or step.renamed_from != fp.old_path):
        where.expected = f'an entry "{fp.new_path}" with "renamed_from": "{fp.old_path}"'
        where.actual = "no such rename in the declaration"
        where.fix = f"if the rename is intended run `{rehash}` and review/--write the declaration; otherwise regenerate the patch without it"
        raise UndeclaredOperationError(f"the patch renames {fp.old_path} -> {fp.new_path}, which is not declared", where)
    if op == "delete" and (step is None or step.after is not None):
        where.expected = '"after": null for this file (a declared delete)'
        where.actual = "no delete in the declaration" if step is None else f'"after": {step.after}'
        where.fix = f"if the delete is intended run `{rehash}` and review/--write the declaration; otherwise regenerate the patch without it"
        raise UndeclaredOperationError(f"the patch deletes {fp.path}, which is not declared", where)
    if fp.binary and (step is None or not step.binary):
        where.expected = '"binary": true on this file\'s entry'
        where.actual = "a binary patch section"
        where.fix = f"if the binary change is intended run `{rehash}` and review/--write the declaration; otherwise drop it from the patch"
        raise UndeclaredOperationError(f"the patch changes {fp.path} as binary, which is not declared", where)
    if step is None:
        where.fix = f"run `{rehash}` to add the file to the declaration (review the printed change, then --write), or drop it from the patch"
        raise UndeclaredFileError("the patch touches a file its declaration does not list", where)
    mismatch = None
    if step.renamed_from and op != "rename":
        mismatch = f"declared as renamed from {step.renamed_from}, but the patch does not rename it"
    elif step.after is None and op != "delete":
        mismatch = 'declared "after": null (a delete), but the patch does not delete it'
    elif step.before is None and op != "create":
        mismatch = 'declared "before": null (a new file), but the patch edits an existing file'
    elif step.before is not None and op == "create":
        mismatch = "the patch creates the file (--- /dev/null), but the declaration gives a before-hash"
    elif step.binary and not fp.binary:
        mismatch = 'declared "binary": true, but the patch changes it as text'
    if mismatch:
        where.fix = f"run `{rehash}` and review the printed change"
        raise UndeclaredOperationError(f"declaration and patch disagree: {mismatch}", where)


def _match_sections(p: PatchDecl, parsed: ParsedPatch) -> list[tuple[FilePatch, FileStep]]:
    declared = {s.path: s for s in p.files or ()}
    pairs = []
    for fp in parsed.files:
        step = declared.pop(fp.path, None)
        _check_section(p, fp, step)
        pairs.append((fp, step))
    if declared:
        path = sorted(declared)[0]
        raise UndeclaredFileError(
            "the declaration lists a file the patch does not touch",
            Where(patch=p.name, file=path, fix=f"remove the entry, or run `{REHASH.format(series=p.series)}`"),
        )
    return sorted(pairs, key=lambda pair: pair[0].path)


def _check_declared_chain(chain: Chain, tree: _Tree) -> None:
    """Static walk of the declared hashes against the base, before anything is applied."""
    current: dict[str, str | None] = {}
    touched_by: dict[str, PatchDecl] = {}

    def now(path: str) -> str | None:
        if path not in current:
            current[path] = sha256(tree.base_read(path, Where(file=path)))
        return current[path]

    for i, p in enumerate(chain.patches):
        for s in p.files or ():
            src = s.renamed_from or s.path
            actual = now(src)
            if actual == s.before and (s.renamed_from is None or now(s.path) is None):
                continue
            rehash = REHASH.format(series=p.series)
            where = Where(patch=p.name, file=src, expected=f"sha256 {_short(s.before)}", actual=f"sha256 {_short(actual)}")
            later = next(
                (q for q in chain.patches[i + 1:] for t in q.files or () if t.path == src and t.after == s.before and s.before is not None),
                None,
            )
            if later is not None:
                where.details.append(f"{p.name} expects the file as {later.name} leaves it, and {later.name} comes later")
                where.fix = f"put {later.name} before {p.name} in the series' \"patches\" list (application order)"
                raise PatchOrderError("patches are out of order", where)
            if src not in touched_by:
                where.details.append("the file in the base differs from what the series was written against")
                where.fix = (
                    "if the base changed on purpose, regenerate the patches against it and run "
                    f"`{rehash}`; otherwise restore the base (check the pin of @sglang_src_0_5_19)"
                )
                raise BaseDriftError("base file drifted: its sha256 differs from the declared before-hash", where)
            prev = touched_by[src]
            where.details.append(f"the declared after-hash of the previous patch touching it ({prev.name}) is {_short(actual)}")
            where.fix = f"the declared hash chain is broken; run `{rehash}` and review the printed change"
            raise StepHashError("declared before-hash does not continue the hash chain", where)
        for s in p.files or ():
            if s.renamed_from:
                current[s.renamed_from] = None
                touched_by[s.renamed_from] = p
            current[s.path] = s.after
            touched_by[s.path] = p

    for pin in chain.pins:
        if pin.path in touched_by:
            raise PinError(
                "an identity-pinned file is touched by a patch",
                Where(patch=touched_by[pin.path].name, file=pin.path,
                      fix=f"remove the pin from patches/{pin.series}/series.json (patched files are hash-chained already)"),
            )
        actual = sha256(tree.base_read(pin.path, Where(file=pin.path)))
        if actual != pin.sha256:
            raise PinError(
                "identity-pinned base file drifted",
                Where(file=pin.path, expected=f"sha256 {_short(pin.sha256)} (pinned by {pin.series}: {pin.reason})",
                      actual=f"sha256 {_short(actual)}",
                      fix="the tests rely on this file as pinned: check the base, and if the change is intended "
                      f"re-pin it with `{REHASH.format(series=pin.series)}`"),
            )


def _compile(path: str, data: bytes, last: PatchDecl) -> None:
    """Compiles as py_compile would (one parse and code generation); only a failure is parsed
    again, to tell a syntax error from one the compiler finds (e.g. `return` outside a function)."""
    where = Where(patch=last.name, file=path, fix="fix the patch so the file is valid Python; then "
                  f"`{REHASH.format(series=last.series)}`")
    try:
        compile(data, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        try:
            ast.parse(data, filename=path)
        except (SyntaxError, ValueError) as parse_error:
            where.details.append(_compile_detail(parse_error))
            raise CompileError("patched file does not parse", where) from None
        where.details.append(_compile_detail(e))
        raise CompileError("patched file does not compile", where) from None


def _compile_detail(e: Exception) -> str:
    return f"line {e.lineno}: {e.msg}" if isinstance(e, SyntaxError) else str(e)


def apply_chain(
    chain: Chain,
    base: BaseTree,
    patch_bytes: dict[str, bytes],
    *,
    observe: str | None = None,
) -> ChainResult:
    """Applies the chain; `observe` names a series whose hashes are recorded, not checked (rehash)."""
    parsed = {p.name: parse_patch(p.name, patch_bytes[p.name]) for p in chain.patches}
    tree = _Tree(base)
    if observe is None:
        sections = {p.name: _match_sections(p, parsed[p.name]) for p in chain.patches}
        _check_declared_chain(chain, tree)
    else:
        sections = {}
        for p in chain.patches:
            if p.series == observe:
                declared = {s.path: s for s in p.files or ()}
                sections[p.name] = sorted(((fp, declared.get(fp.path)) for fp in parsed[p.name].files), key=lambda x: x[0].path)
            else:
                sections[p.name] = _match_sections(p, parsed[p.name])
        _check_declared_chain(Chain(chain.series, chain.base, tuple(p for p in chain.patches if p.series != observe), ()), tree)

    steps: list[Step] = []
    last_patch: dict[str, PatchDecl] = {}
    for p in chain.patches:
        rehash = REHASH.format(series=p.series)
        results: dict[str, bytes | None] = {}
        for fp, decl in sections[p.name]:
            src = fp.old_path if fp.old_path is not None else fp.path
            where = Where(patch=p.name, file=fp.path)
            content = tree.read(src, where) if fp.old_path is not None else tree.read(fp.path, where)
            if fp.op == "create" and content is not None:
                raise StepHashError(
                    "the patch creates a file that already exists",
                    Where(patch=p.name, file=fp.path, expected="absent (null)", actual=f"sha256 {sha256(content)}",
                          fix=f"regenerate the patch against the tree the previous patches leave; then `{rehash}`"),
                )
            if fp.op != "create" and content is None:
                raise StepHashError(
                    "the patch edits a file that does not exist at this point of the series",
                    Where(patch=p.name, file=src, expected="an existing file", actual="absent",
                          fix=f"check the series order and the base; then `{rehash}`"),
                )
            offsets = dict(decl.offsets) if decl else {}
            new = apply_file(content, fp, offsets, p.name, f"`{rehash}`")
            if fp.op == "rename":
                results[fp.old_path] = None  # type: ignore[index]
            results[fp.path] = new
            steps.append(Step(p, fp.path, sha256(content), sha256(new), fp.old_path if fp.op == "rename" else None, fp.binary))
            if p.series != observe and decl is not None and sha256(new) != decl.after:
                raise StepHashError(
                    "after applying the patch, the file's sha256 differs from the declared after-hash",
                    Where(patch=p.name, file=fp.path, expected=f"sha256 {_short(decl.after)}",
                          actual=f"sha256 {_short(sha256(new))}",
                          fix=f"if the patch was edited on purpose run `{rehash}` and review the printed change"),
                )
        tree.overlay.update(results)
        for path in results:
            last_patch[path] = p

    final = dict(sorted(tree.overlay.items()))
    for path, data in final.items():
        if data is not None and path.endswith(".py"):
            _compile(path, data, last_patch[path])
    return ChainResult(chain, tuple(steps), dict(sorted(tree.base_hashes.items())), final)
