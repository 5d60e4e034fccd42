"""The pin table (pins/repository_locations.bzl) read, checked and rewritten from Python.

The .bzl file is Starlark that Bazel loads; Starlark in Bazel 4.2.3 cannot read JSON, so the
table is Starlark and this module reads it with a restricted evaluator: a docstring and
`NAME = <literal>` assignments only, where a literal is a string, None, a list, a dict with
string keys, or the name of an earlier assignment. Anything else is an error naming the line.

`render()` writes the canonical form of a table; the committed file must equal it (a test
checks), so the resolver's rewrite changes only the rows it resolved.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from tools.files import atomic, typed
from tools.files.typed import COMMIT_RE, HF_REPO_RE, SHA256_RE
from tools.oci.reference import DIGEST_RE, TAG_RE, ReferenceError, parse_repository

# No resolve(): under Bazel the runfiles copy is the one bound as data.
DEFAULT_PATH = Path(os.path.abspath(__file__)).parent / "repository_locations.bzl"
# Under `bazel run` the tools rewrite the workspace's file, not the runfiles copy.
WORKSPACE_RELATIVE = Path("pins") / "repository_locations.bzl"
RESOLVE_COMMAND = "bazel run //pins:resolve -- {name}"

NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
VERSION_RE = re.compile(r"[0-9]+(?:\.[0-9]+)*(?:(?:a|b|rc|\.post)[0-9]+)?")
TIME_RE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$")

KINDS = ("image", "hf_model", "hf_file", "http_archive", "sglang_candidate")
# Per kind: the fields a row has (besides kind, description, provenance) and the resolved values.
KIND_FIELDS = {
    "image": ("repository", "intended", "digest"),
    "hf_model": ("repository", "intended", "revision"),
    "hf_file": ("repository", "path", "intended", "revision", "sha256"),
    "http_archive": ("intended", "urls", "strip_prefix", "sha256"),
    # An SGLang release the patch series may move to (`bazel run //patches:bump_check -- --to V`):
    # its cp311 wheel (the CPU base its stock tests run on: patches/candidates.bzl).
    "sglang_candidate": ("intended", "urls", "sha256"),
}
VALUE_FIELDS = {
    "image": ("digest",),
    "hf_model": ("revision",),
    "hf_file": ("revision", "sha256"),
    "http_archive": ("sha256",),
    "sglang_candidate": ("sha256",),
}
FIELD_ORDER = ("kind", "description", "repository", "path", "intended", "urls", "strip_prefix",
               "digest", "revision", "sha256", "provenance")


class PinError(Exception):
    """The pin table, or a reference to it, is wrong; the message names the row and the fix."""


@dataclass(frozen=True)
class Provenance:
    resolved_at: str  # UTC, YYYY-MM-DDTHH:MM:SSZ
    command: str      # what produced the value
    source: str       # where it was read from (registry reference, Hub API URL, ...)


@dataclass(frozen=True)
class Pin:
    name: str
    kind: str
    description: str
    intended: str  # the tag, branch or version the value was (or is to be) resolved from
    repository: str | None = None
    path: str | None = None
    urls: tuple[str, ...] = ()
    strip_prefix: str | None = None
    digest: str | None = None
    revision: str | None = None
    sha256: str | None = None
    provenance: Provenance | None = None
    unresolved: str = field(default="", repr=False, compare=False)

    @property
    def resolved(self) -> bool:
        return all(getattr(self, f) != self.unresolved for f in VALUE_FIELDS[self.kind])

    @property
    def image(self) -> str:
        """repository@digest; the digest is the sentinel while unresolved (never deployable)."""
        if self.kind != "image":
            raise PinError(f"pin {self.name} is a {self.kind}, not an image")
        return f"{self.repository}@{self.digest}"

    @property
    def resolve_command(self) -> str:
        return RESOLVE_COMMAND.format(name=self.name)


@dataclass(frozen=True)
class PinTable:
    path: str
    docstring: str
    unresolved: str
    pins: Mapping[str, Pin]

    def get(self, name: str, where: str) -> Pin:
        pin = self.pins.get(name)
        if pin is None:
            raise PinError(f"{where}: no pin named {name!r} in {self.path}; known: "
                           + ", ".join(sorted(self.pins)))
        return pin

    def with_pin(self, pin: Pin) -> "PinTable":
        if pin.name not in self.pins:
            raise PinError(f"{self.path}: no row {pin.name!r} to replace")
        pins = dict(self.pins)
        pins[pin.name] = _check_pin(pin, self.path)
        return replace(self, pins=MappingProxyType(pins))

    def by_image_repository(self, repository: str) -> Pin | None:
        return next((p for p in self.pins.values()
                     if p.kind == "image" and p.repository == repository), None)

    def by_hub_repository(self, repository: str, path: str | None = None) -> Pin | None:
        """The hf_model row of a Hub repository, or with `path` its hf_file row of that file."""
        kind = "hf_file" if path else "hf_model"
        return next((p for p in self.pins.values() if p.kind == kind
                     and p.repository == repository and p.path == path), None)


# --- reading ----------------------------------------------------------------------------------

def _literal(node: ast.AST, names: dict[str, Any], where: str) -> Any:
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, str)):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise PinError(f"{where}:{node.lineno}: {node.id} is not defined above")
        return names[node.id]
    if isinstance(node, ast.List):
        return [_literal(e, names, where) for e in node.elts]
    if isinstance(node, ast.Dict):
        out = {}
        for key, value in zip(node.keys, node.values):
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                raise PinError(f"{where}:{node.lineno}: dict keys must be string literals")
            if key.value in out:
                raise PinError(f"{where}:{key.lineno}: key {key.value!r} appears twice")
            out[key.value] = _literal(value, names, where)
        return out
    raise PinError(f"{where}:{getattr(node, 'lineno', '?')}: only strings, None, lists, dicts and "
                   f"names of earlier assignments may appear here, not {type(node).__name__}")


def parse(text: str, where: str) -> tuple[str, dict[str, Any]]:
    try:
        module = ast.parse(text, filename=where)
    except SyntaxError as err:
        raise PinError(f"{where}:{err.lineno}: {err.msg}") from None
    docstring = ast.get_docstring(module, clean=False) or ""
    names: dict[str, Any] = {}
    for i, stmt in enumerate(module.body):
        if i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)):
            raise PinError(f"{where}:{stmt.lineno}: only `NAME = <literal>` assignments are allowed")
        names[stmt.targets[0].id] = _literal(stmt.value, names, where)
    return docstring, names


def _check_sentinel(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise PinError(f"{where}: UNRESOLVED must be a non-empty string")
    if any(r.fullmatch(value) or r.fullmatch(value.removeprefix("sha256:"))
           for r in (DIGEST_RE, SHA256_RE, COMMIT_RE)) or re.fullmatch(r"[0-9a-fA-F:]*", value):
        raise PinError(f"{where}: UNRESOLVED = {value!r} could pass as a digest or commit")
    if len(value) in (40, 64, 71) or TAG_RE.fullmatch(value):
        raise PinError(f"{where}: UNRESOLVED = {value!r} must not be a valid tag, 40, 64 or 71 "
                       "characters long")
    return value


def _check_pin(pin: Pin, where: str) -> Pin:
    row = f"{where}: pin {pin.name}"
    sentinel = pin.unresolved

    def check(name: str, value: Any, pattern: re.Pattern[str], what: str,
              may_be_unresolved: bool = True) -> None:
        if may_be_unresolved and value == sentinel:
            return
        if not isinstance(value, str) or not pattern.fullmatch(value):
            hint = " or UNRESOLVED" if may_be_unresolved else ""
            raise PinError(f"{row}: {name} = {value!r} is not {what}{hint}")

    if not NAME_RE.match(pin.name):
        raise PinError(f"{row}: row names are lowercase snake_case")
    if pin.kind not in KINDS:
        raise PinError(f"{row}: kind {pin.kind!r} is not one of {', '.join(KINDS)}")
    if not isinstance(pin.description, str) or not pin.description:
        raise PinError(f"{row}: description must say what the artifact is")
    if pin.kind == "image":
        try:
            parse_repository(pin.repository)
        except ReferenceError as err:
            raise PinError(f"{row}: repository is not HOST/PATH with an explicit registry host: {err}") from None
        check("intended", pin.intended, TAG_RE, "a tag")
        check("digest", pin.digest, DIGEST_RE, "sha256:<64 hex>")
    elif pin.kind in ("hf_model", "hf_file"):
        check("repository", pin.repository, HF_REPO_RE, "a Hugging Face repository ORG/NAME", False)
        if not isinstance(pin.intended, str) or not pin.intended:
            raise PinError(f"{row}: intended must name the branch or tag to resolve, e.g. main")
        check("revision", pin.revision, COMMIT_RE, "a 40-hex commit id")
        if pin.kind == "hf_file":
            if not isinstance(pin.path, str) or not pin.path or pin.path.startswith("/"):
                raise PinError(f"{row}: path must be the file's path inside the repository")
            check("sha256", pin.sha256, SHA256_RE, "64 hex")
            if (pin.revision == sentinel) != (pin.sha256 == sentinel):
                raise PinError(f"{row}: revision and sha256 are resolved together; run "
                               f"`{pin.resolve_command}`")
    elif pin.kind == "sglang_candidate":
        if pin.name != "sglang_src_" + str(pin.intended).replace(".", "_") or not VERSION_RE.fullmatch(str(pin.intended)):
            raise PinError(f"{row}: a candidate row is named sglang_src_<version with _> after its "
                           "intended version (the name of the source repository WORKSPACE makes)")
        if len(pin.urls) != 1 or not pin.urls[0].startswith("https://") \
                or not pin.urls[0].rsplit("/", 1)[1].startswith(f"sglang-{pin.intended}-"):
            raise PinError(f"{row}: urls must be the one https:// URL of the sglang-{pin.intended} wheel")
        check("sha256", pin.sha256, SHA256_RE, "64 hex (Bazel cannot fetch the wheel without it)", False)
    else:
        if not pin.urls or not all(isinstance(u, str) and u.startswith("https://") for u in pin.urls):
            raise PinError(f"{row}: urls must be a non-empty list of https:// URLs")
        if not isinstance(pin.strip_prefix, str):
            raise PinError(f"{row}: strip_prefix must be a string (\"\" for none)")
        check("sha256", pin.sha256, SHA256_RE, "64 hex (Bazel cannot fetch an archive without it)", False)
    if pin.resolved != (pin.provenance is not None):
        raise PinError(f"{row}: provenance is required exactly when the value is resolved; "
                       f"write it with `{pin.resolve_command}`")
    if pin.provenance is not None:
        if not TIME_RE.match(pin.provenance.resolved_at):
            raise PinError(f"{row}: provenance.resolved_at {pin.provenance.resolved_at!r} is not "
                           "YYYY-MM-DDTHH:MM:SSZ")
        if not pin.provenance.command or not pin.provenance.source:
            raise PinError(f"{row}: provenance needs the command and the source")
    return pin


def _pin(name: str, row: Any, sentinel: str, where: str) -> Pin:
    if not isinstance(row, dict):
        raise PinError(f"{where}: pin {name} must be a dict")
    kind = row.get("kind")
    if kind not in KINDS:
        raise PinError(f"{where}: pin {name}: kind {kind!r} is not one of {', '.join(KINDS)}")
    typed.check_keys(row, lambda m: PinError(f"{where}: pin {name} ({kind}): {m}"),
                     ("kind", "description", "provenance") + KIND_FIELDS[kind])
    prov = row["provenance"]
    if prov is not None:
        keys = tuple(f.name for f in fields(Provenance))
        if not isinstance(prov, dict):
            raise PinError(f"{where}: pin {name}: provenance must be None or a dict of {', '.join(keys)}")
        typed.check_keys(prov, lambda m: PinError(f"{where}: pin {name}: provenance: {m}"), keys)
        prov = Provenance(**prov)
    values = {k: row[k] for k in KIND_FIELDS[kind]}
    if "urls" in values:
        values["urls"] = tuple(values["urls"]) if isinstance(values["urls"], list) else ()
    pin = Pin(name=name, kind=kind, description=row["description"], provenance=prov,
              unresolved=sentinel, **values)
    return _check_pin(pin, where)


def load(path: Path = DEFAULT_PATH, display: str | None = None) -> PinTable:
    path = Path(path)
    where = display or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PinError(f"{where}: pin table not found") from None
    docstring, names = parse(text, where)
    if set(names) != {"UNRESOLVED", "PINS"}:
        raise PinError(f"{where}: defines {sorted(names)}; the table defines exactly UNRESOLVED and PINS")
    sentinel = _check_sentinel(names["UNRESOLVED"], where)
    if not isinstance(names["PINS"], dict):
        raise PinError(f"{where}: PINS must be a dict of rows")
    pins = {name: _pin(name, row, sentinel, where) for name, row in names["PINS"].items()}
    seen: dict[str, str] = {}
    for pin in pins.values():
        if pin.kind == "image" and seen.setdefault(pin.repository, pin.name) != pin.name:
            raise PinError(f"{where}: pins {seen[pin.repository]} and {pin.name} both name "
                           f"{pin.repository}; one row per image repository")
    return PinTable(where, docstring, sentinel, MappingProxyType(pins))


# --- writing ----------------------------------------------------------------------------------

def _string(value: str, sentinel: str) -> str:
    if value == sentinel:
        return "UNRESOLVED"
    if any(ord(c) < 0x20 or ord(c) > 0x7e for c in value) or "\\" in value:
        raise PinError(f"{value!r}: pin values are printable ASCII without backslashes")
    return '"' + value.replace('"', '\\"') + '"'


def render(table: PinTable) -> str:
    s = table.unresolved
    lines = ['"""' + table.docstring + '"""', "", f"UNRESOLVED = {_string(s, '')}", "", "PINS = {"]
    for name in sorted(table.pins):
        pin = table.pins[name]
        lines.append(f'    "{name}": {{')
        present = ("kind", "description") + KIND_FIELDS[pin.kind] + ("provenance",)
        for key in (k for k in FIELD_ORDER if k in present):
            value = getattr(pin, key)
            if key == "provenance":
                if value is None:
                    lines.append('        "provenance": None,')
                else:
                    lines.append('        "provenance": {')
                    for f in fields(Provenance):
                        lines.append(f'            "{f.name}": {_string(getattr(value, f.name), s)},')
                    lines.append("        },")
            elif key == "urls":
                lines.append(f'        "urls": [{", ".join(_string(u, s) for u in value)}],')
            else:
                lines.append(f'        "{key}": {_string(value, s)},')
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write(table: PinTable, path: Path) -> None:
    """Atomic rewrite (tools/files/atomic.py)."""
    text = render(table)
    load_check = parse(text, str(path))  # never write what the reader would refuse
    assert load_check[1]["UNRESOLVED"] == table.unresolved
    atomic.write_text(Path(path), text)


def workspace_table_path() -> Path:
    """The workspace's pin table under `bazel run`; the runfiles copy is read-only."""
    workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    if not workspace:
        raise PinError("not under `bazel run` (BUILD_WORKSPACE_DIRECTORY unset); pass --table")
    return Path(workspace) / WORKSPACE_RELATIVE
