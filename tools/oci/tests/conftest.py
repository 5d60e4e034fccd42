"""Shared fixtures of the tools/oci tests (//tools/oci:oci_test, or `python3 -m pytest` from the root)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.oci.testing.runner import tool_runner

OCI_DIR = Path(__file__).resolve().parents[1]


@pytest.fixture
def tool():
    return tool_runner(OCI_DIR)
