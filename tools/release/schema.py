"""The release-record schema: `recipes/releases/<recipe>.json` and the release facts it is made of.

One strict parser for every reader (tools/release's writer and checker, the compose generator,
the deployability gate, the validators): exactly the keys below, each of its type and grammar
(tools/oci/reference.py for digests, tags and repositories). Every error names the file, the
key and the fix (records and facts are written by tools, so the fix is always a command).

    facts  (<recipe>.release_facts.json, tools/release/facts.py): recipe, series, digest, base,
           patch_layer_digest, fingerprint, patches, base_lock_current
    record (recipes/releases/<recipe>.json, tools/release/record.py): the facts but
           base_lock_current, plus repository, tag, published, source_revision, recorded_at
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

from tools.oci.reference import ReferenceError, check_digest, check_tag, parse_repository

RECORD_KEYS = (
    "recipe", "series", "repository", "tag", "digest", "base", "patch_layer_digest",
    "fingerprint", "patches", "published", "source_revision", "recorded_at",
)
FACTS_KEYS = ("recipe", "series", "digest", "base", "patch_layer_digest", "fingerprint", "patches",
              "base_lock_current")
BASE_KEYS = ("name", "digest", "flavor")
PATCH_KEYS = ("name", "version", "activation", "switch")
# cpu-test: built here from the CPU lock (no GPU torch); production: a registry image pulled by
# digest (--config=prod). Derived from the base target by the facts rule.
BASE_FLAVORS = ("cpu-test", "production")
# The patch that makes SGLANG_DSA_INDEXER_QSPLIT=1 mean something (patches/v1/series.json):
# the generator refuses the switch on an image without it, the production contract requires it.
QSPLIT_PATCH = "dsa-indexer-qsplit"
LABEL_RE = re.compile(r"//[a-z0-9_/.-]*:[A-Za-z0-9_.-]+")
REVISION_RE = re.compile(r"[0-9a-f]{40}|unknown")
TIME_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")

RECORD_FIX = ("records are written only by tools/release/record.py: re-run "
              "`bazel run {recipe}.release -- --repository HOST/REPO`")
FACTS_FIX = "facts are written by the build: rebuild them with `bazel build {recipe}.release_facts`"


class RecordError(Exception):
    """A record or its facts cannot be used; the message names the file, the key and the fix."""


def _recipe_hint(obj: Any, path: Path) -> str:
    recipe = obj.get("recipe") if isinstance(obj, dict) else None
    if isinstance(recipe, str) and LABEL_RE.fullmatch(recipe):
        return recipe
    return f"//recipes:{Path(path).stem.removesuffix('.release_facts')}"


class _Reader:
    """Typed access to one JSON object of a record, every error in the same words."""

    def __init__(self, obj: Any, where: str, keys: tuple[str, ...], fix: str):
        self.where, self.fix = where, fix
        if not isinstance(obj, dict):
            self.fail(f"expected a JSON object, found {type(obj).__name__}")
        missing = [k for k in keys if k not in obj]
        unknown = [k for k in obj if k not in keys]
        if missing or unknown:
            self.fail(f"keys missing {missing} / unknown {unknown}")
        self.obj = obj

    def fail(self, message: str) -> None:
        raise RecordError(f"{self.where}: {message}; {self.fix}")

    def string(self, key: str, check: Callable[[str], Any] | re.Pattern[str] | None = None) -> str:
        value = self.obj[key]
        if not isinstance(value, str) or not value:
            self.fail(f"{key} = {value!r} must be a non-empty string")
        if isinstance(check, re.Pattern):
            if not check.fullmatch(value):
                self.fail(f"{key} = {value!r} does not match {check.pattern}")
        elif check is not None:
            try:
                check(value)
            except ReferenceError as err:  # its message names the key
                self.fail(str(err))
        return value

    def digest(self, key: str) -> str:
        return self.string(key, lambda v: check_digest(v, key))

    def boolean(self, key: str) -> bool:
        value = self.obj[key]
        if not isinstance(value, bool):
            self.fail(f"{key} = {value!r} must be true or false")
        return value

    def sub(self, key: str, keys: tuple[str, ...]) -> "_Reader":
        return _Reader(self.obj[key], f"{self.where}: {key}", keys, self.fix)

    def items(self, key: str, keys: tuple[str, ...]) -> list["_Reader"]:
        value = self.obj[key]
        if not isinstance(value, list):
            self.fail(f"{key} must be a list")
        return [_Reader(item, f"{self.where}: {key}[{i}]", keys, self.fix) for i, item in enumerate(value)]


@dataclass(frozen=True)
class Patch:
    name: str
    version: str
    activation: str  # summary: always, opt-in, on-30s, ...
    # The series declaration's activation, verbatim (kind, and where declared: env/value,
    # settings, disable): what a deployment may set for this patch.
    switch: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @staticmethod
    def read(r: _Reader) -> "Patch":
        switch = r.obj["switch"]
        if not isinstance(switch, dict) or not isinstance(switch.get("kind"), str):
            r.fail(f"switch = {switch!r} must be the series declaration's activation (a JSON object with a kind)")
        return Patch(r.string("name"), r.string("version"), r.string("activation"),
                     MappingProxyType(dict(switch)))

    @property
    def kill_switch(self) -> tuple[str, str] | None:
        """(variable, default) of an on-by-default patch that a variable turns off, else None."""
        if self.switch.get("kind") != "on-by-default" or not self.switch.get("disable"):
            return None
        variable = str(self.switch["disable"]).partition("=")[0]
        default = (self.switch.get("settings") or {}).get(variable)
        return (variable, str(default)) if default is not None else None

    def to_json(self) -> dict:
        return {"name": self.name, "version": self.version, "activation": self.activation,
                "switch": dict(self.switch)}


@dataclass(frozen=True)
class Base:
    name: str
    digest: str
    flavor: str  # one of BASE_FLAVORS

    @staticmethod
    def read(r: _Reader) -> "Base":
        flavor = r.string("flavor")
        if flavor not in BASE_FLAVORS:
            r.fail(f"flavor {flavor!r} is not one of {', '.join(BASE_FLAVORS)}")
        return Base(r.string("name"), r.digest("digest"), flavor)


def _built(r: _Reader) -> dict[str, Any]:
    """The keys facts and records share: what the build says about the image."""
    return dict(
        recipe=r.string("recipe", LABEL_RE),
        series=r.string("series"),
        digest=r.digest("digest"),
        base=Base.read(r.sub("base", BASE_KEYS)),
        patch_layer_digest=r.digest("patch_layer_digest"),
        fingerprint=r.digest("fingerprint"),
        patches=tuple(Patch.read(p) for p in r.items("patches", PATCH_KEYS)),
    )


@dataclass(frozen=True)
class Facts:
    """What the build says about an image (the release_facts.json of a recipe)."""

    recipe: str
    series: str
    digest: str
    base: Base
    patch_layer_digest: str
    fingerprint: str
    patches: tuple[Patch, ...] = ()
    base_lock_current: bool = True  # the base's Debian layers came from the current lock

    @staticmethod
    def from_json(obj: Any, where: str) -> "Facts":
        r = _Reader(obj, where, FACTS_KEYS, FACTS_FIX.format(recipe=_recipe_hint(obj, Path(where))))
        return Facts(**_built(r), base_lock_current=r.boolean("base_lock_current"))

    @staticmethod
    def load(path: Path) -> "Facts":
        return Facts.from_json(read_json(path), str(path))


@dataclass(frozen=True)
class Record:
    recipe: str
    series: str
    repository: str
    tag: str
    digest: str
    base: Base
    patch_layer_digest: str
    fingerprint: str
    patches: tuple[Patch, ...]
    published: bool
    source_revision: str
    recorded_at: str
    # Where the record was read from ("" for one made in memory); not part of the record.
    source: str = field(default="", compare=False)

    def to_json(self) -> dict:
        obj = {key: getattr(self, key) for key in RECORD_KEYS}
        obj["base"] = asdict(self.base)
        obj["patches"] = [p.to_json() for p in self.patches]
        return obj

    def text(self) -> str:
        return json.dumps(self.to_json(), indent=2) + "\n"

    @property
    def image(self) -> str:
        """repository@digest: what a deployment pins."""
        return f"{self.repository}@{self.digest}"

    @property
    def patch_names(self) -> frozenset[str]:
        return frozenset(p.name for p in self.patches)

    @property
    def has_qsplit(self) -> bool:
        return QSPLIT_PATCH in self.patch_names

    @staticmethod
    def from_json(obj: Any, where: str) -> "Record":
        r = _Reader(obj, where, RECORD_KEYS, RECORD_FIX.format(recipe=_recipe_hint(obj, Path(where))))
        return Record(
            **_built(r),
            repository=r.string("repository", parse_repository),
            tag=r.string("tag", check_tag),
            published=r.boolean("published"),
            source_revision=r.string("source_revision", REVISION_RE),
            recorded_at=r.string("recorded_at", TIME_RE),
            source=where,
        )


def read_json(path: Path, recipe: str | None = None) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RecordError(f"{path}: not found") from None
    except json.JSONDecodeError as err:
        raise RecordError(f"{path}: not JSON ({err}); "
                          + RECORD_FIX.format(recipe=recipe or _recipe_hint(None, path))) from None


def read(path: Path, recipe: str | None = None) -> Record:
    """The record at `path` (of `recipe`, when the caller knows it: named in the errors)."""
    path = Path(path)
    recipe = recipe or _recipe_hint(None, path)
    if not path.exists():
        raise RecordError(f"{path}: no release record for {recipe}; record the built image with "
                          f"`bazel run {recipe}.release -- --repository HOST/REPO` (or publish "
                          "and record it with its .push target)")
    return Record.from_json(read_json(path, recipe), str(path))


def load(path: Path) -> Record | None:
    """The record at `path`, or None when there is none yet (the writer's view)."""
    return read(path) if Path(path).exists() else None
