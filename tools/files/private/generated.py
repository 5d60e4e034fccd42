"""The two halves of generated_files (//tools/files:defs.bzl).

  generated.py update --package PKG --tree DIR --update-label LABEL FILE...   (bazel run NAME.update)
  generated.py check  --package PKG --tree DIR --update-label LABEL FILE...   (NAME_test)

DIR holds what the generator wrote, by path relative to PKG; FILE... are the committed files,
relative to PKG. `update` writes DIR's files into $BUILD_WORKSPACE_DIRECTORY/PKG and deletes the
listed files DIR lacks; `check` exits 1 with a unified diff per difference and `bazel run LABEL`.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from pathlib import Path

from tools.files import atomic


def generated(tree: Path) -> dict[str, bytes]:
    return {p.relative_to(tree).as_posix(): p.read_bytes()
            for p in sorted(tree.rglob("*")) if p.is_file()}


def diff(package: str, name: str, committed: bytes | None, new: bytes | None) -> str:
    if committed is not None and new is not None:
        try:
            old_lines = committed.decode("utf-8").splitlines(keepends=True)
            new_lines = new.decode("utf-8").splitlines(keepends=True)
        except UnicodeDecodeError:
            return f"{package}/{name}: the committed bytes differ from the generated ones\n"
        return "".join(difflib.unified_diff(old_lines, new_lines, f"a/{package}/{name}",
                                            f"b/{package}/{name}"))
    if new is None:
        return f"{package}/{name} is committed but no longer generated: delete it\n"
    return f"{package}/{name} is generated but not committed: add it\n"


def check(package: str, tree: Path, committed: list[str], command: str) -> int:
    new = generated(tree)
    problems = []
    for name in sorted(set(new) | set(committed)):
        old = (Path(package) / name).read_bytes() if name in committed else None
        if old != new.get(name):
            problems.append(diff(package, name, old, new.get(name)))
    if problems:
        sys.stdout.write("".join(problems))
        print(f"\n{package}/: {len(problems)} committed file(s) differ from what the generator "
              f"writes: run `{command}` and commit the result", file=sys.stderr)
        return 1
    print(f"{len(new)} generated files in {package}/ are up to date")
    return 0


def update(package: str, tree: Path, committed: list[str], command: str) -> int:
    workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    if not workspace:
        print(f"error: not under `bazel run`; run `{command}`", file=sys.stderr)
        return 2
    root = Path(workspace) / package
    new = generated(tree)
    for name, data in new.items():
        path = root / name
        if not path.is_file() or path.read_bytes() != data:
            atomic.write_bytes(path, data)
            print(f"wrote {package}/{name}")
    for name in sorted(set(committed) - set(new)):
        if (root / name).exists():
            (root / name).unlink()
            print(f"deleted {package}/{name} (no longer generated)")
    print(f"{len(new)} generated files in {package}/ are up to date")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("update", "check"))
    parser.add_argument("--package", required=True)
    parser.add_argument("--tree", type=Path, required=True)
    parser.add_argument("--update-label", required=True, help="//PKG:NAME.update")
    parser.add_argument("files", nargs="*")
    args = parser.parse_intermixed_args(argv)
    run = update if args.mode == "update" else check
    return run(args.package, args.tree, args.files, f"bazel run {args.update_label}")


if __name__ == "__main__":
    sys.exit(main())
