"""Release records (`recipes/releases/<recipe>.json`), read by tools/release/schema.py, looked up
by the image digest or the recipe a compose file names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tools.release.schema import Record, RecordError, read

# The validators' name for the schema's error: a record that cannot be used.
ReleaseError = RecordError


@dataclass(frozen=True)
class Releases:
    records: tuple[Record, ...]
    directory: Path

    def by_digest(self, digest: str) -> Record | None:
        return next((r for r in self.records if r.digest == digest), None)

    def by_recipe(self, recipe: str) -> Record | None:
        return next((r for r in self.records if r.recipe == recipe), None)


def load_releases(paths: list[Path], directory: Path) -> Releases:
    return Releases(tuple(read(Path(p)) for p in sorted(paths)), directory)


def load_release_dir(directory: Path) -> Releases:
    if not directory.is_dir():
        raise ReleaseError(f"{directory}: no release-record directory")
    return load_releases(sorted(directory.glob("*.json")), directory)
