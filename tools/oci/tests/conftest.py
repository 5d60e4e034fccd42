"""Shared fixtures of the tools/oci tests (run by //tools/oci:oci_test or plain pytest)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

OCI_DIR = Path(__file__).resolve().parents[1]
REPO = OCI_DIR.parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def run_tool(name: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Runs tools/oci/<name>.py with this interpreter; returns the completed process."""
    proc = subprocess.run([sys.executable, str(OCI_DIR / f"{name}.py"), *args], text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if check and proc.returncode != 0:
        raise AssertionError(f"{name}.py {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def tool():
    return run_tool
