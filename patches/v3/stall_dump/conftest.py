"""Pytest configuration for the event-loop stall dump tests (sglang on sys.path)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # Tests carrying this marker must fail on stock sglang 0.5.19 and pass on the
    # patched tree; a runner can select them with `-m detects_stock_bug`.
    config.addinivalue_line(
        "markers",
        "detects_stock_bug: fails on stock sglang 0.5.19, passes once the patch is applied",
    )
    # Tests that must measure time; CI runs them in their own, retried
    # target (`-m timing`) and everything else with `-m "not timing"`.
    config.addinivalue_line(
        "markers", "timing: asserts on wall-clock time; run in the timing target"
    )


def pytest_report_header(config: pytest.Config) -> str:
    # Which tree the suite's children will load; found without importing
    # sglang (its package init pulls in torch).
    from stall_dump_locate import MODULE_RELPATH, locate

    try:
        return f"stall dump under test: {locate()}"
    except ModuleNotFoundError as exc:
        return f"stall dump under test: none ({exc}); {MODULE_RELPATH} missing"
