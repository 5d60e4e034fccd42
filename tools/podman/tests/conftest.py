"""Under `bazel test`, keep pytest's temporary directories in the test's own TEST_TMPDIR.

Some of these tests write gigabytes (a loopback registry holding the CPU base); pytest's
default base (/tmp/pytest-of-<user>, three runs kept) would leave them behind.
"""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    tmp = os.environ.get("TEST_TMPDIR")
    if tmp and not config.option.basetemp:
        config.option.basetemp = os.path.join(tmp, "pytest")
