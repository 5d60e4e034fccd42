"""The bump check: how a patch series fares on a candidate SGLang release.

For each patch of a chain, in order, against the candidate's files (as the earlier patches that
still apply leave them), one of:

  applies               every hunk matches byte-exactly at its header line (+ declared offset);
  applies-with-offsets  every hunk matches exactly, some at other lines (which, by how much);
  upstream              the change is already there: every hunk's new side is present (the
                        patch reverse-applies) or the file already has the declared after-hash;
  conflicts             some hunk matches nowhere: which hunk, which file, and the first line
                        that differs where the hunk fits best.

and, per file, whether the declared before-hash still matches. Whether a patch is still needed
comes from its own detects_stock_bug tests run on the candidate's unpatched files (need_verdict).
The diff parser and the applier are the chain's own (diffparse, apply): a hunk that "applies"
here is one the patch_chain action would apply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

from .apply import _matches, _show, apply_file
from .chain import sha256
from .declaration import Chain, FileStep, PatchDecl
from .diffparse import FilePatch, Hunk, _split_lines, parse_patch
from .errors import PatchChainError, Where
from .layout import SourceTree, package_path

APPLIES = "applies"
APPLIES_WITH_OFFSETS = "applies-with-offsets"
UPSTREAM = "upstream"
CONFLICTS = "conflicts"
APPLY_STATUSES = (APPLIES, APPLIES_WITH_OFFSETS, UPSTREAM, CONFLICTS)

STILL_NEEDED = "still-needed"
REDUNDANT = "redundant"
PARTLY_REDUNDANT = "partly-redundant"
UNKNOWN = "unknown"  # no test gave evidence either way: never read as "still needed"
NEED_VERDICTS = (STILL_NEEDED, REDUNDANT, PARTLY_REDUNDANT, UNKNOWN)

STOCK_MARKER = "detects_stock_bug"
# Outcomes of a marked test on stock that show the bug is there ("stock-bugs" in tools/podman
# accepts the same two) and the one that shows it is gone. A failure counts as evidence when the
# test's own check failed (an assertion) or when it misses a name the patch itself adds (its
# tests reach for the patch's code); another exception (an attribute the candidate renamed, a
# config it no longer publishes) means the test could not exercise the candidate: no evidence.
_BUG_PRESENT = ("failed", "error")
_BUG_GONE = ("passed",)
_MISSING_NAME = re.compile(r"has no attribute '([\w.]+)'|cannot import name '([\w.]+)'|No module named '([\w.]+)'")


@dataclass(frozen=True)
class HunkMove:
    hunk: str  # label: "#2 @@ -10,6 +10,7 @@ (patch line 40)"
    offset: int  # lines from where the header (plus any declared offset) puts it


@dataclass(frozen=True)
class Mismatch:
    hunk: str
    line: int  # 1-based line of the candidate file where the first difference is
    expected: str  # the hunk's line
    actual: str  # the candidate's line there


@dataclass(frozen=True)
class HunkState:
    """Where one hunk of a conflicting file stands: how much of the patch still fits."""

    index: int
    state: str  # "applies" (old side found, `offset` lines away) | "upstream" | "conflicts"
    offset: int = 0


@dataclass(frozen=True)
class FileResult:
    path: str
    status: str
    before_declared: str | None
    before_actual: str | None  # the file as the candidate (plus the earlier applied patches) has it
    moves: tuple[HunkMove, ...] = ()
    conflict: Mismatch | None = None  # the first hunk that fits nowhere
    conflicts: tuple[Mismatch, ...] = ()  # every such hunk (the first one included)
    hunks: tuple[HunkState, ...] = ()  # for a conflicting text file: every hunk's state
    upstream_by: str | None = None  # "reverse-applies" | "after-hash"
    note: str | None = None

    @property
    def before_matches(self) -> bool:
        return self.before_declared == self.before_actual


@dataclass(frozen=True)
class PatchResult:
    patch: PatchDecl
    status: str
    files: tuple[FileResult, ...]
    # Earlier patches of the chain that conflict and touch the same files: this one was
    # checked on a tree without them.
    checked_without: tuple[str, ...] = ()


@dataclass(frozen=True)
class TestOutcome:
    __test__ = False  # not a pytest class

    nodeid: str
    outcome: str
    message: str | None = None  # pytest's crash line, e.g. "AssertionError: ..."

    def shows_bug(self, introduced: str) -> bool:
        """Failed its own check, or missed a name in `introduced` (what the patch adds)."""
        if self.outcome not in _BUG_PRESENT:
            return False
        if self.message is None or self.message.startswith(("assert", "AssertionError")):
            return True
        m = _MISSING_NAME.search(self.message)
        name = next((g for g in m.groups() if g), None) if m else None
        return name is not None and re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", introduced) is not None


@dataclass(frozen=True)
class Need:
    verdict: str
    present: tuple[TestOutcome, ...] = ()  # fail their check on the candidate: the bug is still there
    gone: tuple[TestOutcome, ...] = ()  # pass on the candidate: upstream fixed it
    no_evidence: tuple[TestOutcome, ...] = ()  # skipped, not collected, failed on another exception
    reason: str | None = None  # why the verdict is unknown


def _locate(lines: list[bytes], hunks: Sequence[Hunk], offsets: dict[int, int], new_side: bool) -> list[int | None]:
    """Where each hunk's old (or new) side matches exactly, in order, nearest to its header."""
    found: list[int | None] = []
    cursor = 0
    drift = 0  # how far the previous located hunk moved: later ones likely moved as much
    for h in hunks:
        seq = h.new_lines if new_side else h.old_lines
        header = (h.new_pos if new_side else h.old_pos) + offsets.get(h.index, 0)
        probe = replace(h, old_lines=seq)
        hits = [q for q in range(cursor, len(lines) - len(seq) + 1) if _matches(lines, q, probe)]
        if not hits:
            found.append(None)
            continue
        q = min(hits, key=lambda q: (abs(q - header - drift), q))
        found.append(q)
        cursor = q + len(seq)
        drift = q - header
    return found


def _first_difference(lines: list[bytes], h: Hunk, want: int) -> Mismatch:
    """The first differing line where the hunk's old side fits best (most equal lines)."""
    seq = h.old_lines
    best_q, best_score = want, -1
    for q in range(0, max(1, len(lines) - len(seq) + 1)):
        score = sum(1 for k, line in enumerate(seq) if q + k < len(lines) and lines[q + k] == line)
        if score > best_score or (score == best_score and abs(q - want) < abs(best_q - want)):
            best_q, best_score = q, score
    if best_score <= 0:
        best_q = min(max(want, 0), len(lines))
    for k, line in enumerate(seq):
        got = lines[best_q + k] if best_q + k < len(lines) else None
        if got != line:
            return Mismatch(h.label(), best_q + k + 1, _show(line), "<end of file>" if got is None else _show(got))
    return Mismatch(h.label(), best_q + 1, "(the hunk's lines)", "(they match here, but not in order with the other hunks)")


def classify_file(content: bytes | None, fp: FilePatch, step: FileStep | None, patch_name: str) -> tuple[FileResult, bytes | None]:
    """Classifies one file section; returns the result and the file as it is afterwards.

    The file stays as it was unless the section applies (with or without offsets).
    """
    declared = dict(step.offsets) if step else {}
    base = FileResult(fp.path, CONFLICTS, step.before if step else None, sha256(content))
    after = step.after if step else None

    if fp.op == "delete" and content is None:
        return replace(base, status=UPSTREAM, upstream_by="after-hash"), None
    if fp.op == "create" or content is None:
        if content is None and fp.op == "create":
            return replace(base, status=APPLIES), apply_file(None, fp, {}, patch_name, "")
        if content is None:
            return replace(base, note="the file does not exist in the candidate"), None
        if after is not None and sha256(content) == after:
            return replace(base, status=UPSTREAM, upstream_by="after-hash"), content
        h = fp.hunks[0] if fp.hunks else None
        if h is not None and content == b"".join(h.new_lines):
            return replace(base, status=UPSTREAM, upstream_by="reverse-applies"), content
        mismatch = _first_difference(_split_lines(content), replace(h, old_lines=h.new_lines), 0) if h else None
        return replace(base, conflict=mismatch, note="the patch creates the file, but the candidate already has another version of it"), content

    if fp.binary:
        if after is not None and sha256(content) == after:
            return replace(base, status=UPSTREAM, upstream_by="after-hash"), content
        try:
            return replace(base, status=APPLIES), apply_file(content, fp, declared, patch_name, "")
        except PatchChainError as e:
            return replace(base, note=f"binary section: {e.summary}"), content

    lines = _split_lines(content)
    forward = _locate(lines, fp.hunks, declared, new_side=False)
    if all(q is not None for q in forward):
        offsets = {h.index: q - h.old_pos for h, q in zip(fp.hunks, forward)}
        new = apply_file(content, fp, offsets, patch_name, "")  # the chain's applier, at the found lines
        moves = tuple(
            HunkMove(h.label(), offsets[h.index] - declared.get(h.index, 0))
            for h in fp.hunks
            if offsets[h.index] != declared.get(h.index, 0)
        )
        return replace(base, status=APPLIES_WITH_OFFSETS if moves else APPLIES, moves=moves), new

    if after is not None and sha256(content) == after:
        return replace(base, status=UPSTREAM, upstream_by="after-hash"), content
    backward = _locate(lines, fp.hunks, declared, new_side=True)
    if all(q is not None for q in backward):
        return replace(base, status=UPSTREAM, upstream_by="reverse-applies"), content

    # Conflict: every hunk whose old side is nowhere, and what the other hunks do.
    states = []
    mismatches = []
    drift = 0
    for h, f, b in zip(fp.hunks, forward, backward):
        if f is not None:
            drift = f - h.old_pos
            states.append(HunkState(h.index, APPLIES, drift - declared.get(h.index, 0)))
        elif b is not None:
            states.append(HunkState(h.index, UPSTREAM))
        else:
            states.append(HunkState(h.index, CONFLICTS))
            mismatches.append(_first_difference(lines, h, h.old_pos + declared.get(h.index, drift)))
    there = [st.index for st in states if st.state == UPSTREAM]
    note = ("already upstream (new side present): " + ", ".join(f"hunk #{i}" for i in there)) if there else None
    first = mismatches[0] if mismatches else _first_difference(lines, next(h for h, f in zip(fp.hunks, forward) if f is None), 0)
    return replace(base, conflict=first, conflicts=tuple(mismatches), hunks=tuple(states), note=note), content


def _patch_status(files: Iterable[FileResult]) -> str:
    statuses = {f.status for f in files}
    if statuses <= {APPLIES}:
        return APPLIES
    if statuses <= {APPLIES, APPLIES_WITH_OFFSETS}:
        return APPLIES_WITH_OFFSETS
    if statuses == {UPSTREAM}:
        return UPSTREAM
    return CONFLICTS  # a conflict, or part upstream and part not: the patch cannot apply as is


def check_chain(chain: Chain, candidate: SourceTree, patch_bytes: dict[str, bytes]) -> list[PatchResult]:
    """Classifies every patch of `chain`, in order, on the candidate tree."""
    overlay: dict[str, bytes | None] = {}
    conflicting: dict[str, set[str]] = {}  # patch name -> files it touches
    results = []
    for p in chain.patches:
        parsed = parse_patch(p.name, patch_bytes[p.name])
        steps = {s.path: s for s in p.files or ()}
        files: list[FileResult] = []
        new_files: dict[str, bytes | None] = {}
        for fp in sorted(parsed.files, key=lambda f: f.path):
            src = fp.old_path if fp.old_path is not None else fp.path
            content = overlay[src] if src in overlay else candidate.read(src, Where(patch=p.name, file=src))
            result, new = classify_file(content, fp, steps.get(fp.path), p.name)
            files.append(result)
            new_files[fp.path] = new
            if fp.op == "rename":
                new_files[src] = None
        status = _patch_status(files)
        touched = {f.path for f in files}
        without = tuple(name for name, paths in conflicting.items() if paths & touched)
        if status in (APPLIES, APPLIES_WITH_OFFSETS):
            overlay.update(new_files)
        elif status == CONFLICTS:
            conflicting[p.name] = touched
        results.append(PatchResult(p, status, tuple(files), without))
    return results


def stock_outcomes(report: dict, test_files: Iterable[str]) -> list[TestOutcome]:
    """The marked tests (and collection errors) of `test_files` in a pytest_driver report."""
    wanted = set(test_files)
    out = []
    for t in report.get("tests", ()):
        path = t["nodeid"].split("::", 1)[0]
        if path not in wanted:
            continue
        if STOCK_MARKER in t.get("markers", ()) or t["outcome"] == "collection-error":
            out.append(TestOutcome(t["nodeid"], t["outcome"], t.get("message")))
    return sorted(out, key=lambda o: o.nodeid)


def introduced_text(data: bytes, name: str) -> str:
    """What a patch adds: its added lines, and the dotted names of the modules it creates."""
    parts = []
    for fp in parse_patch(name, data).files:
        if fp.op == "create" and fp.path.endswith(".py"):
            parts.append(package_path(fp.path)[: -len(".py")].replace("/", ".") + "\n")
        for h in fp.hunks:
            old = set(h.old_lines)
            parts += [line.decode("utf-8", errors="replace") for line in h.new_lines if line not in old]
    return "".join(parts)


def need_verdict(outcomes: Sequence[TestOutcome], unavailable: str | None = None, introduced: str = "") -> Need:
    """still-needed / redundant / partly-redundant from the patch's marked tests on stock.

    `introduced` is what the patch adds (introduced_text): a test failing because one of those
    names is missing is evidence that the patch's change is not in the candidate.
    """
    if unavailable is not None:
        return Need(UNKNOWN, reason=unavailable)
    present = tuple(o for o in outcomes if o.shows_bug(introduced))
    gone = tuple(o for o in outcomes if o.outcome in _BUG_GONE)
    other = tuple(o for o in outcomes if o not in present and o not in gone)
    if not outcomes:
        return Need(UNKNOWN, reason=f"no {STOCK_MARKER} test of this patch ran on the candidate")
    if present and gone:
        verdict = PARTLY_REDUNDANT
    elif present:
        verdict = STILL_NEEDED
    elif gone:
        verdict = REDUNDANT
    else:
        return Need(UNKNOWN, no_evidence=other, reason="no test passed or failed its own check (see no evidence)")
    return Need(verdict, present, gone, other)
