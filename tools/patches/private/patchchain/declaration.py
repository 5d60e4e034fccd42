"""Series declarations (patches/<series>/series.json): typed, validated when loaded.

A declaration lists its own patches in application order and extends at most one parent series;
an extension never repeats its parent's entries. Every error names the file and the key.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import DeclarationError, PathOutsideRootError, Where
from .layout import check_manifest_path

DECLARATION_NAME = "series.json"
SCHEMA = 1
_SHA = re.compile(r"[0-9a-f]{64}")
_SERIES = re.compile(r"[a-z0-9][a-z0-9_-]*")
_PATCH_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\.(diff|patch)")
_PACKAGE = re.compile(r"[a-z][a-z0-9_]*")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_HEAD = re.compile(r"[0-9a-f]{7,40}")
_ENV = re.compile(r"[A-Z][A-Z0-9_]*")
_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
ORIGIN_KINDS = ("new-here", "upstream-pr")
ACTIVATION_KINDS = ("unconditional", "opt-in", "on-by-default")


@dataclass(frozen=True)
class UpstreamRef:
    repository: str
    pr: int
    head: str


@dataclass(frozen=True)
class Origin:
    kind: str  # "new-here" | "upstream-pr" (a byte-identical copy of the PR's diff)
    date: str | None = None  # new-here
    upstream: UpstreamRef | None = None  # upstream-pr: the copied PR; new-here: the PR whose intent it implements
    note: str | None = None

    def describe(self) -> str:
        if self.kind == "upstream-pr":
            u = self.upstream
            text = f"upstream {u.repository}#{u.pr} (head {u.head}), byte-identical"
        else:
            text = f"new here ({self.date})"
            if self.upstream:
                u = self.upstream
                text += f", implements the intent of {u.repository}#{u.pr} (head {u.head})"
        return text + (f"; {self.note}" if self.note else "")


@dataclass(frozen=True)
class Activation:
    kind: str  # "unconditional" | "opt-in" | "on-by-default"
    env: str | None = None  # opt-in: the variable that turns it on
    value: str | None = None  # opt-in: the value that turns it on
    settings: tuple[tuple[str, str], ...] = ()  # further variables and their defaults
    disable: str | None = None  # on-by-default: how to turn it off

    def describe(self) -> str:
        if self.kind == "unconditional":
            text = "unconditional"
        elif self.kind == "opt-in":
            text = f"opt-in: {self.env}={self.value}"
        else:
            text = "on by default" + (f" (off with {self.disable})" if self.disable else "")
        if self.settings:
            text += "; settings: " + ", ".join(f"{k} (default {v})" for k, v in self.settings)
        return text


@dataclass(frozen=True)
class FileStep:
    """One file a patch touches: its sha256 just before and just after that patch."""

    path: str
    before: str | None  # None: the patch creates the file
    after: str | None  # None: the patch deletes the file
    renamed_from: str | None = None
    binary: bool = False
    offsets: tuple[tuple[int, int], ...] = ()  # (hunk number, expected line offset)


@dataclass(frozen=True)
class PatchDecl:
    series: str
    file: str
    path: Path  # the patch file on disk
    sha256: str | None  # None only while rehashing
    origin: Origin
    scope: tuple[str, ...]
    activation: Activation
    files: tuple[FileStep, ...] | None  # None only while rehashing

    @property
    def name(self) -> str:
        return f"{self.series}/{self.file}"


@dataclass(frozen=True)
class Pin:
    series: str
    path: str
    sha256: str | None  # None only while rehashing
    reason: str


@dataclass(frozen=True)
class BasePin:
    wheel: str
    sha256: str


@dataclass(frozen=True)
class SeriesDecl:
    name: str
    path: Path
    description: str
    extends: str | None
    base: BasePin | None  # only the root series declares it
    patches: tuple[PatchDecl, ...]
    pins: tuple[Pin, ...]
    packages: tuple[str, ...] = ()  # Python packages the series' hooks call, shipped with it


@dataclass(frozen=True)
class Chain:
    """A series resolved with its ancestors, root first."""

    series: tuple[SeriesDecl, ...]
    base: BasePin
    patches: tuple[PatchDecl, ...] = field(default=())
    pins: tuple[Pin, ...] = field(default=())
    packages: tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        return self.series[-1].name


class _Reader:
    """Typed access to a JSON value that reports `file: key: problem` on any mistake."""

    def __init__(self, path: Path, fix: str) -> None:
        self.path = path
        self.fix = fix

    def fail(self, key: str, problem: str) -> DeclarationError:
        return DeclarationError(
            f"{self.path}: {key}: {problem}",
            Where(file=str(self.path), fix=self.fix),
        )

    def obj(self, value: Any, key: str, required: set[str], optional: set[str] = frozenset()) -> dict:
        if not isinstance(value, dict):
            raise self.fail(key, f"expected an object, got {type(value).__name__}")
        missing = sorted(required - value.keys())
        if missing:
            raise self.fail(key, f"missing key(s) {', '.join(missing)}")
        unknown = sorted(value.keys() - required - optional)
        if unknown:
            raise self.fail(key, f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(required | optional))}")
        return value

    def string(self, value: Any, key: str, pattern: re.Pattern | None = None, what: str = "") -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"expected a non-empty string, got {json.dumps(value)}")
        if pattern is not None and not pattern.fullmatch(value):
            raise self.fail(key, f"expected {what}, got {json.dumps(value)}")
        return value

    def sha(self, value: Any, key: str, nullable: bool) -> str | None:
        if value is None and nullable:
            return None
        return self.string(value, key, _SHA, "64 lowercase hex characters (sha256)" + (" or null" if nullable else ""))


def _load_json(path: Path) -> Any:
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
        keys = [k for k, _ in pairs]
        dup = sorted({k for k in keys if keys.count(k) > 1})
        if dup:
            raise DeclarationError(f"{path}: duplicate key(s) {', '.join(dup)}", Where(file=str(path), fix="keep one of each key"))
        return dict(pairs)

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DeclarationError(
            f"{path}: series declaration not found",
            Where(file=str(path), fix="create it (see patches/README.md) or fix the series name / `extends`"),
        ) from None
    try:
        return json.loads(text, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as e:
        raise DeclarationError(
            f"{path}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}", Where(file=str(path), fix="fix the JSON syntax")
        ) from None


def _origin(r: _Reader, v: Any, key: str) -> Origin:
    kind = r.string(r.obj(v, key, {"kind"}, {"date", "upstream", "note"}).get("kind"), f"{key}.kind")
    if kind not in ORIGIN_KINDS:
        raise r.fail(f"{key}.kind", f"expected one of {', '.join(ORIGIN_KINDS)}, got {json.dumps(kind)}")
    upstream = None
    if v.get("upstream") is not None:
        u = r.obj(v["upstream"], f"{key}.upstream", {"repository", "pr", "head"})
        if not isinstance(u["pr"], int) or isinstance(u["pr"], bool) or u["pr"] <= 0:
            raise r.fail(f"{key}.upstream.pr", f"expected a positive PR number, got {json.dumps(u['pr'])}")
        upstream = UpstreamRef(
            r.string(u["repository"], f"{key}.upstream.repository", _REPO, "owner/name"),
            u["pr"],
            r.string(u["head"], f"{key}.upstream.head", _HEAD, "a 7-40 hex commit"),
        )
    note = r.string(v["note"], f"{key}.note") if "note" in v else None
    if kind == "new-here":
        date = r.string(v.get("date"), f"{key}.date", _DATE, "YYYY-MM-DD (when it was written here)")
        return Origin(kind, date=date, upstream=upstream, note=note)
    if upstream is None:
        raise r.fail(f"{key}.upstream", "an upstream-pr origin names the PR (repository, pr, head)")
    if "date" in v:
        raise r.fail(f"{key}.date", "only a new-here origin carries a date")
    return Origin(kind, upstream=upstream, note=note)


def _activation(r: _Reader, v: Any, key: str) -> Activation:
    v = r.obj(v, key, {"kind"}, {"env", "value", "settings", "disable"})
    kind = r.string(v["kind"], f"{key}.kind")
    if kind not in ACTIVATION_KINDS:
        raise r.fail(f"{key}.kind", f"expected one of {', '.join(ACTIVATION_KINDS)}, got {json.dumps(kind)}")
    settings_raw = v.get("settings", {})
    if not isinstance(settings_raw, dict):
        raise r.fail(f"{key}.settings", "expected an object {ENV_VAR: default}")
    settings = tuple(
        (r.string(k, f"{key}.settings", _ENV, "an environment variable name"), r.string(d, f"{key}.settings.{k}"))
        for k, d in sorted(settings_raw.items())
    )
    if kind == "opt-in":
        env = r.string(v.get("env"), f"{key}.env", _ENV, "the environment variable that turns it on")
        value = r.string(v.get("value"), f"{key}.value")
        if "disable" in v:
            raise r.fail(f"{key}.disable", "an opt-in patch is off unless enabled")
        return Activation(kind, env=env, value=value, settings=settings)
    for k in ("env", "value"):
        if k in v:
            raise r.fail(f"{key}.{k}", f"only an opt-in activation names {k}")
    if kind == "unconditional":
        if settings or "disable" in v:
            raise r.fail(key, "an unconditional patch has no settings and cannot be disabled")
        return Activation(kind)
    disable = r.string(v.get("disable"), f"{key}.disable", what="how to turn it off, e.g. VAR=0")
    return Activation(kind, settings=settings, disable=disable)


def _files(r: _Reader, v: Any, key: str) -> tuple[FileStep, ...]:
    if not isinstance(v, dict) or not v:
        raise r.fail(key, "expected a non-empty object {path: {before, after}}")
    steps = []
    for path, entry in sorted(v.items()):
        k = f'{key}["{path}"]'
        _check_path(r, path, k)
        e = r.obj(entry, k, {"before", "after"}, {"renamed_from", "binary", "offsets"})
        before = r.sha(e["before"], f"{k}.before", nullable=True)
        after = r.sha(e["after"], f"{k}.after", nullable=True)
        if before is None and after is None:
            raise r.fail(k, "before and after cannot both be null")
        renamed_from = None
        if "renamed_from" in e:
            renamed_from = r.string(e["renamed_from"], f"{k}.renamed_from")
            _check_path(r, renamed_from, f"{k}.renamed_from")
        binary = e.get("binary", False)
        if not isinstance(binary, bool):
            raise r.fail(f"{k}.binary", "expected true or false")
        offsets_raw = e.get("offsets", {})
        if not isinstance(offsets_raw, dict):
            raise r.fail(f"{k}.offsets", 'expected an object {"<hunk number>": <line offset>}')
        offsets = []
        for hunk, off in offsets_raw.items():
            if not hunk.isdigit() or int(hunk) < 1 or not isinstance(off, int) or isinstance(off, bool) or off == 0:
                raise r.fail(f"{k}.offsets", f'expected {{"<hunk number>": <non-zero int>}}, got "{hunk}": {json.dumps(off)}')
            offsets.append((int(hunk), off))
        steps.append(FileStep(path, before, after, renamed_from, binary, tuple(sorted(offsets))))
    return tuple(steps)


def _check_path(r: _Reader, path: str, key: str) -> None:
    try:
        check_manifest_path(path, Where())
    except PathOutsideRootError as e:
        raise r.fail(key, e.summary) from None


def load_series(path: Path, *, rehashing: bool = False) -> SeriesDecl:
    """Loads and validates one declaration. `rehashing` lets hashes be missing (rehash fills them)."""
    name = path.parent.name
    fix = "fix the declaration (see patches/README.md); after editing patches run " f"`bazel run //patches:rehash -- {name}`"
    r = _Reader(path, fix)
    if not _SERIES.fullmatch(name):
        raise r.fail("(directory)", f"series directory name {json.dumps(name)} must match {_SERIES.pattern}")
    top = r.obj(_load_json(path), "(top level)", {"schema", "patches"}, {"description", "extends", "base", "pins", "packages"})
    if top["schema"] != SCHEMA:
        raise r.fail("schema", f"expected {SCHEMA}, got {json.dumps(top['schema'])}")
    description = r.string(top["description"], "description") if "description" in top else ""
    extends = top.get("extends")
    if extends is not None:
        extends = r.string(extends, "extends", _SERIES, "a series name (a sibling directory)")
        if "base" in top:
            raise r.fail("base", f"only the root series pins the base; {name} inherits it from {extends}")
        base = None
    else:
        b = r.obj(top.get("base"), "base", {"wheel", "sha256"})
        base = BasePin(r.string(b["wheel"], "base.wheel"), r.sha(b["sha256"], "base.sha256", nullable=False))
    if not isinstance(top["patches"], list):
        raise r.fail("patches", "expected a list of patch entries in application order")
    patches = []
    for i, p in enumerate(top["patches"]):
        k = f"patches[{i}]"
        required = {"file", "origin", "scope", "activation"} | (set() if rehashing else {"sha256", "files"})
        p = r.obj(p, k, required, {"sha256", "files"})
        file = r.string(p["file"], f"{k}.file", _PATCH_FILE, "a file name in this directory ending in .diff or .patch")
        sha = r.sha(p.get("sha256"), f"{k}.sha256", nullable=rehashing)
        scope = p["scope"]
        if not isinstance(scope, list) or not scope:
            raise r.fail(f"{k}.scope", "expected a non-empty list of the functions/classes the patch touches")
        scope = tuple(r.string(s, f"{k}.scope[{j}]") for j, s in enumerate(scope))
        files = None
        if p.get("files") is not None or not rehashing:
            files = _files(r, p["files"], f"{k}.files")
        patches.append(
            PatchDecl(name, file, path.parent / file, sha, _origin(r, p["origin"], f"{k}.origin"), scope,
                      _activation(r, p["activation"], f"{k}.activation"), files)
        )
    seen = [p.file for p in patches]
    for f in seen:
        if seen.count(f) > 1:
            raise r.fail("patches", f"{f} is listed twice")
    pins_raw = top.get("pins", {})
    if not isinstance(pins_raw, dict):
        raise r.fail("pins", "expected an object {path: {sha256, reason}}")
    pins = []
    for pin_path, entry in sorted(pins_raw.items()):
        k = f'pins["{pin_path}"]'
        _check_path(r, pin_path, k)
        e = r.obj(entry, k, {"sha256", "reason"})
        pins.append(Pin(name, pin_path, r.sha(e["sha256"], f"{k}.sha256", nullable=rehashing), r.string(e["reason"], f"{k}.reason")))
    packages_raw = top.get("packages", [])
    if not isinstance(packages_raw, list):
        raise r.fail("packages", "expected a list of Python package names (engine/<name>)")
    packages = tuple(
        r.string(v, f"packages[{i}]", _PACKAGE, "a Python package name under engine/") for i, v in enumerate(packages_raw)
    )
    if len(set(packages)) != len(packages):
        raise r.fail("packages", "a package is listed twice")
    return SeriesDecl(name, path, description, extends, base, tuple(patches), tuple(pins), packages)


def load_chain(patches_dir: Path, series: str, *, rehashing: str | None = None) -> Chain:
    """Loads `series` and its ancestors from `patches_dir/<name>/series.json`.

    `rehashing` names the one series whose hashes may be missing (the one being rehashed).
    """
    decls: list[SeriesDecl] = []
    name: str | None = series
    while name is not None:
        if any(d.name == name for d in decls):
            raise DeclarationError(
                f"{decls[-1].path}: extends: the chain {' -> '.join(d.name for d in decls)} -> {name} loops",
                Where(fix="make `extends` name an ancestor, never a descendant"),
            )
        decl = load_series(patches_dir / name / DECLARATION_NAME, rehashing=(name == rehashing))
        decls.append(decl)
        name = decl.extends
    decls.reverse()
    owner_of_patch: dict[str, str] = {}
    owner_of_pin: dict[str, str] = {}
    for d in decls:
        for p in d.patches:
            if p.file in owner_of_patch:
                raise DeclarationError(
                    f"{d.path}: patches: {p.file} is already declared by ancestor series {owner_of_patch[p.file]}; "
                    "an extension never copies its parent's entries",
                    Where(file=str(d.path), fix=f"remove the entry from {d.path}"),
                )
            owner_of_patch[p.file] = d.name
        for pin in d.pins:
            if pin.path in owner_of_pin:
                raise DeclarationError(
                    f'{d.path}: pins["{pin.path}"]: already pinned by ancestor series {owner_of_pin[pin.path]}; '
                    "an extension never copies its parent's entries",
                    Where(file=str(d.path), fix=f"remove the pin from {d.path}"),
                )
            owner_of_pin[pin.path] = d.name
    assert decls[0].base is not None
    return Chain(
        series=tuple(decls),
        base=decls[0].base,
        patches=tuple(p for d in decls for p in d.patches),
        pins=tuple(pin for d in decls for pin in d.pins),
        packages=_chain_packages(decls),
    )


def _chain_packages(decls: list[SeriesDecl]) -> tuple[str, ...]:
    owner: dict[str, str] = {}
    for d in decls:
        for package in d.packages:
            if package in owner:
                raise DeclarationError(
                    f"{d.path}: packages: {package} is already declared by ancestor series {owner[package]}; "
                    "an extension never copies its parent's entries",
                    Where(file=str(d.path), fix=f"remove it from {d.path}"),
                )
            owner[package] = d.name
    return tuple(owner)


def _origin_json(o: Origin) -> dict:
    out: dict[str, Any] = {"kind": o.kind}
    if o.date:
        out["date"] = o.date
    if o.upstream:
        out["upstream"] = {"repository": o.upstream.repository, "pr": o.upstream.pr, "head": o.upstream.head}
    if o.note:
        out["note"] = o.note
    return out


def _activation_json(a: Activation) -> dict:
    out: dict[str, Any] = {"kind": a.kind}
    if a.env:
        out["env"] = a.env
        out["value"] = a.value
    if a.settings:
        out["settings"] = dict(a.settings)
    if a.disable:
        out["disable"] = a.disable
    return out


def file_step_json(s: FileStep) -> dict:
    out: dict[str, Any] = {"before": s.before, "after": s.after}
    if s.renamed_from:
        out["renamed_from"] = s.renamed_from
    if s.binary:
        out["binary"] = True
    if s.offsets:
        out["offsets"] = {str(h): o for h, o in s.offsets}
    return out


def patch_json(p: PatchDecl, *, with_location: bool = False) -> dict:
    out: dict[str, Any] = {"file": p.file}
    if with_location:
        out["series"] = p.series
    out["sha256"] = p.sha256
    out["origin"] = _origin_json(p.origin)
    out["scope"] = list(p.scope)
    out["activation"] = _activation_json(p.activation)
    out["files"] = {s.path: file_step_json(s) for s in p.files or ()}
    return out


def series_json(d: SeriesDecl) -> dict:
    out: dict[str, Any] = {"schema": SCHEMA}
    if d.description:
        out["description"] = d.description
    if d.extends:
        out["extends"] = d.extends
    if d.base:
        out["base"] = {"wheel": d.base.wheel, "sha256": d.base.sha256}
    out["patches"] = [patch_json(p) for p in d.patches]
    if d.pins:
        out["pins"] = {p.path: {"sha256": p.sha256, "reason": p.reason} for p in d.pins}
    if d.packages:
        out["packages"] = list(d.packages)
    return out


def dump_json(value: Any) -> str:
    """The one canonical JSON spelling used for declarations and generated files."""
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def resolved_json(chain: Chain, package_digests: dict[str, str] | None = None) -> dict:
    """The chain as one document (parents included), for tools downstream of the build.

    `package_digests` (name -> sha256 over the package's files, packages.package_digest) puts the
    shipped packages into the document, so the recipe fingerprint changes with them."""
    out = {
        "schema": SCHEMA,
        "series": chain.name,
        "chain": [d.name for d in chain.series],
        "base": {"wheel": chain.base.wheel, "sha256": chain.base.sha256},
        "patches": [patch_json(p, with_location=True) for p in chain.patches],
        "pins": {p.path: {"series": p.series, "sha256": p.sha256, "reason": p.reason} for p in chain.pins},
    }
    if chain.packages:
        out["packages"] = {name: (package_digests or {}).get(name) for name in chain.packages}
    return out
