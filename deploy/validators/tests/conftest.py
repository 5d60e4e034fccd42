"""Fixtures for the validator tests (helpers live in harness.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest

from deploy.validators.compose_doc import shared_reads
from deploy.validators.tests.harness import (CheckInputs, Inputs, Mutation, check_inputs_from_env,
                                             inputs_from_env, mutator, text_mutator)


@pytest.fixture(scope="session", autouse=True)
def _shared_reads() -> Iterator[None]:
    """The test process parses (and, where a test resolves in process, runs Compose on) each
    distinct file once: the cases rebuild their mutants from the same committed files, and
    their expectations read each mutant several times. Keyed by content (compose_doc.shared)."""
    with shared_reads():
        yield


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
