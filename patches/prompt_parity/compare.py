"""The gate's judgement: candidate prompt ids vs current ones, per corpus entry, against the
reviewed acceptances (accepted.py). Pure functions on the renderers' JSON (render_ids.py), so
the host tests can drive every branch without an image.

A render is {"sglang": version, "entries": {name: {"ids": [...], "pieces": [...], "images": n}},
"errors": {name: message}}; `pieces[i]` is the text of `ids[i]` alone (decoded in the image,
where the tokenizer is), used only to show context around a difference.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from patches.prompt_parity.accepted import AcceptedFile

# Tokens of context shown on each side of the first differing position.
CONTEXT = 8


def ids_sha256(ids: list[int]) -> str:
    """The hash an acceptance pins: decimal ids joined by commas, ASCII."""
    return hashlib.sha256(",".join(str(i) for i in ids).encode("ascii")).hexdigest()


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first index where the sequences differ (a length difference counts), else None."""
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def _context(rendered: dict[str, Any], position: int) -> str:
    pieces = rendered.get("pieces") or [f"<{i}>" for i in rendered["ids"]]
    start = max(0, position - CONTEXT)
    before = "".join(pieces[start:position])
    after = "".join(pieces[position:position + CONTEXT])
    return f"{before!r} | {after!r}"


@dataclass(frozen=True)
class Difference:
    entry: str
    position: int
    current_len: int
    candidate_len: int
    current_context: str
    candidate_context: str
    candidate_sha256: str

    def describe(self) -> str:
        return (f"{self.entry}: first difference at token {self.position} "
                f"(current {self.current_len} tokens, candidate {self.candidate_len}); "
                f"current {self.current_context}; candidate {self.candidate_context}; "
                f"candidate_ids_sha256 {self.candidate_sha256}")


@dataclass
class Verdict:
    entries: int = 0
    differences: list[Difference] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        return (f"prompt parity: {self.entries} entries, {len(self.differences)} differ, "
                f"{len(self.accepted)} accepted, {len(self.problems)} problems")


def compare(current: dict[str, Any], candidate: dict[str, Any], accepted: AcceptedFile) -> Verdict:
    """Every difference not accepted for exactly these candidate ids is a problem, and so is every
    acceptance that no longer matches a difference (stale) or names no corpus entry."""
    verdict = Verdict()
    path = accepted.path
    for label, render in (("current", current), ("candidate", candidate)):
        for name, message in sorted(render.get("errors", {}).items()):
            verdict.problems.append(f"{name}: the {label} SGLang {render.get('sglang')} failed to render it: {message}")
    names = sorted(set(current["entries"]) | set(candidate["entries"]) |
                   set(current.get("errors", {})) | set(candidate.get("errors", {})))
    verdict.entries = len(names)
    acceptances = accepted.by_entry()
    for name in sorted(set(acceptances) - set(names)):
        verdict.problems.append(f"{path}: entry {name!r} is accepted but not in the corpus; "
                                "remove it from the file")
    for name in names:
        if name not in current["entries"] or name not in candidate["entries"]:
            continue  # already reported as a render error
        cur, cand = current["entries"][name], candidate["entries"][name]
        position = first_difference(cur["ids"], cand["ids"])
        acceptance = acceptances.get(name)
        if cur.get("images") != cand.get("images"):
            verdict.problems.append(f"{name}: {cur.get('images')} images collected on current, "
                                    f"{cand.get('images')} on candidate (not acceptable: the image "
                                    "data itself changed)")
        if position is None:
            if acceptance is not None:
                verdict.problems.append(f"{path}: entry {name!r} is accepted but its ids no longer "
                                        "differ (stale acceptance); remove it from the file")
            continue
        digest = ids_sha256(cand["ids"])
        difference = Difference(name, position, len(cur["ids"]), len(cand["ids"]),
                                _context(cur, position), _context(cand, position), digest)
        verdict.differences.append(difference)
        if acceptance is None:
            verdict.problems.append(f"{difference.describe()}; not accepted: review it and add "
                                    f"{{\"entry\": {json.dumps(name)}, \"candidate_ids_sha256\": \"{digest}\", "
                                    f"\"reason\": ...}} to {path}, or fix the cause")
        elif acceptance.candidate_ids_sha256 != digest:
            verdict.problems.append(f"{difference.describe()}; {path} accepts entry {name!r} for "
                                    f"candidate_ids_sha256 {acceptance.candidate_ids_sha256}, but the ids "
                                    "changed again: review the new difference, then update the hash "
                                    "and the reason")
        else:
            verdict.accepted.append(name)
    return verdict
