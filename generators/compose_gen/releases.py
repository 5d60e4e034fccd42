"""Release records (recipes/releases/<recipe>.json): which engine image a deployment may pin.

Records are written by tools (`bazel run //recipes:<recipe>.release` / `.push`), never by hand,
and reach the generator through Bazel labels. This module reads them and answers the questions
the tables ask: the image reference, its short label, and which patches the image carries.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from .errors import ReleaseError

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
RECIPE_NAME_RE = re.compile(r"^glm53_v[0-9]+$")
# Registry host (optional), path; no tag, no digest: the record keeps those apart.
REPOSITORY_RE = re.compile(r"^[a-z0-9.-]+(?::[0-9]+)?/[a-z0-9._/-]+$")

# The patch that makes SGLANG_DSA_INDEXER_QSPLIT=1 mean something.
QSPLIT_PATCH = "dsa-indexer-qsplit"
# The v3 event-loop patches; `offloop-v3-` in config_variant marks an image carrying all of them.
EVENT_LOOP_V3_PATCHES = ("request-preprocessing-off-loop", "shm-off-loop", "mm-processor-off-loop",
                         "dispatch-off-loop", "event-loop-stall-dump")

REQUIRED_KEYS = ("recipe", "series", "repository", "tag", "digest", "base", "patch_layer_digest",
                 "fingerprint", "patches", "published")
BASE_FLAVORS = ("cpu-test", "production")
PUBLISH_HINT = ("build, publish and record the image with "
                "`bazel run //recipes:{name}.push -- --repository REG/REPO --tag TAG` "
                "(or record an unpublished build with `bazel run //recipes:{name}.release`)")


@dataclass(frozen=True)
class PatchEntry:
    name: str
    version: str
    activation: str
    # The series declaration's activation (kind, settings, disable, ...), as recorded.
    switch: Mapping[str, Any]

    @property
    def kill_switch(self) -> tuple[str, str] | None:
        """(variable, default) of an on-by-default patch that a variable turns off, else None."""
        if self.switch.get("kind") != "on-by-default" or not self.switch.get("disable"):
            return None
        variable = str(self.switch["disable"]).partition("=")[0]
        default = (self.switch.get("settings") or {}).get(variable)
        return (variable, str(default)) if default is not None else None


@dataclass(frozen=True)
class ReleaseRecord:
    """One release record; `name` is the recipe name the tables use (e.g. glm53_v3)."""

    name: str
    path: str
    recipe: str
    series: str
    repository: str
    tag: str
    digest: str
    patch_layer_digest: str
    fingerprint: str
    patches: tuple[PatchEntry, ...]
    published: bool
    base_flavor: str  # cpu-test | production

    @property
    def image(self) -> str:
        """The compose `image:` value: repository pinned by digest."""
        return f"{self.repository}@{self.digest}"

    @property
    def engine_image(self) -> str:
        """The telemetry label: first 12 hex of the digest."""
        return self.digest.split(":", 1)[1][:12]

    @property
    def patch_names(self) -> frozenset[str]:
        return frozenset(p.name for p in self.patches)

    @property
    def has_qsplit(self) -> bool:
        return QSPLIT_PATCH in self.patch_names

    @property
    def has_event_loop_v3(self) -> bool:
        present = [p for p in EVENT_LOOP_V3_PATCHES if p in self.patch_names]
        if present and len(present) != len(EVENT_LOOP_V3_PATCHES):
            missing = sorted(set(EVENT_LOOP_V3_PATCHES) - set(present))
            raise ReleaseError(
                f"{self.path}: carries {present} but not {missing}: the v3 event-loop patches "
                f"ship together; re-record the release from its recipe "
                f"({PUBLISH_HINT.format(name=self.name)})")
        return bool(present)


def load_release(name: str, path: str | Path) -> ReleaseRecord:
    """Reads and checks the record for recipe `name` from `path`."""
    path = Path(path)
    if not RECIPE_NAME_RE.match(name):
        raise ReleaseError(f"release name {name!r} is not a recipe name like glm53_v3")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReleaseError(f"{path}: no release record for {name}; "
                           + PUBLISH_HINT.format(name=name)) from None
    except json.JSONDecodeError as err:
        raise ReleaseError(f"{path}: not JSON ({err}); release records are written by tools: "
                           + PUBLISH_HINT.format(name=name)) from None
    if not isinstance(raw, dict):
        raise ReleaseError(f"{path}: a release record is a JSON object")
    missing = [k for k in REQUIRED_KEYS if k not in raw]
    if missing:
        raise ReleaseError(f"{path}: missing keys {missing}; " + PUBLISH_HINT.format(name=name))

    def field(key: str, pattern: re.Pattern[str] | None = None) -> str:
        value = raw[key]
        if not isinstance(value, str) or (pattern is not None and not pattern.match(value)):
            raise ReleaseError(f"{path}: {key} = {value!r} is malformed"
                               + (f" (expected {pattern.pattern})" if pattern else ""))
        return value

    recipe = field("recipe")
    if recipe != f"//recipes:{name}":
        raise ReleaseError(f"{path}: records recipe {recipe!r}, but is bound as the release of "
                           f"//recipes:{name}; check the label in compose/BUILD.bazel")
    patches_raw = raw["patches"]
    if not isinstance(patches_raw, list):
        raise ReleaseError(f"{path}: patches must be a list")
    patches = []
    for i, p in enumerate(patches_raw):
        if not isinstance(p, dict) or not all(isinstance(p.get(k), str)
                                              for k in ("name", "version", "activation")):
            raise ReleaseError(f"{path}: patches[{i}] needs string name, version, activation")
        if not isinstance(p.get("switch"), dict):
            raise ReleaseError(f"{path}: patches[{i}] has no switch (the series declaration's "
                               "activation); " + PUBLISH_HINT.format(name=name))
        patches.append(PatchEntry(p["name"], p["version"], p["activation"],
                                  MappingProxyType(dict(p["switch"]))))
    if not isinstance(raw["published"], bool):
        raise ReleaseError(f"{path}: published must be true or false")
    flavor = raw["base"].get("flavor") if isinstance(raw["base"], dict) else None
    if flavor not in BASE_FLAVORS:
        raise ReleaseError(f"{path}: base.flavor {flavor!r} is not one of {', '.join(BASE_FLAVORS)}; "
                           + PUBLISH_HINT.format(name=name))
    return ReleaseRecord(
        name=name,
        path=str(path),
        recipe=recipe,
        series=field("series"),
        repository=field("repository", REPOSITORY_RE),
        tag=field("tag"),
        digest=field("digest", DIGEST_RE),
        patch_layer_digest=field("patch_layer_digest", DIGEST_RE),
        fingerprint=field("fingerprint", DIGEST_RE),
        patches=tuple(patches),
        published=raw["published"],
        base_flavor=flavor,
    )


def parse_release_arg(arg: str) -> tuple[str, str]:
    """Splits a CLI `NAME=PATH` release binding."""
    name, sep, path = arg.partition("=")
    if not sep or not name or not path:
        raise ReleaseError(f"--release {arg!r}: expected NAME=PATH, e.g. "
                           "glm53_v3=recipes/releases/glm53_v3.json")
    return name, path


def load_releases(bindings: list[str]) -> dict[str, ReleaseRecord]:
    records: dict[str, ReleaseRecord] = {}
    for arg in bindings:
        name, path = parse_release_arg(arg)
        if name in records:
            raise ReleaseError(f"--release {name} given twice")
        records[name] = load_release(name, path)
    return records
