"""bump_check: how the patch series fare on a candidate SGLang release (a report, not a gate).

  bazel run //patches:bump_check -- --to 0.5.23
  bazel run //patches:bump_check -- --to 0.5.23 --no-stock-tests     # apply checks only
  bazel run //patches:bump_check -- --to 0.5.23 --stock-report R.json  # reuse a stock run

For each series and each of its patches, in order: applies / applies-with-offsets / upstream /
conflicts, the before-hashes per file, and whether the patch is still needed (its
detects_stock_bug tests run on the candidate's unpatched CPU base). Writes report.txt,
report.json and a draft series.json for the candidate to --out-dir, prints the text and the
next command. Exit 0 for any report; 2 when the inputs are bad (unknown candidate, a series
that does not verify, a test mapping naming a missing file).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from .bump import (
    APPLIES,
    APPLIES_WITH_OFFSETS,
    CONFLICTS,
    REDUNDANT,
    STOCK_MARKER,
    UPSTREAM,
    Need,
    PatchResult,
    check_chain,
    introduced_text,
    need_verdict,
    stock_outcomes,
    unmapped_files,
)
from .chain import read_patch_files
from .declaration import Chain, dump_json, load_chain, patch_json
from .errors import PatchChainError
from .layout import SourceTree
from .package_uses import HOOKS, MISSING, NameUse, check_uses, load_uses

SCHEMA = 1
EXIT_BAD_INPUT = 2
LIST_LIMIT = 8  # tests listed per kind in the text; report.json lists all


class BadInput(Exception):
    """Inputs the check cannot run on; the message names the input and the fix."""


@dataclass(frozen=True)
class Candidate:
    version: str
    wheel: str
    url: str
    sha256: str
    cpu_base: str | None  # Bazel label of its CPU base image, or None

    @property
    def repo_suffix(self) -> str:
        return self.version.replace(".", "_")


def load_config(path: Path) -> tuple[dict[str, Candidate], dict[str, tuple[str, ...]]]:
    """(candidates by version, test files by patch name) from the config the Bazel rule writes."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise BadInput(f"{path}: cannot read the bump-check config: {e}") from None
    candidates = {}
    for version, row in sorted(data.get("candidates", {}).items()):
        missing = sorted({"wheel", "url", "sha256"} - row.keys())
        if missing:
            raise BadInput(f"patches/candidates.bzl: SGLANG_CANDIDATES[{version!r}]: missing {', '.join(missing)}")
        candidates[version] = Candidate(version, row["wheel"], row["url"], row["sha256"], row.get("cpu_base"))
    tests = {name: tuple(files) for name, files in data.get("patch_tests", {}).items()}
    return candidates, tests


def _pairs(items: list[str], flag: str) -> dict[str, Path]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise BadInput(f"{flag} {item!r}: expected VERSION=PATH")
        out[key] = Path(value)
    return out


def image_args(image_files: Path) -> list[str]:
    """--layout/--blob arguments of run_in_image from an image_files JSON (tools/podman)."""
    data = json.loads(image_files.read_text())
    args = ["--layout", data["layout"]]
    for blob in data["blobs"]:
        args += ["--blob", blob]
    return args


def run_stock_tests(image_files: Path, test_files: list[str], out: Path, backend: str) -> Path:
    """Runs the marked tests in the candidate's CPU base; returns the report (tools/podman)."""
    from tools.podman import run_in_image  # only this path needs the container runner

    report = out / "stock-report.json"
    report.unlink(missing_ok=True)
    argv = ["suite", *image_args(image_files), f"--backend={backend}", "--expect=none",
            f"--report-out={report}", "--pytest-arg=-m", f"--pytest-arg={STOCK_MARKER}",
            # one module that no longer imports on the candidate must not hide the others
            "--pytest-arg=--continue-on-collection-errors",
            "--host-tests", *test_files]
    code = run_in_image.main(argv)
    if not report.is_file():
        raise RuntimeError(f"the in-image run wrote no report (run_in_image exit {code}; see its output above)")
    return report


def _short(h: str | None) -> str:
    return "absent" if h is None else h[:12]


def result_json(r: PatchResult, tests: tuple[str, ...], need: Need) -> dict:
    return {
        "series": r.patch.series,
        "patch": r.patch.file,
        "status": r.status,
        "before_hashes_match": all(f.before_matches for f in r.files),
        "checked_without": list(r.checked_without),
        "files": [asdict(f) | {"before_matches": f.before_matches} for f in r.files],
        "stock_tests": list(tests),
        "need": asdict(need),
    }


def _need_text(need: Need) -> str:
    if need.reason and not (need.present or need.gone):
        return f"{need.verdict} ({need.reason})"
    text = f"{need.verdict} ({len(need.present)} fail, {len(need.gone)} pass on stock"
    return text + (f", {len(need.no_evidence)} inconclusive)" if need.no_evidence else ")")


def base_version(chain: Chain) -> str:
    """The SGLang release a chain is written against, from its base wheel's name."""
    return chain.base.wheel.split("-")[1]


def package_text(chain: Chain, candidate: Candidate, uses: dict[str, list[NameUse]]) -> list[str]:
    out = []
    for package, names in uses.items():
        hooks = [u for u in names if u.state == HOOKS]
        missing = [u for u in names if u.state == MISSING]
        out.append(f"package {package}: {len(names)} SGLang names of its {base_version(chain)} row;"
                   f" on {candidate.version}: {len(names) - len(hooks) - len(missing)} upstream,"
                   f" {len(hooks)} added by the series' hooks, {len(missing)} missing")
        for u in hooks:
            out.append(f"  hooks: {u.module}.{u.name} (added by {u.patch})")
        for u in missing:
            out.append(f"  missing: {u.module}.{u.name}")
    return out


def render_text(candidate: Candidate, chain: Chain, rows: list[tuple[PatchResult, tuple[str, ...], Need]],
                stock_note: str, next_steps: list[str], uses: dict[str, list[NameUse]]) -> str:
    out = [
        f"bump check: series {chain.name} ({' -> '.join(d.name for d in chain.series)}, {len(chain.patches)} patches)"
        f" on sglang {candidate.version} ({candidate.wheel}, sha256 {candidate.sha256[:12]}...)",
        f"still needed: {stock_note}",
        "",
    ]
    header = ("series", "patch", "apply", "before-hashes", "still needed")
    table = [header]
    for r, _, need in rows:
        ok = sum(f.before_matches for f in r.files)
        table.append((r.patch.series, r.patch.file, r.status, f"{ok}/{len(r.files)} match", _need_text(need)))
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    for row in table:
        out.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    out.append("")
    for r, tests, need in rows:
        out.append(f"{r.patch.name}: {r.status}")
        if r.checked_without:
            out.append(f"  checked on a tree without {', '.join(r.checked_without)} (it conflicts)")
        for f in r.files:
            before = "before-hash matches" if f.before_matches else (
                f"before-hash differs (declared {_short(f.before_declared)}, candidate {_short(f.before_actual)})")
            out.append(f"  {f.path}: {f.status}; {before}")
            for m in f.moves:
                out.append(f"    hunk {m.hunk} moved {m.offset:+d} lines")
            if f.hunks:
                out.append("    hunks: " + ", ".join(
                    f"#{h.index} " + (f"applies ({h.offset:+d})" if h.state == APPLIES else h.state) for h in f.hunks))
            for c in f.conflicts or ((f.conflict,) if f.conflict else ()):
                out.append(f"    hunk {c.hunk} conflicts: first differing line {c.line}")
                out.append(f"      patch:     {c.expected}")
                out.append(f"      candidate: {c.actual}")
            if f.upstream_by:
                out.append(f"    already there: {f.upstream_by}")
            if f.note:
                out.append(f"    {f.note}")
        out.append(f"  still needed: {_need_text(need)}")
        for label, items in (("fail on stock", need.present), ("pass on stock", need.gone), ("no evidence", need.no_evidence)):
            for o in items[:LIST_LIMIT]:
                out.append(f"    {label}: {o.nodeid} ({o.outcome}{': ' + o.message if o.message else ''})")
            if len(items) > LIST_LIMIT:
                out.append(f"    {label}: ... and {len(items) - LIST_LIMIT} more (report.json lists all)")
        if not tests:
            out.append("    (no stock tests mapped to this patch in patches/BUILD.bazel)")
    if uses:
        out.append("")
        out.extend(package_text(chain, candidate, uses))
    out.append("")
    out.append("next:")
    out.extend(f"  {s}" for s in next_steps)
    return "\n".join(out) + "\n"


def draft_series(candidate: Candidate, rows: list[tuple[PatchResult, tuple[str, ...], Need]]) -> dict:
    """A root series on the candidate holding the patches that carry over (rehash fills hashes)."""
    carried = [r.patch for r, _, need in rows
               if r.status in (APPLIES, APPLIES_WITH_OFFSETS) and need.verdict != REDUNDANT]
    patches = []
    for p in carried:
        entry = patch_json(p)
        for key in ("sha256", "files"):
            entry.pop(key)
        patches.append(entry)
    return {
        "schema": 1,
        "description": f"Draft written by bump_check: the patches that carry over to sglang {candidate.version}.",
        "base": {"wheel": candidate.wheel, "sha256": candidate.sha256},
        "patches": patches,
    }


def draft_path(out_dir: Path, chain: Chain) -> Path:
    return out_dir / f"{chain.name}.draft-series.json"


def next_steps(candidate: Candidate, chain: Chain, rows: list[tuple[PatchResult, tuple[str, ...], Need]],
               out_dir: Path, uses: dict[str, list[NameUse]]) -> list[str]:
    name = f"{chain.name}_{candidate.repo_suffix}"
    carry = [r for r, _, need in rows if r.status in (APPLIES, APPLIES_WITH_OFFSETS) and need.verdict != REDUNDANT]
    moved = [r for r in carry if r.status == APPLIES_WITH_OFFSETS]
    drop = [r for r, _, need in rows if r.status == UPSTREAM or need.verdict == REDUNDANT]
    redo = [r for r, _, need in rows if r.status == CONFLICTS and need.verdict != REDUNDANT]
    steps = []
    if carry:
        files = " ".join(f"patches/{r.patch.name}" for r in carry)
        steps.append(f"start series {name} on {candidate.version} from the draft: mkdir -p patches/{name} && "
                     f"cp {draft_path(out_dir, chain)} patches/{name}/series.json && cp {files} patches/{name}/")
    if moved:
        steps.append("regenerate in patches/{} against the candidate (hunks moved; rehash refuses undeclared offsets): ".format(name)
                     + ", ".join(r.patch.file for r in moved))
    if carry:
        steps.append(f"bazel run //patches:rehash_{candidate.repo_suffix} -- {name}   (review, then add --write)")
    if redo:
        steps.append("port by hand (conflicts; see the hunks above), then add to the series: "
                     + ", ".join(r.patch.name for r in redo))
    if drop:
        steps.append("leave out (already upstream or redundant on stock): " + ", ".join(r.patch.name for r in drop))
    for package, names in uses.items():
        missing = [f"{u.module}.{u.name}" for u in names if u.state == MISSING]
        if missing:
            steps.append(f"change package {package} for {candidate.version} (names it uses are gone): " + ", ".join(missing))
        steps.append(f"add the {candidate.version!r} row to {package}/sglang_support.py USES once the hooks are re-anchored")
    if not steps:
        steps.append("nothing carries over; start from the upstream release")
    return steps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--to", required=True, metavar="VERSION", help="the candidate release (a row of patches/candidates.bzl)")
    ap.add_argument("--config", type=Path, required=True, help="(set by the Bazel target) candidates and test mapping")
    ap.add_argument("--patches-dir", type=Path, required=True, help="directory holding <series>/series.json")
    ap.add_argument("--series", action="append", default=[], help="leaf series to check (repeatable; default: the target's)")
    ap.add_argument("--tree", action="append", default=[], metavar="VERSION=MARKER",
                    help="(set by the Bazel target) the candidate's sglang/__init__.py")
    ap.add_argument("--cpu-base", action="append", default=[], metavar="VERSION=IMAGE_FILES_JSON",
                    help="(set by the Bazel target) the candidate's CPU base image (tools/podman image_files)")
    ap.add_argument("--package-support", action="append", default=[], metavar="PACKAGE=PATH",
                    help="(set by the Bazel target) a shipped package's sglang_support.py")
    ap.add_argument("--test-files", nargs="*", default=[], help="(set by the Bazel target) every file of the series' tests")
    ap.add_argument("--stock-report", type=Path, help="use this pytest_driver report instead of running the stock tests")
    ap.add_argument("--no-stock-tests", action="store_true", help="skip the stock tests (still needed: unknown)")
    ap.add_argument("--backend", default="auto", choices=("auto", "podman", "bwrap"), help="container runtime for the stock tests")
    ap.add_argument("--out-dir", type=Path, help="where report.txt/json and the draft go (default: a directory under $TMPDIR)")
    args = ap.parse_args(argv)
    try:
        return _run(args)
    except (BadInput, PatchChainError) as e:
        print(f"bump_check: bad input: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _run(args: argparse.Namespace) -> int:
    candidates, patch_tests = load_config(args.config)
    if args.to not in candidates:
        raise BadInput(f"--to {args.to}: not a candidate; pinned: {', '.join(candidates) or 'none'} "
                       "(add a row to patches/candidates.bzl)")
    candidate = candidates[args.to]
    trees = _pairs(args.tree, "--tree")
    if args.to not in trees:
        raise BadInput(f"no source tree for {args.to}: the Bazel target passes --tree {args.to}=<@sglang_src_{candidate.repo_suffix}//:sglang/__init__.py>")
    tree = SourceTree(trees[args.to].absolute().parent.parent, "package", allow_file_symlinks=True)
    tree.check_root()
    out_dir = args.out_dir or Path(tempfile.gettempdir()) / f"glm53-bump-check-{args.to}"
    out_dir.mkdir(parents=True, exist_ok=True)

    series_names = args.series or ["v3"]
    chains = [load_chain(args.patches_dir, s) for s in series_names]
    available = set(args.test_files)
    for chain in chains:
        for p in chain.patches:
            for f in patch_tests.get(p.name, ()):
                if f"{args.patches_dir}/{f}" not in available:
                    raise BadInput(f"patches/BUILD.bazel: bump_check patch_tests[{p.name!r}] names {f}, which is not "
                                   "among the series' test files; fix the path or add the file to the tests filegroup")

    supports = _pairs(args.package_support, "--package-support")
    stock_note, report, unavailable = _stock_report(args, candidate, out_dir)
    doc: dict = {"schema": SCHEMA, "candidate": asdict(candidate), "stock": stock_note, "series": []}
    text = []
    for chain in chains:
        patch_bytes = read_patch_files(chain)
        results = check_chain(chain, tree, patch_bytes)
        rows = []
        for r in results:
            tests = tuple(f"{args.patches_dir}/{f}" for f in patch_tests.get(r.patch.name, ()))
            outcomes = stock_outcomes(report, tests) if report is not None else []
            need = need_verdict(outcomes, unavailable if report is None else (None if tests else "no stock tests mapped"),
                                introduced_text(patch_bytes[r.patch.name], r.patch.name))
            rows.append((r, tests, need))
        uses = _package_uses(chain, supports, tree, patch_bytes)
        steps = next_steps(candidate, chain, rows, out_dir, uses)
        unmapped = unmapped_files(report, (t for _, ts, _ in rows for t in ts)) if report is not None else {}
        for path, n in unmapped.items():
            steps.append(f"map {path} ({n} {STOCK_MARKER} tests, claimed by no patch) in patch_tests of "
                         f"//patches:bump_check (patches/BUILD.bazel), then re-run")
        doc["series"].append({"series": chain.name, "chain": [d.name for d in chain.series],
                              "patches": [result_json(r, t, n) for r, t, n in rows], "unmapped_tests": unmapped,
                              "packages": {p: [asdict(u) for u in names] for p, names in uses.items()},
                              "next": steps})
        draft_path(out_dir, chain).write_text(dump_json(draft_series(candidate, rows)))
        text.append(render_text(candidate, chain, rows, stock_note, steps, uses))
    (out_dir / "report.json").write_text(dump_json(doc))
    (out_dir / "report.txt").write_text("\n".join(text))
    sys.stdout.write("\n".join(text))
    drafts = ", ".join(str(draft_path(out_dir, c)) for c in chains)
    print(f"\nwrote {out_dir / 'report.txt'}, {out_dir / 'report.json'} and the draft(s) {drafts}")
    return 0


def _package_uses(chain: Chain, supports: dict[str, Path], tree: SourceTree,
                  patch_bytes: dict[str, bytes]) -> dict[str, list[NameUse]]:
    """Per package the chain ships: its SGLang names (its row for the chain's release) on the candidate."""
    out = {}
    for package in chain.packages:
        if package not in supports:
            raise BadInput(f"series {chain.name} ships package {package}, but bump_check got no "
                           f"--package-support {package}=<its sglang_support.py> (package_support in patches/BUILD.bazel)")
        out[package] = check_uses(load_uses(supports[package], base_version(chain)), tree, patch_bytes)
    return out


def _stock_report(args: argparse.Namespace, candidate: Candidate, out_dir: Path) -> tuple[str, dict | None, str | None]:
    """(what the stock run was, its report or None, why there is none)."""
    if args.stock_report is not None:
        try:
            return f"from {args.stock_report}", json.loads(args.stock_report.read_text()), None
        except (OSError, ValueError) as e:
            raise BadInput(f"--stock-report {args.stock_report}: {e}") from None
    if args.no_stock_tests:
        return "not run (--no-stock-tests)", None, "stock tests not run (--no-stock-tests)"
    bases = _pairs(args.cpu_base, "--cpu-base")
    if args.to not in bases:
        reason = f"no CPU base for {args.to} (set cpu_base in patches/candidates.bzl)"
        return reason, None, reason
    try:
        path = run_stock_tests(bases[args.to], list(args.test_files), out_dir, args.backend)
    except Exception as e:  # noqa: BLE001 -- a runner failure is a finding of the report, not a crash
        reason = f"the in-image stock run failed: {e}"
        return reason, None, reason
    return f"-m {STOCK_MARKER} inside {candidate.cpu_base} ({path})", json.loads(path.read_text()), None


if __name__ == "__main__":
    sys.exit(main())
