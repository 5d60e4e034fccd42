"""The bump check on small synthetic trees: one test per verdict, each failing on a wrong one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import MODULE, P, Synth, patch_text, udiff
from tools.patches.private.patchchain import bump_main
from tools.patches.private.patchchain.bump import (
    APPLIES,
    APPLIES_WITH_OFFSETS,
    CONFLICTS,
    PARTLY_REDUNDANT,
    REDUNDANT,
    STILL_NEEDED,
    UNKNOWN,
    UPSTREAM,
    TestOutcome,
    check_chain,
    introduced_text,
    need_verdict,
    stock_outcomes,
)
from tools.patches.private.patchchain.chain import read_patch_files
from tools.patches.private.patchchain.declaration import load_chain
from tools.patches.private.patchchain.layout import SourceTree

# v1: a.diff edits f3 and f15 of mod.py; b.diff creates new.py. v2: c.diff edits other.py.
EDIT = MODULE.replace("    return 3\n", "    return 33\n").replace("    return 15\n", "    return 1515\n")
NEW = "NEW = 1\n"


@pytest.fixture
def series(synth: Synth) -> Synth:
    synth.add_series("v1", [
        ("a.diff", patch_text(udiff(P + "mod.py", MODULE, EDIT))),
        ("b.diff", patch_text(udiff(P + "new.py", None, NEW))),
    ])
    synth.add_series("v2", [("c.diff", patch_text(udiff(P + "other.py", "X = 1\n", "X = 2\n")))], extends="v1")
    synth.rehash("v1")
    synth.rehash("v2")
    return synth


def candidate(s: Synth, files: dict[str, str | None]) -> SourceTree:
    """The base with some files replaced (None: removed): a stand-in for a newer release."""
    root = s.tmp / "candidate"
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(s.base, root)
    for rel, text in files.items():
        path = root / rel.removeprefix("python/")
        if text is None:
            path.unlink()
        else:
            path.write_text(text)
    return SourceTree(root)


def check(s: Synth, tree: SourceTree, leaf: str = "v2") -> dict:
    chain = load_chain(s.patches, leaf)
    return {r.patch.file: r for r in check_chain(chain, tree, read_patch_files(chain))}


def test_same_files_apply_byte_exactly(series):
    results = check(series, candidate(series, {}))
    assert {k: r.status for k, r in results.items()} == {"a.diff": APPLIES, "b.diff": APPLIES, "c.diff": APPLIES}
    assert all(f.before_matches and not f.moves for r in results.values() for f in r.files)


def test_moved_hunks_apply_with_offsets_and_say_by_how_much(series):
    moved = "# two lines\n# added on top\n" + MODULE.replace("def f10():\n", "def f10():\n    # one more\n")
    r = check(series, candidate(series, {P + "mod.py": moved}))["a.diff"]
    assert r.status == APPLIES_WITH_OFFSETS
    (f,) = r.files
    assert not f.before_matches  # the file changed, so its before-hash no longer matches
    assert [(m.hunk.split()[0], m.offset) for m in f.moves] == [("#1", 2), ("#2", 3)]


def test_changed_context_conflicts_naming_hunk_file_and_first_differing_line(series):
    # hunk #2's leading context is "def f15():"; the candidate renamed its argument list.
    changed = MODULE.replace("def f15():\n", "def f15(x):\n")
    r = check(series, candidate(series, {P + "mod.py": changed}))["a.diff"]
    assert r.status == CONFLICTS
    (f,) = r.files
    assert f.path == P + "mod.py"
    assert f.conflict is not None and f.conflict.hunk.startswith("#2 ")
    assert f.conflict.expected == repr("def f15():\n") and f.conflict.actual == repr("def f15(x):\n")
    assert changed.splitlines()[f.conflict.line - 1] == "def f15(x):"


def test_change_already_there_is_upstream_by_reverse_apply(series):
    # The candidate has the edit plus an unrelated line: not the declared after-hash, but every
    # hunk's new side is present.
    r = check(series, candidate(series, {P + "mod.py": "# upstream\n" + EDIT}))["a.diff"]
    assert r.status == UPSTREAM
    assert r.files[0].upstream_by == "reverse-applies"


def test_created_file_already_there_is_upstream_by_after_text(series):
    r = check(series, candidate(series, {P + "new.py": NEW}))["b.diff"]
    assert r.status == UPSTREAM and r.files[0].upstream_by == "after-hash"


def test_created_file_present_with_other_text_conflicts(series):
    r = check(series, candidate(series, {P + "new.py": "NEW = 2\n"}))["b.diff"]
    assert r.status == CONFLICTS and "already has another version" in r.files[0].note


def test_half_upstream_patch_conflicts_and_names_the_hunk_already_there(series):
    half = MODULE.replace("    return 15\n", "    return 1515\n").replace("def f3():\n", "def f3(x):\n")
    r = check(series, candidate(series, {P + "mod.py": half}))["a.diff"]
    assert r.status == CONFLICTS
    assert r.files[0].conflict.hunk.startswith("#1 ")
    assert r.files[0].note == "already upstream (new side present): hunk #2"


def test_a_later_patch_on_a_conflicting_file_says_it_was_checked_without_it(synth):
    step1 = MODULE.replace("    return 3\n", "    return 33\n")
    step2 = step1.replace("    return 33\n", "    return 333\n")
    synth.add_series("v1", [("a.diff", patch_text(udiff(P + "mod.py", MODULE, step1))),
                            ("b.diff", patch_text(udiff(P + "mod.py", step1, step2)))])
    synth.rehash("v1")
    results = check(synth, candidate(synth, {P + "mod.py": MODULE.replace("def f3():", "def f3_renamed():")}), "v1")
    assert results["a.diff"].status == CONFLICTS
    assert results["b.diff"].status == CONFLICTS
    assert results["b.diff"].checked_without == ("v1/a.diff",)


REPORT = {"tests": [
    {"nodeid": "patches/v1/tests/test_a.py::test_bug_1", "outcome": "failed", "markers": ["detects_stock_bug"], "message": "AssertionError"},
    {"nodeid": "patches/v1/tests/test_a.py::test_bug_2", "outcome": "passed", "markers": ["detects_stock_bug"]},
    {"nodeid": "patches/v1/tests/test_a.py::test_plain", "outcome": "passed", "markers": []},
    {"nodeid": "patches/v1/tests/test_b.py::test_bug", "outcome": "failed", "markers": ["detects_stock_bug", "parametrize"]},
    {"nodeid": "patches/v1/tests/test_c.py::test_bug", "outcome": "passed", "markers": ["detects_stock_bug"]},
    {"nodeid": "patches/v1/tests/test_d.py", "outcome": "collection-error", "markers": [], "message": "ImportError"},
]}


def verdict(*files: str) -> str:
    return need_verdict(stock_outcomes(REPORT, [f"patches/v1/tests/{f}" for f in files])).verdict


def test_need_still_needed_when_every_marked_test_fails_on_stock():
    assert verdict("test_b.py") == STILL_NEEDED


def test_need_redundant_when_every_marked_test_passes_on_stock():
    assert verdict("test_c.py") == REDUNDANT


def test_need_partly_redundant_names_both_sides():
    need = need_verdict(stock_outcomes(REPORT, ["patches/v1/tests/test_a.py"]))
    assert need.verdict == PARTLY_REDUNDANT
    assert [o.nodeid.split("::")[1] for o in need.present] == ["test_bug_1"]
    assert [o.nodeid.split("::")[1] for o in need.gone] == ["test_bug_2"]  # unmarked test_plain is no evidence


def test_a_failure_on_another_exception_is_no_evidence_that_the_bug_is_there():
    # The test could not exercise the candidate (its stand-in lacks an attribute 0.5.23 added).
    drift = TestOutcome("t::drift", "failed", "AttributeError: 'TokenizerManager' object has no attribute 'x'")
    assert need_verdict([drift]).verdict == UNKNOWN
    need = need_verdict([drift, TestOutcome("t::bug", "failed", "AssertionError: ran on MainThread")])
    assert need.verdict == STILL_NEEDED and [o.nodeid for o in need.no_evidence] == ["t::drift"]
    assert need_verdict([TestOutcome("t::bare", "failed", "assert False")]).verdict == STILL_NEEDED


def test_a_failure_on_a_name_the_patch_adds_shows_the_patch_is_missing():
    patch = patch_text(udiff(P + "mod.py", MODULE, MODULE + "def _qsplit():\n    return 1\n"),
                       udiff(P + "stall.py", None, "X = 1\n"))
    added = introduced_text(patch.encode(), "v2/x.diff")
    absent = TestOutcome("t::a", "failed", "AttributeError: module 'sglang.srt.mod' has no attribute '_qsplit'")
    no_module = TestOutcome("t::b", "error", "ModuleNotFoundError: No module named 'sglang.srt.stall'")
    renamed = TestOutcome("t::c", "failed", "AttributeError: module 'sglang.srt.mod' has no attribute '_qsplit_rows'")
    assert need_verdict([absent], introduced=added).verdict == STILL_NEEDED
    assert need_verdict([no_module], introduced=added).verdict == STILL_NEEDED
    assert need_verdict([renamed], introduced=added).verdict == UNKNOWN  # not a name this patch adds


def test_need_unknown_without_evidence_never_reads_as_needed():
    assert verdict("test_d.py") == UNKNOWN  # the module did not even import
    assert verdict("test_missing.py") == UNKNOWN
    assert need_verdict([TestOutcome("x", "failed")], unavailable="no CPU base").verdict == UNKNOWN


def _config(tmp: Path, patch_tests: dict) -> Path:
    path = tmp / "config.json"
    path.write_text(json.dumps({
        "candidates": {"9.9.9": {"wheel": "sglang-9.9.9.whl", "url": "https://example.invalid/sglang-9.9.9.whl",
                                 "sha256": "1" * 64, "cpu_base": None}},
        "patch_tests": patch_tests,
    }))
    return path


def _cli(s: Synth, *extra: str) -> list[str]:
    """Arguments as the Bazel target passes them (paths relative to the runfiles root = cwd)."""
    candidate(s, {P + "other.py": "X = 2\n"})  # c.diff is upstream there
    return ["--to", "9.9.9", "--patches-dir", "patches", "--series", "v2",
            "--tree", f"9.9.9={s.tmp / 'candidate' / 'sglang' / '__init__.py'}", "--out-dir", str(s.tmp / "out"), *extra]


def test_cli_writes_text_json_and_draft_and_exits_0(series, capsys, monkeypatch):
    monkeypatch.chdir(series.tmp)
    report = series.tmp / "report.json"
    report.write_text(json.dumps({"tests": [
        {"nodeid": "patches/v1/tests/test_a.py::t", "outcome": "failed", "markers": ["detects_stock_bug"]},
        {"nodeid": "patches/v2/tests/test_new.py::t", "outcome": "failed", "markers": ["detects_stock_bug"]},
    ]}))
    config = _config(series.tmp, {"v1/a.diff": ["v1/tests/test_a.py"]})
    rc = bump_main.main(_cli(series, "--config", str(config), "--stock-report", str(report),
                             "--test-files", "patches/v1/tests/test_a.py"))
    out = capsys.readouterr().out
    assert rc == 0, out
    doc = json.loads((series.tmp / "out" / "report.json").read_text())
    rows = {p["patch"]: p for p in doc["series"][0]["patches"]}
    assert {k: (v["status"], v["need"]["verdict"]) for k, v in rows.items()} == {
        "a.diff": (APPLIES, STILL_NEEDED), "b.diff": (APPLIES, UNKNOWN), "c.diff": (UPSTREAM, UNKNOWN)}
    assert "c.diff" in out and "upstream" in out and "next:" in out
    assert "leave out (already upstream or redundant on stock): v2/c.diff" in out
    assert "map patches/v2/tests/test_new.py (1 detects_stock_bug tests, claimed by no patch)" in out
    assert doc["series"][0]["unmapped_tests"] == {"patches/v2/tests/test_new.py": 1}
    draft = json.loads((series.tmp / "out" / "v2.draft-series.json").read_text())
    assert [p["file"] for p in draft["patches"]] == ["a.diff", "b.diff"]
    assert draft["base"] == {"wheel": "sglang-9.9.9.whl", "sha256": "1" * 64}


def test_cli_bad_inputs_exit_2_with_the_fix(series, capsys, monkeypatch):
    monkeypatch.chdir(series.tmp)
    config = _config(series.tmp, {})
    assert bump_main.main(_cli(series, "--config", str(config), "--no-stock-tests", "--to", "1.0")) == 2
    assert "not a candidate; pinned: 9.9.9" in capsys.readouterr().err
    config = _config(series.tmp, {"v1/a.diff": ["v1/tests/gone.py"]})
    assert bump_main.main(_cli(series, "--config", str(config), "--no-stock-tests")) == 2
    assert "names v1/tests/gone.py" in capsys.readouterr().err
    (series.patches / "v1" / "a.diff").write_text("edited\n")
    config = _config(series.tmp, {})
    assert bump_main.main(_cli(series, "--config", str(config), "--no-stock-tests")) == 2
    assert "patch file changed" in capsys.readouterr().err


def test_conflict_is_shown_where_the_moved_hunk_fits_best_not_at_its_header_line(series):
    # Two lines on top move everything; hunk #1's context also changed, so no hunk before it
    # says how far it moved: the best fit (most equal lines) does.
    changed = "# one\n# two\n" + MODULE.replace("def f3():\n", "def f3(x):\n")
    f = check(series, candidate(series, {P + "mod.py": changed}))["a.diff"].files[0]
    assert f.status == CONFLICTS and f.conflict.hunk.startswith("#1 ")
    assert (f.conflict.expected, f.conflict.actual) == (repr("def f3():\n"), repr("def f3(x):\n"))
    assert changed.splitlines()[f.conflict.line - 1] == "def f3(x):"
    assert [(h.index, h.state, h.offset) for h in f.hunks] == [(1, CONFLICTS, 0), (2, APPLIES, 2)]
