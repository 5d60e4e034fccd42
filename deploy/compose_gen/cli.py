"""Command line: generate the compose files, write them, or check the committed ones."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from deploy.releases import ReleaseError, load_bindings
from tools.files import atomic

from .errors import GenerationError
from .generate import (COMMON_TABLE, UPDATE_COMMAND, default_deployment_tables, drift,
                       generate_all)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="compose-update",
        description="Generate the GLM-5.3 compose files from generators/tables/*.toml and the "
                    "release records of the engine images.")
    parser.add_argument("--release", action="append", default=[], metavar="NAME=PATH",
                        help="bind a recipe name used in the tables (e.g. glm53_v3) to its "
                             "release record JSON; repeat per recipe")
    parser.add_argument("--common", type=Path, default=COMMON_TABLE,
                        help="shared table (default: %(default)s)")
    parser.add_argument("--deployment", action="append", type=Path, default=[],
                        metavar="TABLE", help="deployment table; repeatable (default: every "
                        "table in generators/tables/ except common.toml)")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true",
                      help="write the files into --compose-dir (default: "
                           "$BUILD_WORKSPACE_DIRECTORY/compose under `bazel run`)")
    mode.add_argument("--check", action="store_true",
                      help="exit 1 with a unified diff when --compose-dir differs")
    mode.add_argument("--print", metavar="FILE", dest="print_file",
                      help="print one generated file to stdout")
    parser.add_argument("--compose-dir", type=Path,
                        help="directory of the committed compose files")
    return parser.parse_args(argv)


def compose_dir(args: argparse.Namespace) -> Path:
    if args.compose_dir is not None:
        return args.compose_dir
    workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    if not workspace:
        raise GenerationError("no --compose-dir and not under `bazel run` "
                              f"(BUILD_WORKSPACE_DIRECTORY unset); run `{UPDATE_COMMAND}`")
    return Path(workspace) / "compose"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        records = load_bindings(args.release)
        outputs = generate_all(args.deployment or default_deployment_tables(), records,
                               args.common)
        if args.print_file:
            if args.print_file not in outputs:
                raise GenerationError(f"no table generates {args.print_file}; generated: "
                                      + ", ".join(sorted(outputs)))
            sys.stdout.write(outputs[args.print_file].text)
            return 0
        directory = compose_dir(args)
        if args.write:
            for name, out in sorted(outputs.items()):
                atomic.write_text(directory / name, out.text)
                print(f"wrote {directory / name}")
            return 0
        problems = drift(directory, outputs)
        if problems:
            sys.stdout.write("".join(problems))
            print(f"\ncompose files are out of date: run `{UPDATE_COMMAND}` and commit compose/",
                  file=sys.stderr)
            return 1
        print(f"{len(outputs)} compose files up to date")
        return 0
    except (GenerationError, ReleaseError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
