"""The `tool` fixture of the tools/engine tests: engine programs first, then tools/oci's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ENGINE_DIR = Path(__file__).resolve().parents[1]
if str(ENGINE_DIR.parents[1]) not in sys.path:
    sys.path.insert(0, str(ENGINE_DIR.parents[1]))

from tools.oci.testing.runner import tool_runner  # noqa: E402


@pytest.fixture
def tool():
    return tool_runner(ENGINE_DIR, ENGINE_DIR.parent / "oci")
