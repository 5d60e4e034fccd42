"""Pushes a built recipe image with skopeo and records the release the registry confirmed.

    bazel run //recipes:glm53_v3.push -- --repository HOST[:PORT]/REPO --tag TAG

Order of checks (nothing is pushed unless all pre-push checks pass):
  1. the tag matches ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ and the repository is HOST[:PORT]/PATH;
  2. the layout's manifest digest equals the built <recipe>.digest and the release facts;
  3. an existing record for the recipe holds the same digest and repository (else: record the
     new build with the .release target first, review, then push);
  4. the tag is absent from the registry or already names this digest (tags never move,
     unless --allow-tag-move).
Then `skopeo copy --preserve-digests`, and the registry's manifest for REPO:TAG is fetched back
and hashed: the record is written only when that equals the built digest.
TLS verification is off only for loopback registries (127.0.0.1, localhost).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from tools.oci.materialize import link_view
from tools.oci.ocilayout import Image, LayoutError, find_layout, parse_blob_args, read_layout
from tools.files import atomic
from tools.release import record as record_lib
from tools.oci import registry

BASE_NAME_LABEL = "org.opencontainers.image.base.name"
BASE_DIGEST_LABEL = "org.opencontainers.image.base.digest"


class PushError(Exception):
    """A pre-push check failed."""


def default_policy_dir() -> Path:
    from tools.podman.spec import default_cache_root

    return default_cache_root() / "skopeo"


def seed_shallow_base(image: Image, repository: registry.Repository, skopeo: registry.Skopeo) -> str | None:
    """Copies a shallow base into the destination repository; returns the tag used (or None).

    An image built on a shallow-pulled base (--config=prod) has no blobs for the base layers:
    the registry must already hold them in the destination repository, where skopeo finds and
    reuses them. So the base is first copied there, registry to registry, by its digest (its
    name and digest are the image's org.opencontainers.image.base.* labels).
    """
    if all(layer.path is not None for layer in image.layers):
        return None
    labels = image.labels
    name, digest = labels.get(BASE_NAME_LABEL), labels.get(BASE_DIGEST_LABEL)
    if not name or not digest:
        raise PushError(f"{image.layout}: shallow layers but no base name/digest labels to copy them from")
    try:
        source = registry.parse_repository(name)
    except registry.RefError as err:
        raise PushError(f"base {name!r} of a shallow image is not a registry repository: {err}") from None
    base_tag = "glm53-base-" + digest.split(":", 1)[1][:12]
    if skopeo.manifest_digest(repository, base_tag) != digest:
        print(f"push: copying the shallow base {source}@{digest} to {repository}:{base_tag} (blobs only once)")
        skopeo.copy_between(source, digest, repository, base_tag)
    return base_tag


def push_image(image: Image, repository: registry.Repository, tag: str, skopeo: registry.Skopeo) -> str:
    """Pushes byte for byte; returns the digest the registry serves for REPO:TAG, checked."""
    seed_shallow_base(image, repository, skopeo)
    with tempfile.TemporaryDirectory(prefix="push.") as tmp:
        # A symlink view: tools/oci layouts keep the base layer blobs outside the layout.
        view = link_view(image, Path(tmp) / "layout")
        pushed = skopeo.push(view, repository, tag, Path(tmp) / "digest")
    served = skopeo.manifest_digest(repository, tag)
    print(f"push: skopeo reported {pushed}; {repository}:{tag} serves {served}; built {image.manifest_digest}")
    if pushed != image.manifest_digest or served != image.manifest_digest:
        raise PushError(
            f"the registry does not hold the built image: skopeo reported {pushed}, {repository}:{tag}"
            f" serves {served}, built {image.manifest_digest}; nothing was recorded"
        )
    return served


def push(args: argparse.Namespace) -> int:
    try:
        repository = registry.parse_repository(args.repository)
        tag = registry.check_tag(args.tag)
    except registry.RefError as err:
        raise PushError(str(err)) from None
    facts = record_lib.Facts.load(args.facts)
    built = record_lib.read_built_digest(args.digest_file)
    record_lib.check_facts_match_build(facts, built, args.digest_file)
    image = read_layout(find_layout([Path(p) for p in args.layout]), parse_blob_args(args.blob))
    if image.manifest_digest != built:
        raise PushError(
            f"layout {image.layout} holds {image.manifest_digest}, but {args.digest_file} says {built};"
            f" rebuild with `bazel build {facts.recipe}`"
        )
    path = record_lib.record_path(record_lib.records_dir(args.records_dir), facts)
    existing = record_lib.load(path)
    if existing is not None and existing.digest != built:
        raise PushError(
            f"{path} holds {existing.digest}, but this build is {built}; to release this build, run"
            f" `bazel run {facts.recipe}.release -- --repository {repository}`, review and commit the"
            " record, then push again"
        )
    if existing is not None and existing.repository != str(repository):
        raise PushError(
            f"{path} records repository {existing.repository}, not {repository}; push to the recorded"
            " repository, or record the release for the new one with the .release target first"
            " (use --records-dir for a scratch record, e.g. when pushing to a test registry)"
        )
    authfile = args.authfile
    if authfile is not None and not authfile.is_absolute() and os.environ.get("BUILD_WORKING_DIRECTORY"):
        authfile = Path(os.environ["BUILD_WORKING_DIRECTORY"]) / authfile  # typed after `bazel run --`
    skopeo = registry.Skopeo(policy=args.policy_dir / "policy.json", authfile=authfile)
    skopeo.write_policy()
    current = skopeo.manifest_digest(repository, tag)
    if current is not None and current != built and not args.allow_tag_move:
        raise PushError(
            f"{repository}:{tag} already names {current}; refusing to move the tag to {built}"
            " (pick a new tag, or pass --allow-tag-move)"
        )
    served = push_image(image, repository, tag, skopeo)
    workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    record = record_lib.plan_push(
        existing, facts, str(repository), tag, served,
        record_lib.source_revision(Path(workspace) if workspace else None), record_lib.utc_now(), str(path),
    )
    if record is None:
        print(f"{path}: already records {repository}@{built} as published; unchanged")
    else:
        atomic.write_text(path, record.text())
        print(f"{path}: recorded {record.image} (tag {tag}, published)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="push.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repository", required=True, help="HOST[:PORT]/REPO")
    parser.add_argument("--tag", required=True, help="tag to push (must match the tag grammar)")
    parser.add_argument("--layout", action="append", required=True,
                        help="OCI layout (repeatable; the one holding index.json is used)")
    parser.add_argument("--blob", action="append", default=[], metavar="DESCRIPTOR=BLOB",
                        help="a layer blob kept outside the layout (tools/oci layer_args format)")
    parser.add_argument("--digest-file", type=Path, required=True, help="the built <recipe>.digest")
    parser.add_argument("--facts", type=Path, required=True, help="<recipe>.release_facts.json")
    parser.add_argument("--records-dir", type=Path, help="default: <workspace>/recipes/releases")
    parser.add_argument("--authfile", type=Path, help="registry credentials (skopeo/podman auth.json)")
    parser.add_argument("--policy-dir", type=Path, default=default_policy_dir(),
                        help="where the skopeo signature policy is written (default: %(default)s)")
    parser.add_argument("--allow-tag-move", action="store_true",
                        help="let an existing tag be moved to this image")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        return push(args)
    except (PushError, record_lib.RecordError, registry.RegistryError, LayoutError, registry.RefError) as err:
        print(f"push: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
