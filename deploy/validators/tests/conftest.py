"""Fixtures for the validator tests (helpers live in harness.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from deploy.validators.tests.harness import (CheckInputs, Inputs, Mutation, check_inputs_from_env,
                                             inputs_from_env, mutator, text_mutator)


@pytest.fixture(scope="session")
def inputs() -> Inputs:
    return inputs_from_env()


@pytest.fixture
def mutate(tmp_path: Path) -> Callable[[Path, Mutation], Path]:
    return mutator(tmp_path)


@pytest.fixture(scope="session")
def check_inputs() -> CheckInputs:
    return check_inputs_from_env()


@pytest.fixture
def mutate_text(tmp_path: Path) -> Callable[..., Path]:
    return text_mutator(tmp_path)
