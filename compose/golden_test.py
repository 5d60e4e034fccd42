"""The committed compose files are exactly what the tables and release records generate."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.compose_gen.generate import (UPDATE_COMMAND, default_deployment_tables, drift,
                                         generate_all)
from deploy.releases import load_bindings


@pytest.fixture
def outputs(request):
    bindings = request.config.getoption("--release")
    assert bindings, "compose/BUILD.bazel passes no --release bindings"
    return generate_all(default_deployment_tables(), load_bindings(bindings))


def test_committed_files_match_the_tables(request, outputs):
    problems = drift(Path(request.config.getoption("--compose-dir")), outputs)
    if problems:
        pytest.fail("".join(problems) + f"\ncompose files are out of date: run `{UPDATE_COMMAND}` "
                    "and commit compose/", pytrace=False)


def test_every_table_has_a_committed_file(request, outputs):
    committed = {p.name for p in Path(request.config.getoption("--compose-dir")).glob("*.yaml")}
    assert set(outputs) == committed


def test_records_carry_the_patches_the_variants_rely_on(request):
    # config_variant markers are read from the records' patch lists; a renamed patch would
    # silently drop a marker on the next update, so the names are pinned here.
    records = load_bindings(request.config.getoption("--release"))
    assert not records["glm53_v1"].has_qsplit
    assert records["glm53_v2"].has_qsplit and not records["glm53_v2"].has_event_loop_v3
    assert records["glm53_v3"].has_qsplit and records["glm53_v3"].has_event_loop_v3
