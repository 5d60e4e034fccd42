"""Runs stall_dump_suite.py (child-process scenarios) and requires 0 failures.

The suite prints one line per check and ``SUMMARY: N passed, M failed``; it
is run as a subprocess so that its children never share this process's
faulthandler timer (pytest's faulthandler_timeout uses the same one).  The
sglang tree under test is the first one on this process's sys.path.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

SUITE = Path(__file__).resolve().parent / "stall_dump_suite.py"
SUMMARY_RE = re.compile(r"^SUMMARY: (\d+) passed, (\d+) failed$", re.MULTILINE)
MIN_CHECKS = 58
SUITE_TIMEOUT_S = 420


@pytest.mark.detects_stock_bug
def test_stall_dump_suite() -> None:
    env = dict(os.environ)
    # Hand the children exactly the sys.path this test sees (e.g. the
    # patched tree first), not only what PYTHONPATH said.
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.Popen(
        [sys.executable, str(SUITE)],
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
    match = SUMMARY_RE.search(output)
    assert match, f"no SUMMARY line (rc={proc.returncode}):\n{output[-4000:]}"
    passed, failed = int(match.group(1)), int(match.group(2))
    failures = [line for line in output.splitlines() if line.startswith("FAILED")]
    assert failed == 0, f"{failed} checks failed:\n" + "\n".join(failures)
    assert passed >= MIN_CHECKS, f"only {passed} checks ran, want >= {MIN_CHECKS}"
    assert proc.returncode == 0, f"suite exited {proc.returncode}"
