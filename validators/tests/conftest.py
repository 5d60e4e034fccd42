"""Fixtures for the validator tests (helpers live in harness.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from validators.tests.harness import Inputs, Mutation, inputs_from_env, mutator


@pytest.fixture(scope="session")
def inputs() -> Inputs:
    return inputs_from_env()


@pytest.fixture
def mutate(tmp_path: Path) -> Callable[[Path, Mutation], Path]:
    return mutator(tmp_path)
