"""One entry point: every validator, with the right arguments, on the compose files given.

Every validator but the schema check reads Compose's canonical model of the file (the schema
judges the file as written; `config -q` judges it through the same binary).

    bazel run //deploy/validators:check -- compose/*.yaml

Runs structure, nginx, telemetry, services, runtime (Compose's canonical model) and the
production contract of the file's deployment on every file (with the file it derives from, when
its contract has one). Exit 0 only when every validator accepts every file; each validator
prints its own report.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Callable

from deploy.validators import (cli, nginx_check, prod_contract, runtime, services, structure,
                               telemetry)
from deploy.validators.compose_doc import LoadError, labels_map, load_compose, shared_reads
from deploy.validators.glm53_contract import CONTRACTS


def _workspace(sub: str) -> str:
    root = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    return str(Path(root) / sub) if root and (Path(root) / sub).exists() else ""


def deployment(path: Path) -> str | None:
    try:
        compose = load_compose(path)
    except LoadError:
        return None  # every validator reports the load error itself
    for service in compose.services.values():
        if isinstance(service, dict):
            name = labels_map(service.get("labels")).get("nearai.otel.deployment")
            if name:
                return name
    return None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--compose-bin", default=os.environ.get("COMPOSE_BIN", ""),
                   help="the pinned Docker Compose v2 binary")
    p.add_argument("--nginx-bin", default=os.environ.get("NGINX_BIN") or shutil.which(
        "nginx", path="/usr/sbin:/usr/bin") or "", help="nginx for `nginx -t` and the probe")
    p.add_argument("--releases-dir", default=os.environ.get("RELEASES_DIR") or _workspace(
        "recipes/releases"), help="release records (default under `bazel run`: recipes/releases)")
    p.add_argument("--series-dir", default=os.environ.get("SERIES_DIR") or _workspace("patches"),
                   help="patch series declarations (default under `bazel run`: patches)")
    p.add_argument("--compose-dir", default=os.environ.get("COMPOSE_DIR") or _workspace("compose"),
                   help="where a contract's source file is found (default: the file's own "
                        "directory, then the checkout's compose/)")
    p.add_argument("--source", help="the source file for the production contract's whole-file "
                   "rule (default: found by name next to the file or in --compose-dir)")


def _source(args: argparse.Namespace, path: Path, name: str) -> str | None:
    if args.source:
        return args.source
    for directory in (path.parent, Path(args.compose_dir) if args.compose_dir else None):
        if directory is not None and (directory / name).is_file():
            return str(directory / name)
    return None


def main(argv: list[str] | None = None) -> int:
    # Every validator reads every file: within this run each file is parsed and resolved
    # through the Compose binary once (compose_doc.shared_reads).
    with shared_reads():
        return _check(argv)


def _check(argv: list[str] | None) -> int:
    p = cli.parser("check", __doc__.splitlines()[0])
    add_arguments(p)
    args = p.parse_args(argv)
    if not args.compose_bin or not args.nginx_bin:
        p.error("--compose-bin and --nginx-bin are required (bazel run //deploy/validators:check sets them)")
    compose_bin = cli.tool_path(args.compose_bin)
    files = args.files
    failed = 0
    releases = ["--releases-dir", args.releases_dir] if args.releases_dir else []
    runs: list[tuple[Callable[[list[str]], int], list[str]]] = [
        (structure.main, ["--compose-bin", compose_bin, *files]),
        (nginx_check.main, ["--compose-bin", compose_bin, "--nginx-bin", args.nginx_bin, *files]),
        (telemetry.main, ["--compose-bin", compose_bin, *files]),
        (services.main, ["--compose-bin", compose_bin, *files]),
        (runtime.main, ["--compose-bin", compose_bin, "--nginx-bin", args.nginx_bin, *releases,
                        *(["--series-dir", args.series_dir] if args.series_dir else []), *files]),
    ]
    # Every file gets its deployment's contract; prod_contract itself fails a file whose
    # deployment has none (or a file it cannot load).
    for raw in files:
        contract = CONTRACTS.get(deployment(cli.user_path(raw)) or "")
        source_args: list[str] = []
        if contract is not None and contract.source is not None:
            source = _source(args, cli.user_path(raw), contract.source)
            if source is None:
                print(f"check: {raw}: the production contract derives this file from "
                      f"{contract.source}, found neither next to it nor in --compose-dir; pass "
                      "--source", file=sys.stderr)
                failed = 1
                continue
            source_args = ["--source", source]
        runs.append((prod_contract.main, ["--compose-bin", compose_bin, *releases, *source_args,
                                          raw]))
    for run, run_argv in runs:
        failed += run(run_argv) != 0
        sys.stdout.flush()
        sys.stderr.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
