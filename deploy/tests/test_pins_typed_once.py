"""No value of a resolved pin is typed outside the pin table (pins/repository_locations.bzl).

Here, not in pins/, because it reads the deploy wing's tables (generators/tables) besides the
build files: the pin table is the only place a digest, commit or sha256 is typed.
"""

from __future__ import annotations

from pins import table

COMMITTED = table.DEFAULT_PATH


def test_every_value_appears_once_in_the_tree() -> None:
    # No digest, commit or sha256 of a resolved row is typed anywhere else in the sources
    # (release records, generated compose files and locks are written by tools).
    root = COMMITTED.parent.parent
    values = [getattr(p, f) for p in table.load(COMMITTED).pins.values() if p.resolved
              for f in table.VALUE_FIELDS[p.kind]]
    sources = [p for p in root.rglob("*") if p.is_file() and p.suffix in (".bzl", ".bazel", ".py", ".toml")
               and p != COMMITTED and "WORKSPACE" not in p.name]
    sources += [root / "WORKSPACE"]
    for value in values:
        bare = value.removeprefix("sha256:")
        holders = [str(p.relative_to(root)) for p in sources if p.exists() and bare in p.read_text(errors="replace")]
        assert not holders, f"{value} is typed outside the pin table: {holders}"
