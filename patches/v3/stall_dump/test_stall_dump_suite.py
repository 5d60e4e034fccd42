"""Runs stall_dump_suite.py (child-process scenarios) and requires 0 failures
and exactly the checks listed in expected_checks.txt, one test per group.

The suite is run as a subprocess so that its children never share this
process's faulthandler timer (pytest's faulthandler_timeout uses the same
one).  The sglang tree under test is the first one on this process's sys.path.

deterministic: every blocked loop is released by an event only the module
under test can cause (it wrote dump N), and every assertion holds however
slow the machine is.  timing (``@pytest.mark.timing``): the GIL-held
backstop, first-dump delay, spin CPU share and watcher poll rate, which need
a clock; run them in a target allowed to retry.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import List, Set, Tuple

import pytest

HERE = Path(__file__).resolve().parent
SUITE = HERE / "stall_dump_suite.py"
EXPECTED = HERE / "expected_checks.txt"
SUITE_TIMEOUT_S = 420


def _expected(group: str) -> Set[Tuple[str, str]]:
    rows = [line.split("\t") for line in EXPECTED.read_text().splitlines() if line]
    return {(scenario, check) for g, scenario, check in rows if g == group}


def _run_suite(group: str, tmp_path: Path) -> List[dict]:
    env = dict(os.environ)
    # Hand the children exactly the sys.path this test sees (e.g. the
    # patched tree first), not only what PYTHONPATH said.
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    results = tmp_path / "results.json"
    proc = subprocess.Popen(
        [sys.executable, str(SUITE), "--group", group, "--json", str(results)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output, _ = proc.communicate(timeout=SUITE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        # SIGTERM lets the suite kill its children's process groups.
        proc.send_signal(signal.SIGTERM)
        try:
            output, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
        pytest.fail(f"suite did not finish in {SUITE_TIMEOUT_S}s:\n{output[-4000:]}")
    print(output)
    assert results.is_file(), f"no results (rc={proc.returncode}):\n{output[-4000:]}"
    checks = json.loads(results.read_text())
    failures = [
        f"{r['scenario']}: {r['check']} -- {r['detail']}" for r in checks if not r["ok"]
    ]
    assert not failures, f"{len(failures)} checks failed:\n" + "\n".join(failures)
    ran = [(r["scenario"], r["check"]) for r in checks]
    want = _expected(group)
    assert len(ran) == len(set(ran)), "a check ran twice"
    assert set(ran) == want, (
        f"checks that ran differ from {EXPECTED.name}: missing "
        f"{sorted(want - set(ran))}, unexpected {sorted(set(ran) - want)}"
    )
    assert proc.returncode == 0, f"suite exited {proc.returncode}"
    return checks


@pytest.mark.detects_stock_bug
def test_stall_dump_deterministic(tmp_path: Path) -> None:
    _run_suite("deterministic", tmp_path)


@pytest.mark.timing
@pytest.mark.detects_stock_bug
def test_stall_dump_timing(tmp_path: Path) -> None:
    _run_suite("timing", tmp_path)
