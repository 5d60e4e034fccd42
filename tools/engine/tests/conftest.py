"""The `tool` fixture of the tools/engine tests: engine programs first, then tools/oci's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.oci.testing.runner import tool_runner

ENGINE_DIR = Path(__file__).resolve().parents[1]


@pytest.fixture
def tool():
    return tool_runner(ENGINE_DIR, ENGINE_DIR.parent / "oci")
