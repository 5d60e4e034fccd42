"""Runs pytest inside the image and writes a JSON report of every test's outcome and markers.

Copied into the container read-only by run_in_image.py, with tools/python/pytest_shard.py
beside it; needs only the image's Python and its pytest. A sharded target's shard (Bazel's
TEST_TOTAL_SHARDS / TEST_SHARD_INDEX, passed in by the runner) runs and reports only its
tests. The report lets the host decide what a run means (e.g. "on the stock image, exactly the
tests marked detects_stock_bug fail") without parsing pytest's text output.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import pytest
from pytest_shard import Shard


def _crash_message(report) -> str:
    """The one line pytest puts after `E` first (e.g. "AssertionError: ..."), kept short."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 200 else line[:197] + "..."


class _Recorder:
    """Pytest plugin: one entry per test node with its markers and final outcome."""

    def __init__(self) -> None:
        self.tests: dict[str, dict] = {}

    def pytest_collection_finish(self, session) -> None:
        # session.items is what runs: after `-m`/`-k` deselection, so a
        # deselected test is neither reported nor counted as not run.
        for item in session.items:
            self.tests[item.nodeid] = {
                "nodeid": item.nodeid,
                "markers": sorted({mark.name for mark in item.iter_markers()}),
                "outcome": "not-run",
            }

    def pytest_runtest_logreport(self, report) -> None:
        entry = self.tests.setdefault(
            report.nodeid, {"nodeid": report.nodeid, "markers": [], "outcome": "not-run"}
        )
        if report.when == "call":
            if hasattr(report, "wasxfail"):
                entry["outcome"] = "xfailed" if report.skipped else "xpassed"
            else:
                entry["outcome"] = report.outcome
        elif report.failed:
            entry["outcome"] = "error"  # setup/teardown failure
        elif report.skipped and entry["outcome"] == "not-run":
            entry["outcome"] = "skipped"
        if report.failed and "message" not in entry:
            entry["message"] = _crash_message(report)

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self.tests[report.nodeid] = {
                "nodeid": report.nodeid,
                "markers": [],
                "outcome": "collection-error",
                "message": _crash_message(report),
            }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--report", required=True, help="where to write the JSON report")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- then pytest arguments")
    args = parser.parse_args(argv)
    pytest_args = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    recorder = _Recorder()
    shard = Shard.from_env(os.environ)
    exit_code = int(pytest.main(pytest_args, plugins=[recorder] + ([shard] if shard else [])))
    report = {
        "exit_code": exit_code,
        "python": sys.version.split()[0],
        "pytest": pytest.__version__,
        "tests": sorted(recorder.tests.values(), key=lambda t: t["nodeid"]),
    }
    with open(args.report, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1, sort_keys=True)
    return exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
