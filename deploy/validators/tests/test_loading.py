"""Bad input is one clear error per file, never a traceback, for every validator CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.validators.tests.harness import run_validator

VALIDATORS = ("structure", "nginx_check", "telemetry", "services", "prod_contract")


@pytest.mark.parametrize("module", VALIDATORS)
def test_missing_file(module: str, tmp_path: Path) -> None:
    missing = tmp_path / "absent.yaml"
    result = run_validator(module, missing)
    assert result.returncode == 1
    assert result.errors() == [f"{missing}: file not found (pass an existing compose file)"]


@pytest.mark.parametrize("module", VALIDATORS)
def test_invalid_yaml(module: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("services:\n  nginx: [\n")
    result = run_validator(module, bad)
    assert result.returncode == 1
    assert result.errors() == [
        f"{bad}: invalid YAML at line 3, column 1: while parsing a flow node: "
        "expected the node content, but found '<stream end>'"]


@pytest.mark.parametrize("module", VALIDATORS)
def test_duplicate_key_is_invalid(module: str, tmp_path: Path) -> None:
    bad = tmp_path / "dup.yaml"
    bad.write_text("services: {}\nservices: {}\n")
    result = run_validator(module, bad)
    assert result.returncode == 1
    assert len(result.errors()) == 1 and "found duplicate key \"services\"" in result.errors()[0]


@pytest.mark.parametrize("module", VALIDATORS)
@pytest.mark.parametrize("text,kind", [("- a\n- b\n", "list"), ("", "empty"), ("42\n", "int")])
def test_non_mapping_document(module: str, text: str, kind: str, tmp_path: Path) -> None:
    bad = tmp_path / "list.yaml"
    bad.write_text(text)
    result = run_validator(module, bad)
    assert result.returncode == 1
    assert result.errors() == [
        f"{bad}: top level must be a mapping (compose document), got {kind}"]


def test_python_tags_are_not_constructed(tmp_path: Path) -> None:
    evil = tmp_path / "evil.yaml"
    evil.write_text("services: !!python/object/apply:os.system ['echo pwned']\n")
    result = run_validator("services", evil)
    assert result.returncode == 1
    assert "pwned" not in result.output
    assert "could not determine a constructor for the tag" in result.errors()[0]


def test_every_file_is_reported(tmp_path: Path) -> None:
    """One bad file does not hide another: findings are collected, not raised."""
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    second.write_text("[]\n")
    result = run_validator("services", first, second)
    assert result.returncode == 1
    assert [e.split(":")[0] for e in result.errors()] == [str(first), str(second)]
