"""buildifier over the repository's Starlark files (BUILD.bazel, *.bzl, WORKSPACE).

    starlark.py list ROOT                          # the files @starlark_files links (repository.bzl)
    starlark.py check --repo-file @starlark_files/tools_bazel   # the lint test (tree/**.lint beside it)

`check` fails on a file buildifier would reformat, naming it and the fix, and when the
buildifier on PATH is not the version tools/bazel pins (and installs). It also holds the load
rule Bazel 4 cannot state (no load visibility): a `private/` .bzl is loaded only from its own
area (the directory above `private/`), and //tools/oci:internal.bzl only from under tools/.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

FIX = "buildifier -r .   # from the repository root, then commit"


def is_starlark(name: str) -> bool:
    return name in ("BUILD", "BUILD.bazel", "WORKSPACE") or name.endswith(".bzl")


def file_type(name: str) -> str:
    """buildifier's --type of a file (the links carry a .lint suffix, so it is given explicitly)."""
    base = Path(name).name
    return "workspace" if base == "WORKSPACE" else "bzl" if base.endswith(".bzl") else "build"


def tree_files(root: Path) -> list[str]:
    """Starlark files of the main repository, as repository-relative paths, sorted.

    Skips Bazel's convenience symlinks, dot-directories and nested workspaces (the local
    repositories under third_party/ are other repositories)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "bazel-"))
                             and not (here / d / "WORKSPACE").exists())
        found += [(here / f).relative_to(root).as_posix() for f in filenames if is_starlark(f)]
    return sorted(found)


LOAD = re.compile(r'^load\(\s*"//([^:"]*):([^"]+)"', re.M)

# Helpers of the OCI rules for the rules under //tools (tools/oci/internal.bzl).
INTERNAL = {("tools/oci", "internal.bzl"): "tools/"}


def load_violations(files: dict[str, str]) -> list[str]:
    """files: repository path -> text. One line per load that breaks the rule (with the fix)."""
    out = []
    for path, text in sorted(files.items()):
        for package, name in LOAD.findall(text):
            label = f"//{package}:{name}"
            where = f"{package}/{name}"
            if "/private/" in f"/{where}":
                area = f"/{where}".split("/private/")[0].lstrip("/")
                if not path.startswith(area + "/"):
                    out.append(f"{path}: loads {label}, the private implementation of {area or '//'}; "
                               f"load {area}'s public defs.bzl (or its internal.bzl from under tools/) instead")
            prefix = INTERNAL.get((package, name))
            if prefix is not None and not path.startswith(prefix):
                out.append(f"{path}: loads {label}, which is for the rules under //tools; "
                           f"BUILD files load //{package}:defs.bzl")
    return out


def pinned_version(tools_bazel: Path) -> str:
    m = re.search(r"^readonly BUILDIFIER_VERSION=(\S+)$", tools_bazel.read_text(), re.M)
    if not m:
        raise SystemExit(f"{tools_bazel}: no `readonly BUILDIFIER_VERSION=` line")
    return m.group(1)


def check(repo: Path) -> int:
    """repo: @starlark_files (tools_bazel, tree/<the files>)."""
    tree, tools_bazel = repo / "tree", repo / "tools_bazel"
    tool = shutil.which("buildifier")
    want = pinned_version(tools_bazel)
    if tool is None:
        print(f"FAIL: buildifier is not on PATH; run ./tools/bazel once (it installs buildifier {want})")
        return 1
    version = subprocess.run([tool, "--version"], stdout=subprocess.PIPE, text=True, check=False).stdout
    got = re.search(r"buildifier version: (\S+)", version)
    if not got or got.group(1) != want:
        print(f"FAIL: {tool} is {got.group(1) if got else version.strip()!r}; tools/bazel pins {want} (run ./tools/bazel)")
        return 1
    files = sorted(str(f.relative_to(tree))[:-len(".lint")] for f in tree.rglob("*.lint"))
    if not files:
        print(f"FAIL: no Starlark files under {tree}")
        return 1
    broken = load_violations({f: (tree / (f + ".lint")).read_text() for f in files})
    if broken:
        print("\n".join(broken))
        print(f"FAIL: {len(broken)} load(s) break the defs.bzl / private/ rule (see above)")
        return 1
    unformatted = []
    for kind in ("build", "bzl", "workspace"):
        group = [f for f in files if file_type(f) == kind]
        if not group:
            continue
        done = subprocess.run([tool, "--mode=check", "--lint=off", f"--type={kind}", *(f + ".lint" for f in group)],
                              cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
        if done.returncode != 0:
            unformatted += [line.replace(".lint", "", 1) for line in done.stdout.splitlines()]
    if unformatted:
        print("\n".join(unformatted))
        print(f"FAIL: the files above are not formatted as buildifier {want} formats them. Fix: {FIX}")
        return 1
    print(f"PASS: {len(files)} Starlark files formatted (buildifier {want})")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("--repo-file", type=Path, required=True, help="@starlark_files//:tools_bazel in the runfiles")
    ls = sub.add_parser("list")
    ls.add_argument("root", type=Path)
    args = p.parse_args(argv)
    if args.cmd == "check":
        return check(args.repo_file.parent)
    print("\n".join(tree_files(args.root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
