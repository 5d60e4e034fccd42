"""The verdicts of suite.judge on hand-written reports."""

from __future__ import annotations

import pytest

from tools.podman.suite import STOCK_MARKER, SuiteError, CaseResult, judge, summary_line

MARK = (STOCK_MARKER,)


def r(nodeid: str, outcome: str, markers=()) -> CaseResult:
    return CaseResult(nodeid, outcome, tuple(markers))


def test_all_pass_accepts_passes_and_plain_skips() -> None:
    verdict = judge([r("a", "passed", MARK), r("b", "passed"), r("c", "skipped")], "all-pass")
    assert verdict.total == 3 and verdict.stock_bug_tests == 1
    assert "3 tests" in summary_line(verdict)


@pytest.mark.parametrize("outcome", ["failed", "error", "collection-error", "xpassed", "not-run"])
def test_all_pass_rejects_any_failure(outcome: str) -> None:
    with pytest.raises(SuiteError, match="b: " + outcome):
        judge([r("a", "passed"), r("b", outcome)], "all-pass")


def test_all_pass_rejects_a_skipped_stock_bug_test() -> None:
    with pytest.raises(SuiteError, match="must run on the patched image"):
        judge([r("a", "passed"), r("b", "skipped", MARK)], "all-pass")


def test_empty_run_is_an_error() -> None:
    for expectation in ("all-pass", "stock-bugs", "none"):
        with pytest.raises(SuiteError, match="no tests were collected"):
            judge([], expectation)


def test_stock_accepts_exactly_the_marked_failures() -> None:
    verdict = judge([r("a", "failed", MARK), r("b", "error", MARK), r("c", "passed"), r("d", "skipped")],
                    "stock-bugs")
    assert verdict.stock_bug_tests == 2


def test_stock_rejects_a_marked_test_that_passes() -> None:
    with pytest.raises(SuiteError, match="a: passed on stock.*no longer detects"):
        judge([r("a", "passed", MARK), r("b", "failed", MARK)], "stock-bugs")


def test_stock_rejects_a_marked_test_that_skips() -> None:
    with pytest.raises(SuiteError, match="a: skipped on stock"):
        judge([r("a", "skipped", MARK), r("b", "failed", MARK)], "stock-bugs")


def test_stock_rejects_an_unmarked_failure() -> None:
    with pytest.raises(SuiteError, match="c: failed on stock, but it is not marked"):
        judge([r("a", "failed", MARK), r("c", "failed")], "stock-bugs")


def test_stock_rejects_a_suite_without_markers() -> None:
    with pytest.raises(SuiteError, match="proves nothing"):
        judge([r("a", "passed")], "stock-bugs")


def test_none_records_any_outcome_without_judging() -> None:
    results = [r("a", "passed", MARK), r("b", "failed", MARK), r("c", "failed"), r("d", "collection-error")]
    verdict = judge(results, "none")
    assert verdict.total == 4 and verdict.counts == {"passed": 1, "failed": 2, "collection-error": 1}
    with pytest.raises(SuiteError, match="no tests were collected"):
        judge([], "none")
