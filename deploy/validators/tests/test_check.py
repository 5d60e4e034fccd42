"""The one entry point: every committed compose file passes every validator through `check`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from deploy.validators.glm53_contract import W4AFP8_LONG_CONTEXT_SOURCE
from deploy.validators.tests.harness import CheckInputs, run_check_cli

VALIDATORS = ("compose-structure", "nginx", "telemetry", "service-contracts", "runtime",
              "glm53-prod-contract")


def test_every_committed_file_is_checked(check_inputs: CheckInputs) -> None:
    # The files come from a glob in //compose (a filegroup), not from a hand-written list.
    on_disk = sorted(check_inputs.compose_dir.glob("*.yaml"))
    assert sorted(check_inputs.compose_files) == on_disk
    if os.environ.get("COMPOSE_FILES"):
        assert len(on_disk) >= 3, on_disk


def test_committed_files_pass(check_inputs: CheckInputs) -> None:
    result = run_check_cli(check_inputs, *check_inputs.compose_files)
    assert result.returncode == 0, result.output
    # Every validator on every file: the production contract too (each file binds its
    # deployment's contract; the long-context one runs with its source).
    for validator in VALIDATORS:
        for path in check_inputs.compose_files:
            assert f"{validator}: OK ({path})" in result.stdout, (validator, path, result.output)


def test_missing_file_fails_every_validator(check_inputs: CheckInputs, tmp_path: Path) -> None:
    missing = tmp_path / "absent.yaml"
    result = run_check_cli(check_inputs, missing)
    assert result.returncode == 1
    found = result.by_validator()
    for validator in VALIDATORS[:-1]:
        assert found.get(validator), (validator, result.output)
        assert all(line.startswith(f"{missing}: ") for line in found[validator]), found


def test_contract_without_its_source_is_an_error(check_inputs: CheckInputs,
                                                 tmp_path: Path) -> None:
    [long_context] = [p for p in check_inputs.compose_files if p.name.endswith("LongContext.yaml")]
    copy = tmp_path / long_context.name
    shutil.copy(long_context, copy)
    result = run_check_cli(check_inputs, copy, extra=("--compose-dir", str(tmp_path / "none")))
    assert result.returncode == 1
    assert (f"check: {copy}: the production contract derives this file from "
            f"{W4AFP8_LONG_CONTEXT_SOURCE}, found neither next to it nor in --compose-dir; "
            "pass --source") in result.stderr
