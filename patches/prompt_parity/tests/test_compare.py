"""Host tests of the gate's judgement (compare.py) and the accepted-file reader (accepted.py).

Each test mutates a known-good pair of renders or acceptances in one way (a changed id, a stale
acceptance, a missing reason, ...) and checks the gate reports exactly that; none needs an image.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patches.prompt_parity import accepted as accepted_file
from patches.prompt_parity import compare
from patches.prompt_parity import corpus

FILE = "patches/prompt_parity/0.5.99.accepted.json"


def _render(version: str, entries: dict[str, list[int]], errors: dict[str, str] | None = None) -> dict:
    return {"sglang": version,
            "entries": {n: {"ids": ids, "pieces": [f"t{i} " for i in ids], "images": 0} for n, ids in entries.items()},
            "errors": errors or {}}


def _accepted(*items: dict) -> accepted_file.AcceptedFile:
    return accepted_file.parse({"schema": 1, "current": "0.5.19", "candidate": "0.5.99",
                                "accepted": list(items)}, FILE)


BASE = {"a": [1, 2, 3, 4], "b": [5, 6, 7]}


def test_identical_renders_pass() -> None:
    verdict = compare.compare(_render("0.5.19", BASE), _render("0.5.99", BASE), _accepted())
    assert verdict.ok and verdict.entries == 2 and not verdict.differences


def test_changed_id_fails_with_position_and_context() -> None:
    candidate = {**BASE, "b": [5, 9, 7]}
    verdict = compare.compare(_render("0.5.19", BASE), _render("0.5.99", candidate), _accepted())
    assert not verdict.ok
    [problem] = verdict.problems
    assert problem.startswith("b: first difference at token 1 ")
    assert "'t5 ' | 't6 t7 '" in problem and "'t5 ' | 't9 t7 '" in problem
    assert f"{{\"entry\": \"b\", \"candidate_ids_sha256\": \"{compare.ids_sha256([5, 9, 7])}\"" in problem and FILE in problem


def test_length_only_difference_fails() -> None:
    candidate = {**BASE, "a": [1, 2, 3, 4, 0]}
    verdict = compare.compare(_render("0.5.19", BASE), _render("0.5.99", candidate), _accepted())
    assert [d.position for d in verdict.differences] == [4] and not verdict.ok


def test_accepted_difference_passes() -> None:
    candidate = {**BASE, "b": [5, 9, 7]}
    acc = _accepted({"entry": "b", "candidate_ids_sha256": compare.ids_sha256([5, 9, 7]), "reason": "reviewed"})
    verdict = compare.compare(_render("0.5.19", BASE), _render("0.5.99", candidate), acc)
    assert verdict.ok and verdict.accepted == ["b"] and len(verdict.differences) == 1


def test_accepted_entry_that_changed_again_fails() -> None:
    acc = _accepted({"entry": "b", "candidate_ids_sha256": compare.ids_sha256([5, 9, 7]), "reason": "reviewed"})
    verdict = compare.compare(_render("0.5.19", BASE), _render("0.5.99", {**BASE, "b": [5, 8, 7]}), acc)
    [problem] = verdict.problems
    assert "changed again" in problem and FILE in problem and "'b'" in problem


def test_stale_acceptance_fails() -> None:
    acc = _accepted({"entry": "a", "candidate_ids_sha256": compare.ids_sha256(BASE["a"]), "reason": "old"})
    verdict = compare.compare(_render("0.5.19", BASE), _render("0.5.99", BASE), acc)
    [problem] = verdict.problems
    assert "stale acceptance" in problem and "'a'" in problem and FILE in problem and "remove" in problem


def test_acceptance_of_unknown_entry_fails() -> None:
    acc = _accepted({"entry": "gone", "candidate_ids_sha256": "0" * 64, "reason": "old"})
    verdict = compare.compare(_render("0.5.19", BASE), _render("0.5.99", BASE), acc)
    assert verdict.problems == [f"{FILE}: entry 'gone' is accepted but not in the corpus; remove it from the file"]


def test_render_error_fails_even_if_accepted() -> None:
    candidate = _render("0.5.99", {"a": BASE["a"]}, errors={"b": "TypeError: boom"})
    verdict = compare.compare(_render("0.5.19", BASE), candidate, _accepted())
    assert verdict.problems == ["b: the candidate SGLang 0.5.99 failed to render it: TypeError: boom"]


def test_changed_image_count_fails() -> None:
    candidate = _render("0.5.99", BASE)
    candidate["entries"]["a"]["images"] = 1
    verdict = compare.compare(_render("0.5.19", BASE), candidate, _accepted())
    assert len(verdict.problems) == 1 and "images" in verdict.problems[0]


@pytest.mark.parametrize("item, message", [
    ({"entry": "b", "candidate_ids_sha256": "0" * 64}, "missing keys ['reason']"),
    ({"entry": "b", "candidate_ids_sha256": "0" * 64, "reason": "  "}, "the reason is empty"),
    ({"entry": "b", "candidate_ids_sha256": "abc", "reason": "x"}, "is not 64 lowercase hex"),
    ({"entry": "b", "candidate_ids_sha256": "0" * 64, "reason": "x", "note": 1}, "unknown keys ['note']"),
    ({"entry": 3, "candidate_ids_sha256": "0" * 64, "reason": "x"}, "entry must be a string"),
])
def test_malformed_acceptance_is_refused(item: dict, message: str) -> None:
    with pytest.raises(accepted_file.AcceptedFileError) as err:
        _accepted(item)
    assert message in str(err.value) and FILE in str(err.value)


def test_repeated_acceptance_is_refused() -> None:
    item = {"entry": "b", "candidate_ids_sha256": "0" * 64, "reason": "x"}
    with pytest.raises(accepted_file.AcceptedFileError, match="entry 'b': accepted twice"):
        _accepted(item, item)


def test_missing_file_says_how_to_create_it(tmp_path: Path) -> None:
    with pytest.raises(accepted_file.AcceptedFileError, match="missing; create it"):
        accepted_file.load(tmp_path / "x.json", FILE)


def test_the_committed_files_parse() -> None:
    for path in sorted(Path(__file__).parents[1].glob("*.accepted.json")):
        data = accepted_file.load(path)
        names = {e.name for e in corpus.entries()}
        assert {a.entry for a in data.accepted} <= names, f"{path}: accepts entries not in the corpus"


def test_corpus_is_fixed_and_covers_the_kinds() -> None:
    first, second = corpus.entries("x"), corpus.entries("x")
    assert json.dumps([e.__dict__ for e in first]) == json.dumps([e.__dict__ for e in second])
    prefixes = {e.name.split("/")[0] for e in first}
    assert prefixes == {"tool", "mm", "plain", "anthropic"}
    assert sum(e.multimodal for e in first) >= 4 and sum(e.name.startswith("tool/") for e in first) >= 10
