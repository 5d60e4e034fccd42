"""Release records (recipes/releases/<recipe>.json): which engine image a deployment may pin.

Records are written by tools (`bazel run //recipes:<recipe>.release` / `.push`), never by hand,
and reach the generator through Bazel labels. They are read by tools/release/schema.py (the one
strict reader); this module binds each to the recipe name the tables use and answers the
questions the tables ask: the short image label and which patches the image carries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path

from tools.release import schema

from .errors import ReleaseError

RECIPE_NAME_RE = re.compile(r"glm53_v[0-9]+")

# The v3 event-loop patches; `offloop-v3-` in config_variant marks an image carrying all of them.
EVENT_LOOP_V3_PATCHES = ("request-preprocessing-off-loop", "shm-off-loop", "mm-processor-off-loop",
                         "dispatch-off-loop", "offload-process", "event-loop-stall-dump")

PUBLISH_HINT = ("build, publish and record the image with "
                "`bazel run //recipes:{name}.push -- --repository REG/REPO --tag TAG` "
                "(or record an unpublished build with `bazel run //recipes:{name}.release`)")


@dataclass(frozen=True)
class ReleaseRecord(schema.Record):
    """One release record bound to `name`, the recipe name the tables use (e.g. glm53_v3)."""

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


def load_release(name: str, path: str | Path) -> ReleaseRecord:
    """Reads the record for recipe `name` from `path` and checks it is that recipe's."""
    if not RECIPE_NAME_RE.fullmatch(name):
        raise ReleaseError(f"release name {name!r} is not a recipe name like glm53_v3")
    try:
        record = schema.read(Path(path), f"//recipes:{name}")
    except schema.RecordError as err:
        raise ReleaseError(str(err)) from None
    if record.recipe != f"//recipes:{name}":
        raise ReleaseError(f"{path}: records recipe {record.recipe!r}, but is bound as the release "
                           f"of //recipes:{name}; check the label in compose/BUILD.bazel")
    return ReleaseRecord(**{f.name: getattr(record, f.name) for f in fields(schema.Record)}, name=name)


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
