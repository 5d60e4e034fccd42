"""Release records (`recipes/releases/<recipe>.json`): which image digest carries which patches."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

SPLIT_PATCH = "dsa-indexer-qsplit"
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class ReleaseError(Exception):
    """A release record that cannot be used; the message names the file and the fix."""


@dataclass(frozen=True)
class Release:
    recipe: str  # e.g. //recipes:glm53_v2
    series: str
    repository: str
    digest: str
    patches: tuple[str, ...]
    source: Path

    @property
    def image(self) -> str:
        return f"{self.repository}@{self.digest}"

    @property
    def carries_split(self) -> bool:
        return SPLIT_PATCH in self.patches


def load_release(path: Path) -> Release:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ReleaseError(f"{path}: unreadable release record: {exc}") from None
    missing = [k for k in ("recipe", "series", "repository", "digest", "patches") if k not in data]
    if missing:
        raise ReleaseError(f"{path}: release record lacks {', '.join(missing)}; rewrite it with "
                           "the recipe's .release target")
    if not _DIGEST.match(str(data["digest"])):
        raise ReleaseError(f"{path}: digest {data['digest']!r} is not sha256:<64 hex>")
    patches = tuple(str(p.get("name", "")) if isinstance(p, dict) else str(p)
                    for p in data["patches"])
    return Release(str(data["recipe"]), str(data["series"]), str(data["repository"]),
                   str(data["digest"]), patches, path)


@dataclass(frozen=True)
class Releases:
    records: tuple[Release, ...]
    directory: Path

    def by_digest(self, digest: str) -> Release | None:
        return next((r for r in self.records if r.digest == digest), None)

    def by_recipe(self, recipe: str) -> Release | None:
        return next((r for r in self.records if r.recipe == recipe), None)


def load_releases(paths: list[Path], directory: Path) -> Releases:
    return Releases(tuple(load_release(p) for p in sorted(paths)), directory)


def load_release_dir(directory: Path) -> Releases:
    if not directory.is_dir():
        raise ReleaseError(f"{directory}: no release-record directory")
    return load_releases(sorted(directory.glob("*.json")), directory)


def image_digest(image: str) -> str | None:
    m = re.search(r"@(sha256:[0-9a-f]{64})$", image)
    return m.group(1) if m else None
