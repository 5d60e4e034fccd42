"""Which area may use which: no Python import and no Bazel label runs from a lower area up.

    layering.py list ROOT                       # the .py files @python_files links (repository.bzl)
    layering.py check --repo-file @starlark_files/tools_bazel --repo-file @python_files/tools_bazel
                                                # the test (tree/**.lint beside each file)

The order (README.md "Layout", docs/decisions.md): an area may use an area of lower rank, never
one of its own rank or above (so the generator and the validators stay independent). lab sits
beside the deploy wing: neither uses the other. A use is a Python `import`/`from` of a
repository package, or a `//package` label in a BUILD or .bzl file outside comments,
docstrings and `bazel run|build|test` command texts. There are no exceptions: code two areas
share moves down to an area both may use.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

# (area, rank); the longest matching prefix is a path's area.
RANKS = {
    "third_party": 0,
    "tools": 1,
    "pins": 2,
    "recipes/bases": 3,  # the CPU-test bases: the patches' stock tests and bump check run on them
    "engine": 3,  # the package a series' hooks call (engine/glm53_offload), shipped by the chain
    "patches": 4,
    "tools/remote": 4,  # the remote-execution image (the CPU base's Debian roots) and its pinned platform
    "recipes": 5,
    "lab": 6,
    "generators": 6,  # the generator's tables and assets (data only)
    "deploy": 7,  # the release-record reader, the deployability gate
    "deploy/compose_gen": 8,
    "compose": 9,  # the committed compose files and their entry points
    "deploy/validators": 10,
    "deploy/rollout": 11,
}
# Pairs of areas that may not use each other whatever their rank.
APART = {("lab", "deploy"), ("lab", "compose")}

AREA_PACKAGES = sorted(RANKS, key=len, reverse=True)
IMPORT_RE = re.compile(r"^\s*(?:from|import)\s+([A-Za-z_][\w.]*)", re.M)
LABEL_RE = re.compile(r"(?<![@\w])//([a-z0-9_][a-z0-9_/.-]*)?")
DOCSTRING_RE = re.compile(r'"""[\s\S]*?"""')
COMMAND_RE = re.compile(r"bazel (?:run|build|test)\b[^\"'\n]*")
SUFFIX = ".lint"  # the repository links carry it (a link named BUILD.bazel would be a package)


def area_of(path: str) -> str | None:
    path = path.strip("/") + "/"
    return next((a for a in AREA_PACKAGES if path.startswith(a + "/")), None)


def _module_area(module: str) -> str | None:
    return area_of(module.replace(".", "/"))


def uses(path: str, text: str) -> set[str]:
    """The areas `path` (repository-relative) uses, by import or label."""
    found: set[str] = set()
    if path.endswith(".py"):
        found = {a for m in IMPORT_RE.findall(text) if (a := _module_area(m))}
    elif Path(path).name in ("BUILD", "BUILD.bazel") or path.endswith(".bzl"):
        for line in DOCSTRING_RE.sub("", text).splitlines():
            code = COMMAND_RE.sub("", line.split("#", 1)[0])
            found |= {a for p in LABEL_RE.findall(code) if (a := area_of(p or ""))}
    return found


def violations(files: dict[str, str]) -> list[str]:
    """files: repository path -> text. One line per arrow up (or between areas kept apart)."""
    out = []
    for path, text in sorted(files.items()):
        here = area_of(path)
        if here is None:
            continue
        for used in sorted(uses(path, text) - {here}):
            apart = (here.split("/")[0], used.split("/")[0]) in APART | {(b, a) for a, b in APART}
            if apart or RANKS[used] >= RANKS[here]:
                why = "lab and the deploy wing stay apart" if apart else \
                    f"{used} (rank {RANKS[used]}) is not below {here} (rank {RANKS[here]})"
                out.append(f"{path}: uses {used}: {why}; move the shared code down to an area "
                           "both may use (tools/lint/layering.py RANKS states the order)")
    return out


def is_python(name: str) -> bool:
    return name.endswith(".py")


def tree_files(root: Path) -> list[str]:
    """The main repository's .py files (as starlark.py tree_files: no convenience symlinks,
    dot-directories or nested workspaces)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "bazel-"))
                             and not (here / d / "WORKSPACE").exists())
        found += [(here / f).relative_to(root).as_posix() for f in filenames if is_python(f)]
    return sorted(found)


def read_trees(trees: list[Path]) -> dict[str, str]:
    files = {}
    for tree in trees:
        for link in tree.rglob("*" + SUFFIX):
            files[link.relative_to(tree).as_posix().removesuffix(SUFFIX)] = link.read_text(errors="replace")
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list").add_argument("root", type=Path)
    check = sub.add_parser("check")
    check.add_argument("--repo-file", type=Path, action="append", required=True,
                       help="a file of @starlark_files / @python_files (its tree/ is beside it)")
    args = parser.parse_args(argv)
    if args.command == "list":
        print("\n".join(tree_files(args.root)))
        return 0
    trees = [f.parent / "tree" for f in args.repo_file]
    files = read_trees(trees)
    if not files:
        print(f"no files under {', '.join(map(str, trees))}", file=sys.stderr)
        return 2
    found = violations(files)
    print("\n".join(found) if found else f"{len(files)} files: no arrow runs up")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
