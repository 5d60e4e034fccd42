"""Shared command-line plumbing: path resolution under `bazel run`, loading, exit codes."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from deploy.validators.compose_doc import ComposeFile, Finding, LoadError, Report, load_compose
from deploy.validators.model import compose_json

# A check gets one loaded file plus the parsed arguments and returns its findings.
Check = Callable[[ComposeFile, argparse.Namespace], list[Finding]]


def user_path(raw: str) -> Path:
    """Resolves a path the user typed: `bazel run` starts us in the runfiles tree, not their cwd."""
    path = Path(raw).expanduser()
    if path.is_absolute():
        return path
    base = os.environ.get("BUILD_WORKING_DIRECTORY")
    return Path(base) / path if base else path.absolute()


def tool_path(raw: str) -> str:
    """Tool locations given as runfiles-relative labels become absolute before any cwd change."""
    path = Path(raw)
    return str(path if path.is_absolute() else path.absolute())


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("files", nargs="+", metavar="COMPOSE_FILE", help="compose files to validate")
    return p


def add_compose_bin(p: argparse.ArgumentParser) -> None:
    p.add_argument("--compose-bin", default=os.environ.get("COMPOSE_BIN", ""),
                   help="the pinned Docker Compose v2 binary whose canonical model the rules read "
                        "(default: $COMPOSE_BIN)")


def load(raw: str, compose_bin: str | None) -> ComposeFile:
    """The file parsed (YAML errors with line and column), then, with `compose_bin`, its document
    replaced by Compose's canonical model (`--no-interpolate`: merges and anchors resolved by
    Compose, `${VAR}` references kept for the rules that compare them)."""
    compose = load_compose(user_path(raw), label=raw)
    if compose_bin:
        try:
            compose.doc = compose_json(compose.path, tool_path(compose_bin), interpolate=False)
        except LoadError as exc:
            raise LoadError(f"{raw}: {exc}") from None
    return compose


def run(validator: str, args: argparse.Namespace, check: Check,
        compose_bin: str | None = None, loader: Callable[[str, str | None], Any] = load) -> int:
    """Loads each file with `loader` (by default `load`: Compose's model with `compose_bin`), runs
    `check`, prints every finding; exit 1 when any file fails."""
    report = Report(validator)
    for raw in args.files:
        try:
            compose = loader(raw, compose_bin)
        except LoadError as exc:
            report.findings.append(Finding(raw, "", str(exc).removeprefix(f"{raw}: ")))
            continue
        findings = check(compose, args)
        if findings:
            report.extend(findings)
        else:
            report.ok_files.append(raw)
    text = report.render()
    stream = sys.stderr if report.findings else sys.stdout
    print(text, file=stream)
    return 1 if report.findings else 0


def main(validator: str, description: str, check: Check,
         add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
         argv: Sequence[str] | None = None, canonical: bool = True) -> int:
    """With `canonical`, the rules read Compose's model (`--compose-bin` required)."""
    p = parser(validator, description)
    if canonical:
        add_compose_bin(p)
    if add_arguments:
        add_arguments(p)
    args = p.parse_args(argv)
    if canonical and not args.compose_bin:
        p.error("--compose-bin (or $COMPOSE_BIN) is required: the rules read Compose's model")
    return run(validator, args, check, args.compose_bin if canonical else None)
