"""Shared helpers: fixture release records and editable copies of the variant tables."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import pytest

from deploy.compose_gen import generate
from deploy.releases import ReleaseRecord, load_release

TABLES_DIR = generate.TABLES_DIR
FIXTURE_RELEASES = Path(__file__).absolute().parents[2] / "testdata" / "releases"
LONG_CONTEXT = "glm53_tp4_w4afp8_long_context.toml"


def fixture_records() -> dict[str, ReleaseRecord]:
    return {p.stem: load_release(p.stem, p) for p in sorted(FIXTURE_RELEASES.glob("*.json"))}


@pytest.fixture
def records() -> dict[str, ReleaseRecord]:
    """FIXTURE release records (made-up digests) for glm53_v1..v3."""
    return fixture_records()


@pytest.fixture(scope="session")
def committed_tables_outputs() -> dict[str, generate.Output]:
    """Each committed deployment table generated once against the fixture records."""
    return {p.name: generate.generate(p, fixture_records(), TABLES_DIR / "common.toml")
            for p in sorted(TABLES_DIR.glob("*.toml")) if p.name != "common.toml"}


class Tables:
    """A private copy of generators/tables/ that a test may edit."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "tables"
        shutil.copytree(TABLES_DIR, self.dir)

    @property
    def common(self) -> Path:
        return self.dir / "common.toml"

    def path(self, name: str) -> Path:
        return self.dir / name

    def edit(self, name: str, old: str, new: str) -> None:
        """Replaces `old` (which must occur exactly once) with `new` in table `name`."""
        path = self.dir / name
        text = path.read_text()
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {name}"
        path.write_text(text.replace(old, new))

    def generate(self, name: str, records: dict[str, ReleaseRecord]) -> generate.Output:
        return generate.generate(self.dir / name, records, self.common)


@pytest.fixture
def tables(tmp_path: Path) -> Tables:
    return Tables(tmp_path)


@pytest.fixture
def expect_error() -> Callable[..., str]:
    """Runs `fn`, asserts it raises `kind`, returns the message."""
    def run(kind: type[Exception], fn: Callable[[], object]) -> str:
        with pytest.raises(kind) as info:
            fn()
        return str(info.value)
    return run
