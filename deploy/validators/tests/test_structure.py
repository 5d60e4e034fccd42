"""Structure: compose-spec schema (from check-jsonschema) and the real `docker-compose config -q`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from deploy.validators.structure import vendored_compose_schema
from deploy.validators.tests.harness import Inputs, run_validator


def structure(inputs: Inputs, *files: Path):
    assert inputs.compose_bin, "COMPOSE_BIN must name the Compose v2 binary"
    return run_validator("structure", "--compose-bin", inputs.compose_bin, *files)


def test_schema_comes_from_the_pinned_package() -> None:
    schema = vendored_compose_schema()
    assert "check_jsonschema" in schema.origin
    assert "services" in schema.document["properties"]


def test_committed_files_pass(inputs: Inputs) -> None:
    result = structure(inputs, *inputs.all_files)
    assert result.returncode == 0, result.output
    assert result.stdout.count("compose-structure: OK") == len(inputs.all_files)


def test_unknown_service_key(inputs: Inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        doc["services"]["nginx"]["bogus_key"] = 1

    copy = mutate(inputs.long_context, drift)
    result = structure(inputs, copy)
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: services.nginx: compose-spec schema: Unevaluated properties are not allowed "
        "('bogus_key' was unexpected)",
        f"{copy}: services.nginx: docker compose config: additional properties 'bogus_key' not allowed",
    ]


def test_invalid_duration_only_compose_catches(inputs: Inputs, mutate) -> None:
    """The schema types durations as strings; the real parser rejects a bad one."""
    def drift(doc: dict[str, Any]) -> None:
        doc["services"]["model-proxy-registrar"]["healthcheck"]["interval"] = "tenseconds"

    copy = mutate(inputs.long_context, drift)
    result = structure(inputs, copy)
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: services.model-proxy-registrar.healthcheck.interval: docker compose config: "
        'time: invalid duration "tenseconds"']


def test_guard_without_ci_value(inputs: Inputs, mutate) -> None:
    """A new `${VAR:?…}` guard must be satisfiable by the CI dummy environment."""
    def drift(doc: dict[str, Any]) -> None:
        doc["services"]["nginx"]["environment"] = {"NEW_SECRET": "${NEW_SECRET:?set NEW_SECRET}"}

    copy = mutate(inputs.long_context, drift)
    result = structure(inputs, copy)
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: services.nginx.environment.NEW_SECRET: docker compose config: required variable "
        "NEW_SECRET is missing a value: set NEW_SECRET"]


def test_schema_type_error_has_dotted_path(inputs: Inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        doc["services"]["nginx"]["ports"] = {"8000": 8000}

    copy = mutate(inputs.long_context, drift)
    result = run_validator("structure", copy)  # schema only: no --compose-bin
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: services.nginx.ports: compose-spec schema: {{'8000': 8000}} is not of type 'array'"]


def test_bazel_binds_the_committed_files(inputs: Inputs) -> None:
    """Under `bazel test` the inputs are the committed files Bazel binds by label."""
    if "TEST_SRCDIR" not in os.environ:
        pytest.skip("plain pytest: the checkout's files are the inputs")
    assert inputs.long_context.parent.name == "compose", inputs.long_context
    assert inputs.source.parent.name == "compose", inputs.source
    assert len(inputs.all_files) == 3
    # One record per release of recipes/releases/releases.bzl, deployed or a candidate (glm53_v4):
    # the records are what a compose file may pin, not a list of what is deployed.
    assert inputs.releases
    assert {p.parent.name for p in inputs.releases} == {"releases"}
    assert len({p.name for p in inputs.releases}) == len(inputs.releases)
