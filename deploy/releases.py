"""Release records (recipes/releases/<recipe>.json): which engine image a deployment may pin.

The deploy wing's one reader of release records: the generator, the validators, the
deployability gate and the rollout read them here. Each file is parsed by tools/release/schema.py
(the writer's own schema: exact keys, types and grammar, errors naming file, key and the command
that writes a correct record); this module binds a record to the recipe name the tables use,
looks records up by digest, image or recipe, and answers the questions deployments ask of a
record (the short image label, which patches the image carries).

Records are written by tools (`bazel run //recipes:<recipe>.release` / `.push`), never by hand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Iterable

from tools.release import schema

# One error for every reader: a record that cannot be used (the message names file, key and fix).
ReleaseError = schema.RecordError

RECIPE_NAME_RE = re.compile(r"glm53_v[0-9]+")

# The v3 event-loop patches; `offloop-v3-` in config_variant marks an image carrying all of them.
EVENT_LOOP_V3_PATCHES = ("request-preprocessing-off-loop", "shm-off-loop", "mm-processor-off-loop",
                         "dispatch-off-loop", "offload-process", "event-loop-stall-dump")

PUBLISH_HINT = ("build, publish and record the image with "
                "`bazel run //recipes:{name}.push -- --repository REG/REPO --tag TAG` "
                "(or record an unpublished build with `bazel run //recipes:{name}.release`)")


@dataclass(frozen=True)
class ReleaseRecord(schema.Record):
    """One release record; `name` is the recipe name the tables use (e.g. glm53_v3)."""

    name: str = ""

    @property
    def engine_image(self) -> str:
        """The telemetry label: first 12 hex of the digest."""
        return self.digest.split(":", 1)[1][:12]

    @property
    def has_event_loop_v3(self) -> bool:
        present = [p for p in EVENT_LOOP_V3_PATCHES if p in self.patch_names]
        if present and len(present) != len(EVENT_LOOP_V3_PATCHES):
            missing = sorted(set(EVENT_LOOP_V3_PATCHES) - set(present))
            raise ReleaseError(
                f"{self.source}: carries {present} but not {missing}: the v3 event-loop patches "
                f"ship together; re-record the release from its recipe "
                f"({PUBLISH_HINT.format(name=self.name)})")
        return bool(present)


def _bound(record: schema.Record, name: str) -> ReleaseRecord:
    return ReleaseRecord(**{f.name: getattr(record, f.name) for f in fields(schema.Record)}, name=name)


def read(path: str | Path) -> ReleaseRecord:
    """One record, named after its recipe (`//recipes:glm53_v3` -> glm53_v3)."""
    record = schema.read(Path(path))
    return _bound(record, record.recipe.rpartition(":")[2])


def load_release(name: str, path: str | Path) -> ReleaseRecord:
    """Reads the record for recipe `name` from `path` and checks it is that recipe's."""
    if not RECIPE_NAME_RE.fullmatch(name):
        raise ReleaseError(f"release name {name!r} is not a recipe name like glm53_v3")
    record = schema.read(Path(path), f"//recipes:{name}")
    if record.recipe != f"//recipes:{name}":
        raise ReleaseError(f"{path}: records recipe {record.recipe!r}, but is bound as the release "
                           f"of //recipes:{name}; check the label in compose/BUILD.bazel")
    return _bound(record, name)


def parse_release_arg(arg: str) -> tuple[str, str]:
    """Splits a CLI `NAME=PATH` release binding."""
    name, sep, path = arg.partition("=")
    if not sep or not name or not path:
        raise ReleaseError(f"--release {arg!r}: expected NAME=PATH, e.g. "
                           "glm53_v3=recipes/releases/glm53_v3.json")
    return name, path


def load_bindings(bindings: list[str]) -> dict[str, ReleaseRecord]:
    """`NAME=PATH` bindings (the generator's --release) -> records by recipe name."""
    records: dict[str, ReleaseRecord] = {}
    for arg in bindings:
        name, path = parse_release_arg(arg)
        if name in records:
            raise ReleaseError(f"--release {name} given twice")
        records[name] = load_release(name, path)
    return records


@dataclass(frozen=True)
class Releases:
    """A set of records and where they were read from, looked up by what a compose file names."""

    records: tuple[ReleaseRecord, ...]
    directory: Path

    def by_digest(self, digest: str) -> ReleaseRecord | None:
        return next((r for r in self.records if r.digest == digest), None)

    def by_recipe(self, recipe: str) -> ReleaseRecord | None:
        return next((r for r in self.records if r.recipe == recipe), None)

    def by_image(self) -> dict[str, ReleaseRecord]:
        """Records by the image they name (repository@digest)."""
        return {r.image: r for r in self.records}


def load_files(paths: Iterable[str | Path], directory: Path) -> Releases:
    return Releases(tuple(read(p) for p in sorted(Path(p) for p in paths)), Path(directory))


def load_dir(directory: str | Path) -> Releases:
    """Every record of a directory (recipes/releases in a checkout or a runfiles tree)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ReleaseError(f"{directory}: no release-record directory")
    return load_files(directory.glob("*.json"), directory)
