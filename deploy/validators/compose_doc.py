"""Loading compose files safely and reporting findings by file and dotted path.

Every validator collects Findings instead of raising, so one run reports every drift at once.
Loading problems (missing file, invalid YAML, a document that is not a mapping) become a single
Finding and the caller skips the checks that need the document.
"""

from __future__ import annotations

import contextlib
import copy
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, Iterator, Mapping, TypeVar

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError


# The CI dummy environment: every `${VAR:?…}` guard of a deployable file must be satisfied by it,
# exactly as the host's env map satisfies it in production. Values are placeholders.
CI_DUMMY_ENV: Mapping[str, str] = {
    "HOST_IP": "127.0.0.1",
    "MONITORING_INGEST_TOKEN": "ci-dummy",
    "HUGGING_FACE_HUB_TOKEN": "ci-dummy",
    "CLOUD_API_USAGE_TOKEN": "ci-dummy",
    "MODEL_PROXY_TOKEN": "ci-dummy",
    "PROXY_TOKEN": "ci-dummy",
    "ENGINE_API_TOKEN": "ci-dummy",
    "WEB_CONTEXT_SEARCH_API_KEY": "ci-dummy",
    "FUSION_INTERNAL_BEARER_TOKEN": "ci-dummy",
    "CVM_NAME": "compose-manager",
    "CVM_HOST": "gpu26",
    "DD_HOSTNAME": "gpu26-compose-manager",
    "ENV": "prod",
    "WEB_CONTEXT_SEARCH_URL": "http://ci-dummy",
    "FUSION_ENABLED": "true",
}


@dataclass(frozen=True, order=True)
class Finding:
    """One violated rule: where (file + dotted path) and what to fix."""

    file: str
    path: str
    message: str

    def render(self) -> str:
        where = f"{self.file}: {self.path}" if self.path else self.file
        return f"{where}: {self.message}"


def join_path(*parts: str | int) -> str:
    """Dotted path; list indices render as [i] so `command[12]` reads like the YAML."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part != "":
            out = f"{out}.{part}" if out else str(part)
    return out


class LoadError(Exception):
    """A compose file that cannot be validated at all."""


# --- one parse and one Compose resolution per file and run ---------------------------------------

_T = TypeVar("_T")

# The results computed inside the outermost `shared_reads()` block (a nested block shares them);
# None outside any.
_shared: dict[Hashable, Any] | None = None


@contextlib.contextmanager
def shared_reads() -> Iterator[None]:
    """Inside the block, each YAML text is parsed once and each Compose resolution (model.py)
    runs once; later reads get a copy of the first result.

    `check` runs six validators over the same files and each reads every file itself: for three
    files that was 24 YAML parses and 19 `docker-compose config` runs, about half of a run's CPU.
    The keys are the inputs themselves (the text; the binary, the file's bytes, the flags and
    the environment), so a file changed in between is read again. Failures are not kept: each
    caller raises its own. Scoped to a block rather than the process, so a long-lived importer
    never holds stale results."""
    global _shared
    outer = _shared
    _shared = {} if outer is None else outer
    try:
        yield
    finally:
        _shared = outer


def shared(key: Hashable, compute: Callable[[], _T], copied: bool = False) -> _T:
    """`compute()`, once per `key` inside a `shared_reads()` block (a deep copy when `copied`:
    callers own the documents they get); outside any block, simply `compute()`."""
    if _shared is None:
        return compute()
    if key not in _shared:
        _shared[key] = compute()
    return copy.deepcopy(_shared[key]) if copied else _shared[key]


def load_yaml_text(text: str, label: str) -> Any:
    """Parses YAML with the safe constructor (no Python object tags); merge keys and anchors
    resolve. The parse does not depend on `label` (only a failure's message names it)."""
    return shared(("yaml", text), lambda: _parse_yaml(text, label), copied=True)


def _parse_yaml(text: str, label: str) -> Any:
    yaml = YAML(typ="safe", pure=True)
    try:
        return yaml.load(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
        context = getattr(exc, "context", None)
        detail = f"{context}: {problem}" if context else problem
        raise LoadError(f"{label}: invalid YAML{where}: {detail}") from None


@dataclass
class ComposeFile:
    """A loaded compose document; `label` is how findings name the file."""

    label: str
    path: Path
    text: str
    doc: dict[str, Any]

    @property
    def services(self) -> dict[str, Any]:
        services = self.doc.get("services")
        return services if isinstance(services, dict) else {}

    def finding(self, path: str, message: str) -> Finding:
        return Finding(self.label, path, message)


def load_compose(path: Path, label: str | None = None) -> ComposeFile:
    """Reads and parses one compose file; raises LoadError with a single actionable message."""
    label = label or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LoadError(f"{label}: file not found (pass an existing compose file)") from None
    except IsADirectoryError:
        raise LoadError(f"{label}: is a directory, expected a compose YAML file") from None
    except UnicodeDecodeError as exc:
        raise LoadError(f"{label}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise LoadError(f"{label}: cannot read: {exc.strerror}") from None
    doc = load_yaml_text(text, label)
    if not isinstance(doc, dict):
        kind = "empty" if doc is None else type(doc).__name__
        raise LoadError(f"{label}: top level must be a mapping (compose document), got {kind}")
    return ComposeFile(label=label, path=path, text=text, doc=doc)


def env_map(environment: Any) -> dict[str, str | None]:
    """Compose `environment` as a map: list items `K=V` (or bare `K`) and mappings both accepted."""
    if isinstance(environment, Mapping):
        return {str(k): (None if v is None else _scalar(v)) for k, v in environment.items()}
    result: dict[str, str | None] = {}
    if isinstance(environment, list):
        for item in environment:
            key, sep, value = str(item).partition("=")
            result[key] = value if sep else None
    return result


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def command_argv(command: Any) -> list[str]:
    """Compose `command` as argv: a string is split like a shell would (no expansion)."""
    if isinstance(command, list):
        return [str(t) for t in command]
    if isinstance(command, str):
        try:
            return shlex.split(command)
        except ValueError:
            return command.split()
    return []


def labels_map(labels: Any) -> dict[str, str]:
    """Compose `labels` as a map (list form `k=v` accepted)."""
    return {k: ("" if v is None else v) for k, v in env_map(labels).items()}


def depends_on_names(depends_on: Any) -> list[str]:
    """Service names from short (list) or long (mapping) `depends_on` syntax."""
    if isinstance(depends_on, Mapping):
        return [str(k) for k in depends_on]
    if isinstance(depends_on, list):
        return [str(k) for k in depends_on]
    return []


_INTERPOLATION = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-?+])?(?P<arg>[^}]*)\}"
    r"|(?P<named>[A-Za-z_][A-Za-z0-9_]*))")


class InterpolationError(Exception):
    """A `${VAR:?message}` guard failed."""


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """What a container sees after Compose interpolation: `$$` -> `$`, `${VAR…}` resolved.

    Mirrors Compose's rules for `${V}`, `${V:-d}`, `${V-d}`, `${V:?m}`, `${V?m}`, `${V:+a}`,
    `${V+a}` and `$V`; an unset variable becomes "" (Compose only warns), which is exactly how an
    unescaped nginx `$var` breaks in production.
    """

    def substitute(m: re.Match[str]) -> str:
        if m.group("escaped"):
            return "$"
        name = m.group("braced") or m.group("named")
        op, arg = m.group("op") or "", m.group("arg") or ""
        value = env.get(name)
        unset_or_empty = value is None or (value == "" and op.startswith(":"))
        if op in (":-", "-"):
            return arg if unset_or_empty else value
        if op in (":?", "?"):
            if unset_or_empty:
                raise InterpolationError(f"required variable {name} is missing a value: {arg}")
            return value
        if op in (":+", "+"):
            return "" if unset_or_empty else arg
        return value or ""

    return _INTERPOLATION.sub(substitute, text)


def config_contents(compose: ComposeFile) -> dict[str, str]:
    """Top-level `configs` that embed their text (`content:`), by config name."""
    configs = compose.doc.get("configs")
    out: dict[str, str] = {}
    if isinstance(configs, Mapping):
        for name, spec in configs.items():
            if isinstance(spec, Mapping) and isinstance(spec.get("content"), str):
                out[str(name)] = spec["content"]
    return out


@dataclass
class Report:
    """Findings of one validator over one or more files."""

    validator: str
    findings: list[Finding] = field(default_factory=list)
    ok_files: list[str] = field(default_factory=list)

    def extend(self, findings: Iterable[Finding]) -> None:
        self.findings.extend(findings)

    def render(self) -> str:
        lines = [f"{self.validator}: OK ({f})" for f in self.ok_files]
        if self.findings:
            lines.append(f"{self.validator} failed: {len(self.findings)} error(s)")
            lines += [f"  - {f.render()}" for f in self.findings]
        return "\n".join(lines)
