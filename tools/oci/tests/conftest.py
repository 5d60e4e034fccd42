"""Shared fixtures of the tools/oci tests (run by //tools/oci:oci_test or plain pytest)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

OCI_DIR = Path(__file__).resolve().parents[1]
if str(OCI_DIR.parents[1]) not in sys.path:
    sys.path.insert(0, str(OCI_DIR.parents[1]))

from tools.oci.testing.runner import tool_runner  # noqa: E402

@pytest.fixture
def tool():
    return tool_runner(OCI_DIR)
