"""Reads the text assets (scripts, configs) and fills their @@NAME@@ markers."""

from __future__ import annotations

import re
from pathlib import Path

from .errors import GenerationError

# The assets keep their path: the committed compose files name it in comments.
ASSETS_DIR = Path(__file__).absolute().parents[2] / "generators" / "assets"
MARKER_RE = re.compile(r"@@([A-Z_]+)@@")


def read(name: str, assets_dir: Path = ASSETS_DIR) -> str:
    try:
        return (assets_dir / name).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise GenerationError(f"asset {assets_dir / name} is missing") from None


def render(name: str, assets_dir: Path = ASSETS_DIR, **values: str) -> str:
    """The asset with every @@NAME@@ replaced; every marker and every value must be used."""
    text = read(name, assets_dir)
    used = set(MARKER_RE.findall(text))
    missing = used - values.keys()
    unused = values.keys() - used
    if missing or unused:
        raise GenerationError(f"asset {name}: markers without values {sorted(missing)}, "
                              f"values without markers {sorted(unused)}")
    return MARKER_RE.sub(lambda m: values[m.group(1)], text)
