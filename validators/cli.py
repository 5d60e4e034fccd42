"""Shared command-line plumbing: path resolution under `bazel run`, loading, exit codes."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Callable, Sequence

from validators.compose_doc import ComposeFile, Finding, LoadError, Report, load_compose

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


def run(validator: str, args: argparse.Namespace, check: Check) -> int:
    """Loads each file, runs `check`, prints every finding; exit 1 when any file fails."""
    report = Report(validator)
    for raw in args.files:
        path = user_path(raw)
        try:
            compose = load_compose(path, label=raw)
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
         argv: Sequence[str] | None = None) -> int:
    p = parser(validator, description)
    if add_arguments:
        add_arguments(p)
    return run(validator, p.parse_args(argv), check)
