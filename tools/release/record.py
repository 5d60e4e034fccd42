"""Release records: recipes/releases/<recipe>.json, written only by this tool.

A record says which image a deployment may pin. Its facts (digest, base, patch-layer digest,
fingerprint, patches) come from the build (`<recipe>.release_facts.json`, written by
tools/release/facts.py); this writer adds where the image is (meant to be) published and when.

Rules the writer enforces:
  * the facts' digest must equal the built `<recipe>.digest` (a record never names an image
    this checkout did not build);
  * `release` (unpublished) replaces a record of another digest (that is what a new release
    is), keeps `published: true` when re-run for the same digest and repository, and leaves
    the file untouched when nothing but the time would change;
  * `push` (tools/release/push.py) only records a digest the registry confirmed, and refuses
    when an existing record holds another digest or repository.
The schema (keys, types, grammar) is tools/release/schema.py; writes are atomic
(tools/files/atomic.py).

Usage (normally through `bazel run //recipes:<recipe>.release -- --repository REPO`):
  record.py release --facts F --digest-file D --repository docker.io/nearai/sglang-glm53
  record.py check --facts F --record recipes/releases/glm53_v3.json --declaration DECL
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from tools.files import atomic
from tools.oci.reference import ReferenceError, check_digest, check_tag, parse_repository
from tools.release.fingerprint import fingerprint
from tools.release.schema import Facts, Record, RecordError, load, read_json


def read_built_digest(digest_file: Path) -> str:
    text = Path(digest_file).read_text()
    if not text.endswith("\n") or text.count("\n") != 1:
        raise RecordError(f"{digest_file}: expected 'sha256:<64 hex>' and one newline")
    try:
        return check_digest(text.strip(), str(digest_file))
    except ReferenceError as err:
        raise RecordError(str(err)) from None


def check_facts_match_build(facts: Facts, built_digest: str, digest_file: Path) -> None:
    if facts.digest != built_digest:
        raise RecordError(
            f"refusing to record {facts.digest}: the built image ({digest_file}) is {built_digest};"
            f" rebuild with `bazel build {facts.recipe}` and run the command again"
        )


def default_tag(facts: Facts) -> str:
    """glm53-v3-<first 12 hex of the digest>: unique per image, so it never has to move."""
    stem = facts.recipe.rsplit(":", 1)[-1].replace("_", "-")
    return check_tag(f"{stem}-{facts.digest.split(':', 1)[1][:12]}")


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def source_revision(workspace: Path | None) -> str:
    if workspace is None:
        return "unknown"
    done = subprocess.run(["git", "-C", str(workspace), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    rev = done.stdout.strip()
    return rev if done.returncode == 0 and len(rev) == 40 else "unknown"


def new_record(facts: Facts, repository: str, tag: str, published: bool, revision: str, now: str) -> Record:
    return Record(
        recipe=facts.recipe, series=facts.series, repository=repository, tag=tag, digest=facts.digest,
        base=facts.base, patch_layer_digest=facts.patch_layer_digest, fingerprint=facts.fingerprint,
        patches=facts.patches, published=published, source_revision=revision, recorded_at=now,
    )


def _same_except_time(a: Record, b: Record) -> bool:
    return replace(a, source_revision="", recorded_at="") == replace(b, source_revision="", recorded_at="")


def plan_release(existing: Record | None, facts: Facts, repository: str, tag: str, revision: str, now: str) -> Record | None:
    """The record `release` writes, or None when the file already says exactly this."""
    published = bool(
        existing and existing.published and existing.digest == facts.digest
        and existing.repository == repository and existing.tag == tag
    )
    record = new_record(facts, repository, tag, published, revision, now)
    if existing is not None and _same_except_time(existing, record):
        return None
    return record


def plan_push(existing: Record | None, facts: Facts, repository: str, tag: str, registry_digest: str,
              revision: str, now: str, where: str) -> Record | None:
    """The record a confirmed push writes; refuses a registry digest that contradicts anything."""
    if registry_digest != facts.digest:
        raise RecordError(
            f"the registry returned {registry_digest} for {repository}:{tag}, but the built image is"
            f" {facts.digest}; nothing was recorded (the registry rewrote the image?)"
        )
    if existing is not None and existing.digest != registry_digest:
        raise RecordError(
            f"{where} holds {existing.digest}, but the registry returned {registry_digest};"
            f" to release this build, record it first with `bazel run {facts.recipe}.release --"
            f" --repository {existing.repository}` and review the change, then push again"
        )
    record = new_record(facts, repository, tag, True, revision, now)
    if existing is not None and _same_except_time(existing, record):
        return None
    return record


def check_record(record: Record, facts: Facts, declaration: dict, where: str, base_strict: bool) -> list[str]:
    """Problems between a committed record and what its recipe builds now ([] = matches)."""
    fix = f"record a new release with `bazel run {facts.recipe}.release -- --repository {record.repository}`"
    problems = []
    if record.recipe != facts.recipe or record.series != facts.series:
        problems.append(f"{where}: recipe/series {record.recipe}/{record.series}, build says {facts.recipe}/{facts.series}")
    if record.patch_layer_digest != facts.patch_layer_digest:
        problems.append(
            f"{where}: patch_layer_digest {record.patch_layer_digest}, but the recipe now builds"
            f" {facts.patch_layer_digest}; the patched files or the recipe files changed: {fix}"
        )
    series_fingerprint = fingerprint(declaration, record.base.digest)
    if series_fingerprint != record.fingerprint:
        problems.append(
            f"{where}: fingerprint {record.fingerprint}, but the series declaration and patches give"
            f" {series_fingerprint} (with the record's base {record.base.digest}); the series changed: {fix}"
        )
    if record.base.flavor != facts.base.flavor:
        problems.append(f"{where}: base flavor {record.base.flavor}, but the recipe now builds on a"
                        f" {facts.base.flavor} base: {fix}")
    if record.base.digest != facts.base.digest:
        message = (
            f"{where}: base {record.base.name}@{record.base.digest}, but the recipe now builds on"
            f" {facts.base.digest} (the Debian archive moved or the base pin changed): {fix}"
        )
        if base_strict:
            problems.append(message)
        else:
            print(f"record check: warning: {message}", file=sys.stderr)
    elif record.digest != facts.digest:
        problems.append(f"{where}: digest {record.digest}, but the same base and series now build {facts.digest}: {fix}")
    if record.patches != facts.patches:
        problems.append(f"{where}: patches {[p.to_json() for p in record.patches]} differ from the build's: {fix}")
    return problems


def records_dir(value: Path | None) -> Path:
    if value is not None:
        return value
    workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    if not workspace:
        raise RecordError("--records-dir is required outside `bazel run` (no BUILD_WORKSPACE_DIRECTORY)")
    return Path(workspace) / "recipes" / "releases"


def record_path(records_dir: Path, facts: Facts) -> Path:
    return records_dir / (facts.recipe.rsplit(":", 1)[-1] + ".json")


def cmd_release(args: argparse.Namespace) -> int:
    facts = Facts.load(args.facts)
    check_facts_match_build(facts, read_built_digest(args.digest_file), args.digest_file)
    try:
        repository = str(parse_repository(args.repository))
        tag = check_tag(args.tag) if args.tag is not None else default_tag(facts)
    except ReferenceError as err:
        raise RecordError(str(err)) from None
    path = record_path(records_dir(args.records_dir), facts)
    workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    try:
        existing = load(path)
    except RecordError as err:
        # An older record format: `release` writes an unpublished record anyway.
        print(f"{path}: replacing a record this writer cannot read ({err})", file=sys.stderr)
        existing = None
    record = plan_release(existing, facts, repository, tag,
                          source_revision(Path(workspace) if workspace else None), utc_now())
    if record is None:
        print(f"{path}: already records {repository}@{facts.digest}; unchanged")
        return 0
    atomic.write_text(path, record.text())
    state = "published" if record.published else "not yet published"
    print(f"{path}: recorded {record.image} (tag {record.tag}, {state})")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    facts = Facts.load(args.facts)
    record = load(args.record)
    if record is None:
        print(
            f"{args.record}: no release record; create it with"
            f" `bazel run {facts.recipe}.release -- --repository <HOST/REPO>`",
            file=sys.stderr,
        )
        return 1
    # A changed base is an error while the Debian lock is current (the base must rebuild
    # byte-identical then); after archive drift it is a warning unless --base-strict.
    strict = args.base_strict or facts.base_lock_current
    problems = check_record(record, facts, read_json(args.declaration), str(args.record), strict)
    for problem in problems:
        print(f"record check: {problem}", file=sys.stderr)
    if not problems:
        print(f"{args.record}: matches the build (patch layer {facts.patch_layer_digest}, fingerprint {facts.fingerprint})")
    return 1 if problems else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="record.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="subcommand", required=True)
    rel = sub.add_parser("release", help="record the built image as a release (not yet published)")
    rel.add_argument("--facts", type=Path, required=True, help="<recipe>.release_facts.json")
    rel.add_argument("--digest-file", type=Path, required=True, help="the built <recipe>.digest")
    rel.add_argument("--repository", required=True, help="HOST[:PORT]/REPO the image is meant for")
    rel.add_argument("--tag", help="default: <recipe>-<first 12 hex of the digest>")
    rel.add_argument("--records-dir", type=Path, help="default: <workspace>/recipes/releases")
    rel.set_defaults(func=cmd_release)
    chk = sub.add_parser("check", help="does a committed record still match the build?")
    chk.add_argument("--facts", type=Path, required=True)
    chk.add_argument("--record", type=Path, required=True)
    chk.add_argument("--declaration", type=Path, required=True, help="the resolved series declaration")
    chk.add_argument("--base-strict", action="store_true",
                     help="a changed base digest is an error, not a warning (release builds)")
    chk.set_defaults(func=cmd_check)
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (RecordError, OSError) as err:
        print(f"record.py: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
