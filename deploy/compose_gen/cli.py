"""Command line: generate the compose files into a directory, or print one.

The committed files are written and checked by //compose:files.update and //compose:files_test
(generated_files, //tools/files:defs.bzl), which run this program as a build action.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from deploy.releases import ReleaseError, load_bindings

from .errors import GenerationError
from .generate import COMMON_TABLE, default_deployment_tables, generate_all


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="compose-generate",
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
    mode.add_argument("--out-dir", type=Path, help="write every generated file into this directory")
    mode.add_argument("--print", metavar="FILE", dest="print_file",
                      help="print one generated file to stdout")
    return parser.parse_args(argv)


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
        args.out_dir.mkdir(parents=True, exist_ok=True)
        for name, out in sorted(outputs.items()):
            (args.out_dir / name).write_text(out.text, encoding="utf-8")
        return 0
    except (GenerationError, ReleaseError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
