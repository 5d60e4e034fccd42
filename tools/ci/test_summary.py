"""Prints `N passed, N failed` for a `bazel test` run from its build event protocol JSON file.

Bazel's own closing summary ("Executed N out of M tests") is not a line CI recognizes, so
.ci/run passes `--build_event_json_file` and calls this. Every test target counts once: PASSED
(cached or not) is a pass; FLAKY (passed on a retry) is a pass, listed, only for a target
declared `flaky` (--declared-flaky, written by .ci/run from
`bazel query 'attr(flaky, 1, tests(//...))'`): a target not declared flaky that failed an
attempt has a real, intermittent failure, and counts as failed. FAILED, TIMEOUT, INCOMPLETE,
REMOTE_FAILURE, FAILED_TO_BUILD, NO_STATUS and tests that were aborted before running are
failures. Before that line it says how many test targets ran an attempt in this invocation, and
which (a result from the action cache or the disk cache is not a run): the count a second run
in the same clone must keep at 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

UNDECLARED_FLAKY = "FLAKY, but not declared flaky: an attempt failed"


@dataclass
class Summary:
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    flaky: list[str] = field(default_factory=list)
    executed: set[str] = field(default_factory=set)  # ran an attempt here, not served from a cache
    reported: set[str] = field(default_factory=set)  # have a test result at all

    def line(self) -> str:
        return f"{len(self.passed)} passed, {len(self.failed)} failed"


def summarize(events: list[dict], declared_flaky: frozenset[str] = frozenset()) -> Summary:
    summary = Summary()
    test_targets: set[str] = set()
    for event in events:
        ident = event.get("id", {})
        if "targetCompleted" in ident and event.get("completed", {}).get("testTimeoutSeconds") is not None:
            test_targets.add(ident["targetCompleted"]["label"])
        if "testResult" in ident:
            label = ident["testResult"]["label"]
            result = event.get("testResult", {})
            summary.reported.add(label)
            if not result.get("cachedLocally") and not result.get("executionInfo", {}).get("cachedRemotely"):
                summary.executed.add(label)
        if "testSummary" in ident:
            label = ident["testSummary"]["label"]
            test_targets.add(label)
            status = event.get("testSummary", {}).get("overallStatus", "NO_STATUS")
            if status == "PASSED":
                summary.passed.append(label)
            elif status == "FLAKY" and label in declared_flaky:
                summary.passed.append(label)
                summary.flaky.append(label)
            elif status == "FLAKY":
                summary.failed[label] = UNDECLARED_FLAKY
            else:
                summary.failed[label] = status
        elif "targetCompleted" in ident and "aborted" in event:
            label = ident["targetCompleted"]["label"]
            summary.failed.setdefault(label, "ABORTED: " + event["aborted"].get("reason", "unknown"))
    for label in sorted(test_targets - set(summary.passed) - set(summary.failed)):
        summary.failed[label] = "NO_STATUS"  # built or configured, never reported a result
    return summary


def read_events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_labels(path: Path) -> frozenset[str]:
    """One label a line, as `bazel query --output=label` prints them."""
    return frozenset(line.strip() for line in path.read_text().splitlines() if line.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bep_json", type=Path, help="file written by --build_event_json_file")
    parser.add_argument("--bazel-exit-code", type=int, default=0, help="exit code of the bazel test run")
    parser.add_argument(
        "--declared-flaky", type=Path,
        help="labels of the test targets declared flaky, one a line; without it every FLAKY is a failure",
    )
    args = parser.parse_args(argv)
    declared = read_labels(args.declared_flaky) if args.declared_flaky else frozenset()
    summary = summarize(read_events(args.bep_json) if args.bep_json.exists() else [], declared)
    if args.bazel_exit_code != 0 and not summary.failed:
        # The build failed before any test could report (an analysis error, a failed fetch).
        summary.failed["(build)"] = f"bazel exited with {args.bazel_exit_code}; see its output above"
    cached = len(summary.reported) - len(summary.executed)
    print(f"executed {len(summary.executed)} of {len(summary.reported)} tests"
          + (f": {', '.join(sorted(summary.executed))}" if 0 < len(summary.executed) <= 20 else "")
          + (f"; {cached} cached results" if cached else ""))
    for label in summary.flaky:
        print(f"FLAKY {label}: passed only on a retry")
    for label, status in sorted(summary.failed.items()):
        print(f"FAILED {label}: {status}")
    print(summary.line())
    return 0 if not summary.failed else 1


if __name__ == "__main__":
    sys.exit(main())
