"""Judges a pytest report written by in_image/pytest_driver.py against an expectation.

Three expectations:
  all-pass    the patched image: every test passes (skips are reported, never counted as
              passes of a detects_stock_bug test), at least one test ran.
  stock-bugs  the stock image: exactly the tests marked `detects_stock_bug` fail, every other
              test passes or skips. A marked test that passes on stock means the test no
              longer detects its bug; an unmarked failure means the suite or the image broke.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

STOCK_MARKER = "detects_stock_bug"
EXPECTATIONS = ("all-pass", "stock-bugs", "none")
# Set in the suite's container to the expectation, so a suite can make the failures it is
# expected to have fail fast (patches/v3/tests/conftest.py shortens their holds).
EXPECTATION_ENV = "GLM53_SUITE_EXPECT"
_FAILED = {"failed", "error", "collection-error", "xpassed", "not-run"}
_OK = {"passed", "skipped", "xfailed"}


class SuiteError(Exception):
    """The run did not meet its expectation; the message lists every offending test."""


@dataclass(frozen=True)
class CaseResult:
    nodeid: str
    outcome: str
    markers: tuple[str, ...]


@dataclass(frozen=True)
class Verdict:
    expectation: str
    total: int
    counts: dict[str, int]
    stock_bug_tests: int


def load_report(path: Path) -> list[CaseResult]:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SuiteError(
            f"{path}: no report; pytest did not run inside the image (see the output above)"
        ) from None
    return [
        CaseResult(t["nodeid"], t["outcome"], tuple(t.get("markers", ()))) for t in data["tests"]
    ]


def judge(results: list[CaseResult], expectation: str) -> Verdict:
    if expectation not in EXPECTATIONS:
        raise ValueError(f"unknown expectation {expectation!r}; use one of {EXPECTATIONS}")
    if not results:
        raise SuiteError("no tests were collected: the suite path is wrong or empty")
    counts: dict[str, int] = {}
    for result in results:
        counts[result.outcome] = counts.get(result.outcome, 0) + 1
    marked = [r for r in results if STOCK_MARKER in r.markers]
    problems: list[str] = []
    if expectation == "all-pass":
        problems += [f"{r.nodeid}: {r.outcome}" for r in results if r.outcome not in _OK]
        problems += [
            f"{r.nodeid}: skipped, but it is marked {STOCK_MARKER} and must run on the patched image"
            for r in marked
            if r.outcome == "skipped"
        ]
        if not any(r.outcome == "passed" for r in results):
            problems.append("no test passed")
    elif expectation == "stock-bugs":
        if not marked:
            problems.append(f"no test is marked {STOCK_MARKER}; the stock run proves nothing")
        for r in results:
            if STOCK_MARKER in r.markers and r.outcome not in ("failed", "error"):
                problems.append(
                    f"{r.nodeid}: {r.outcome} on stock, but it is marked {STOCK_MARKER}:"
                    " it no longer detects the bug (fix the test or drop the marker)"
                )
            elif STOCK_MARKER not in r.markers and r.outcome in _FAILED:
                problems.append(
                    f"{r.nodeid}: {r.outcome} on stock, but it is not marked {STOCK_MARKER}"
                    " (mark it if it detects a stock bug, else fix it)"
                )
    if problems:
        raise SuiteError(
            f"expectation {expectation!r} not met ({len(problems)} problem(s)):\n  "
            + "\n  ".join(problems)
        )
    return Verdict(expectation, len(results), counts, len(marked))


def summary_line(verdict: Verdict) -> str:
    parts = ", ".join(f"{n} {k}" for k, n in sorted(verdict.counts.items()))
    return (
        f"in-image suite OK ({verdict.expectation}): {verdict.total} tests: {parts};"
        f" {verdict.stock_bug_tests} marked {STOCK_MARKER}"
    )
