import json
import subprocess
import sys
from pathlib import Path

from tools.ci.test_summary import read_events, summarize


def _event(kind: str, label: str, **body) -> dict:
    return {"id": {kind: {"label": label}}, **body}


def test_counts_passed_cached_and_failed_targets(tmp_path: Path) -> None:
    events = [
        _event("targetCompleted", "//a:t", completed={"success": True, "testTimeoutSeconds": "60"}),
        _event("testSummary", "//a:t", testSummary={"overallStatus": "PASSED"}),
        _event("targetCompleted", "//b:t", completed={"success": True, "testTimeoutSeconds": "60"}),
        _event("testSummary", "//b:t", testSummary={"overallStatus": "FAILED"}),
        _event("testSummary", "//c:t", testSummary={"overallStatus": "TIMEOUT"}),
    ]
    summary = summarize(events)
    assert summary.line() == "1 passed, 2 failed"
    assert summary.failed == {"//b:t": "FAILED", "//c:t": "TIMEOUT"}


def test_aborted_and_silent_test_targets_are_failures() -> None:
    events = [
        {"id": {"targetCompleted": {"label": "//x:t"}}, "aborted": {"reason": "SKIPPED"}},
        _event("targetCompleted", "//y:t", completed={"success": True, "testTimeoutSeconds": "300"}),
    ]
    summary = summarize(events)
    assert summary.line() == "0 passed, 2 failed"
    assert summary.failed["//y:t"] == "NO_STATUS"


def test_cli_prints_plain_line_and_exit_code(tmp_path: Path) -> None:
    bep = tmp_path / "bep.json"
    bep.write_text(json.dumps(_event("testSummary", "//a:t", testSummary={"overallStatus": "PASSED"})) + "\n")
    proc = subprocess.run([sys.executable, "-m", "tools.ci.test_summary", str(bep)], capture_output=True, text=True)
    assert proc.stdout.splitlines()[-1] == "1 passed, 0 failed"
    assert proc.returncode == 0
    assert read_events(bep)[0]["id"]["testSummary"]["label"] == "//a:t"


def test_failed_build_without_test_results_counts_as_a_failure(tmp_path: Path) -> None:
    bep = tmp_path / "bep.json"
    bep.write_text(json.dumps(_event("testSummary", "//a:t", testSummary={"overallStatus": "PASSED"})) + "\n")
    proc = subprocess.run(
        [sys.executable, "-m", "tools.ci.test_summary", str(bep), "--bazel-exit-code", "1"],
        capture_output=True, text=True,
    )
    assert proc.stdout.splitlines()[-1] == "1 passed, 1 failed"
    assert proc.returncode == 1


def test_flaky_pass_of_a_declared_flaky_target_counts_as_passed_and_is_listed(tmp_path: Path) -> None:
    bep = tmp_path / "bep.json"
    bep.write_text(json.dumps(_event("testSummary", "//a:t", testSummary={"overallStatus": "FLAKY"})) + "\n")
    declared = tmp_path / "flaky.txt"
    declared.write_text("//a:t\n")
    proc = subprocess.run(
        [sys.executable, "-m", "tools.ci.test_summary", str(bep), "--declared-flaky", str(declared)],
        capture_output=True, text=True,
    )
    assert proc.stdout.splitlines() == ["executed 0 of 0 tests", "FLAKY //a:t: passed only on a retry", "1 passed, 0 failed"]
    assert proc.returncode == 0


def test_flaky_result_of_a_target_not_declared_flaky_is_a_failure(tmp_path: Path) -> None:
    # e.g. --flaky_test_attempts retried a deterministic test: its failed attempt is real.
    bep = tmp_path / "bep.json"
    bep.write_text(
        json.dumps(_event("testSummary", "//a:t", testSummary={"overallStatus": "FLAKY"})) + "\n"
        + json.dumps(_event("testSummary", "//b:t", testSummary={"overallStatus": "FLAKY"})) + "\n"
    )
    declared = tmp_path / "flaky.txt"
    declared.write_text("//b:t\n")
    proc = subprocess.run(
        [sys.executable, "-m", "tools.ci.test_summary", str(bep), "--declared-flaky", str(declared)],
        capture_output=True, text=True,
    )
    assert proc.stdout.splitlines() == [
        "executed 0 of 0 tests",
        "FLAKY //b:t: passed only on a retry",
        "FAILED //a:t: FLAKY, but not declared flaky: an attempt failed",
        "1 passed, 1 failed",
    ]
    assert proc.returncode == 1


def test_without_a_flaky_list_every_flaky_result_is_a_failure() -> None:
    summary = summarize([_event("testSummary", "//a:t", testSummary={"overallStatus": "FLAKY"})])
    assert summary.line() == "0 passed, 1 failed"


def _result(label: str, **body) -> dict:
    return {"id": {"testResult": {"label": label, "run": 1, "shard": 1, "attempt": 1}},
            "testResult": {"status": "PASSED", **body}}


def test_counts_the_tests_that_ran_here_not_the_cached_ones(tmp_path: Path) -> None:
    # The shapes Bazel writes: an action-cache hit sets cachedLocally, a disk-cache hit
    # executionInfo.cachedRemotely; a run has neither.
    events = [
        _result("//a:t", cachedLocally=True, executionInfo={}),
        _result("//b:t", executionInfo={"strategy": "remote-cache", "cachedRemotely": True}),
        _result("//c:t", executionInfo={"strategy": "linux-sandbox", "exitCode": 0}),
    ] + [_event("testSummary", label, testSummary={"overallStatus": "PASSED"}) for label in ("//a:t", "//b:t", "//c:t")]
    bep = tmp_path / "bep.json"
    bep.write_text("".join(json.dumps(e) + "\n" for e in events))
    proc = subprocess.run([sys.executable, "-m", "tools.ci.test_summary", str(bep)], capture_output=True, text=True)
    assert proc.stdout.splitlines() == ["executed 1 of 3 tests: //c:t; 2 cached results", "3 passed, 0 failed"]
    assert summarize(events).executed == {"//c:t"}
