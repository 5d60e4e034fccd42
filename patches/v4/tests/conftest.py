"""Pytest configuration for the v4 patch tests (run with sglang 0.5.23 on sys.path)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # Tests carrying this marker must fail on stock sglang 0.5.23 and pass on the
    # patched tree; a runner can select them with `-m detects_stock_bug`.
    config.addinivalue_line(
        "markers",
        "detects_stock_bug: fails on stock sglang 0.5.23, passes once the patch is applied",
    )


def pytest_report_header(config: pytest.Config) -> str:
    # Shows which sglang tree (stock, patched, image) the run actually imported.
    import sglang

    return f"sglang under test: {sglang.__path__[0]}"
