"""The v3 suite reads the variable tools/podman's runner sets.

The v3 conftest shortens the holds of expected stock failures when it sees this variable; a
different name there would silently give the stock suite its full holds back.
"""

from __future__ import annotations

import re
from pathlib import Path

from tools.podman.suite import EXPECTATION_ENV


def test_the_v3_suite_reads_the_variable_the_runner_sets() -> None:
    conftest = Path("patches/v3/tests/conftest.py").read_text()
    assert re.findall(r'^SUITE_EXPECT_ENV = "([^"]+)"$', conftest, re.M) == [EXPECTATION_ENV]
