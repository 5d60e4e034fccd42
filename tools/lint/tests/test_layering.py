"""layering.py on small trees: an arrow up, an arrow down, lab beside deploy, a stale KNOWN entry."""

from __future__ import annotations

from tools.lint import layering


def test_an_import_up_is_named_with_both_ranks() -> None:
    found = layering.violations({"pins/table.py": "from deploy import releases\n"} | _known())
    assert found == ["pins/table.py: uses deploy: deploy (rank 7) is not below pins (rank 2); move the "
                     "shared code down to an area both may use (tools/lint/layering.py RANKS states "
                     "the order)"]


def test_uses_down_pass() -> None:
    files = {"deploy/rollout/cli.py": "from deploy import deployable\nfrom pins import table\n",
             "deploy/BUILD.bazel": 'deps = ["//pins:table", "//tools/oci:reference_lib"]\n'}
    assert layering.violations(files | _known()) == []


def test_siblings_of_one_rank_stay_independent() -> None:
    found = layering.violations({"deploy/validators/x.py": "import deploy.compose_gen.tables\n"} | _known())
    assert found == [] and layering.RANKS["deploy/validators"] > layering.RANKS["deploy/compose_gen"]
    found = layering.violations({"deploy/compose_gen/x.py": "from deploy.validators import cli\n"} | _known())
    assert len(found) == 1 and "deploy/validators (rank 10) is not below deploy/compose_gen" in found[0]


def test_lab_and_deploy_stay_apart() -> None:
    found = layering.violations({"lab/x.py": "from deploy import releases\n"} | _known())
    assert len(found) == 1 and "lab and the deploy wing stay apart" in found[0]


def test_comments_docstrings_and_commands_are_not_uses() -> None:
    text = ('"""e.g. //deploy:releases"""\n# //deploy/rollout\n'
            'fail("run `bazel run //compose:update`")\n')
    assert layering.uses("pins/defs.bzl", text) == set()


def test_a_known_arrow_that_is_gone_must_leave_the_list() -> None:
    known = _known()
    gone = sorted(layering.KNOWN)[0]
    del known[gone[0]]
    found = layering.violations(known)
    assert f"{gone[0]}: no longer uses {gone[1]}: delete the entry from KNOWN" in "\n".join(found)


def _known() -> dict[str, str]:
    """A tree holding exactly the KNOWN arrows."""
    files: dict[str, str] = {}
    for path, area in sorted(layering.KNOWN):
        use = f"import {area.replace('/', '.')}\n" if path.endswith(".py") else f'x = ["//{area}:x"]\n'
        files[path] = files.get(path, "") + use
    return files
