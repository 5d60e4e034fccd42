"""layering.py on small trees: an arrow up, an arrow down, nested areas, lab beside deploy."""

from __future__ import annotations

from tools.lint import layering


def test_an_import_up_is_named_with_both_ranks() -> None:
    found = layering.violations({"pins/table.py": "from deploy import releases\n"})
    assert found == ["pins/table.py: uses deploy: deploy (rank 7) is not below pins (rank 2); move the "
                     "shared code down to an area both may use (tools/lint/layering.py RANKS states "
                     "the order)"]


def test_uses_down_pass() -> None:
    files = {"deploy/rollout/cli.py": "from deploy import deployable\nfrom pins import table\n",
             "deploy/BUILD.bazel": 'deps = ["//pins:table", "//tools/oci:reference_lib"]\n'}
    assert layering.violations(files) == []


def test_siblings_of_one_rank_stay_independent() -> None:
    found = layering.violations({"deploy/validators/x.py": "import deploy.compose_gen.tables\n"})
    assert found == [] and layering.RANKS["deploy/validators"] > layering.RANKS["deploy/compose_gen"]
    found = layering.violations({"deploy/compose_gen/x.py": "from deploy.validators import cli\n"})
    assert len(found) == 1 and "deploy/validators (rank 10) is not below deploy/compose_gen" in found[0]


def test_a_nested_area_has_its_own_rank() -> None:
    # recipes/bases ranks below patches, recipes above; tools/remote above the rest of tools.
    assert layering.violations({"patches/BUILD.bazel": 'image = "//recipes/bases:sglang_cpu_0_5_19"\n'}) == []
    found = layering.violations({"patches/BUILD.bazel": 'image = "//recipes:glm53_v3"\n',
                                 "tools/oci/BUILD.bazel": 'data = ["//tools/remote:exec_image"]\n'})
    assert len(found) == 2 and "recipes (rank 5) is not below patches (rank 4)" in found[0]
    assert "tools/remote (rank 4) is not below tools (rank 1)" in found[1]


def test_lab_and_deploy_stay_apart() -> None:
    found = layering.violations({"lab/x.py": "from deploy import releases\n"})
    assert len(found) == 1 and "lab and the deploy wing stay apart" in found[0]


def test_comments_docstrings_and_commands_are_not_uses() -> None:
    text = ('"""e.g. //deploy:releases"""\n# //deploy/rollout\n'
            'fail("run `bazel run //compose:update`")\n')
    assert layering.uses("pins/defs.bzl", text) == set()
