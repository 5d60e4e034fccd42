"""`bazel run //pins:resolve -- NAME...`: ask the registry or the Hub, rewrite the pin rows.

  image     `skopeo inspect --raw docker://REPO:TAG`; the digest is the sha256 of the manifest
            (or multi-platform index) bytes the registry serves for the intended tag.
  hf_model  the Hub API (huggingface_hub's HfApi.model_info): the commit the intended branch
            or tag points at.
  hf_file   the same commit, then the file downloaded at that commit and hashed (sha256).

`--ref REGISTRY/REPO:TAG` points an image row at another repository and tag first (what
`bazel run //recipes/bases:pin_prod -- REGISTRY/REPO:TAG` does for the production base).

A row already resolved whose intended tag/branch now gives another value is refused (the tag
moved: review why) unless --allow-tag-move. `--tag T` resolves another intended tag and records
it. Every write records provenance: when, the command, the source. http_archive rows are not
resolved here (Bazel verifies their sha256 on every fetch).

Credentials: skopeo's default auth file or --authfile; the Hub token from HF_TOKEN (never
printed). TLS verification is off only for loopback registries.

Trust: the machine's CA store, by name (MACHINE_CA_STORE). certifi's bundle is not in this
repository's build (tools/python/private/pip_repository.bzl), so before its first Hub client the
resolver sets SSL_CERT_FILE to the store unless the caller set it: httpx (huggingface_hub's
client) reads it before falling back to certifi, and so does hf_xet (rustls-native-certs).
skopeo (Go's crypto/x509) reads the same store by default.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from pins import table
from tools.oci.registry import RefError, RegistryError, Skopeo, parse_repository

DEFAULT_HUB = "https://huggingface.co"

# Debian's CA store (ca-certificates; what update-ca-certificates writes).
MACHINE_CA_STORE = "/etc/ssl/certs/ca-certificates.crt"


class ResolveError(Exception):
    """A row cannot be resolved; the message says why and what to do."""


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _intended(pin: table.Pin, tag: str | None) -> str:
    intended = tag or pin.intended
    if intended == pin.unresolved:
        raise ResolveError(f"pin {pin.name} records no intended tag; name it: "
                           f"`{pin.resolve_command} --tag TAG`")
    return intended


def _moved(pin: table.Pin, intended: str, new: dict[str, str], allow: bool) -> None:
    if not pin.resolved or intended != pin.intended:
        return
    old = {k: getattr(pin, k) for k in new}
    if old != new and not allow:
        raise ResolveError(
            f"pin {pin.name}: {intended} moved: the row holds {old}, the source now gives {new}; "
            f"review the change, then re-run with --allow-tag-move")


def resolve_image(pin: table.Pin, tag: str | None, skopeo: Skopeo, allow_move: bool, now: str) -> table.Pin:
    intended = _intended(pin, tag)
    try:
        repository = parse_repository(pin.repository)
        digest = skopeo.manifest_digest(repository, intended)
    except (RefError, RegistryError) as err:
        raise ResolveError(f"pin {pin.name}: {err}") from None
    if digest is None:
        raise ResolveError(f"pin {pin.name}: {pin.repository} has no tag {intended!r}")
    _moved(pin, intended, {"digest": digest}, allow_move)
    source = f"docker://{pin.repository}:{intended}"
    return replace(pin, intended=intended, digest=digest, provenance=table.Provenance(
        now, f"skopeo inspect --raw {source} (sha256 of the manifest bytes)", source))


def trust_machine_ca_store() -> str:
    """Points this process's TLS clients at the machine's CA store; returns the file they trust.

    Called before the first Hub client: httpx reads SSL_CERT_FILE when it builds a client's SSL
    context (even for http://), and without it opens certifi.where(), a file this build lacks.
    """
    return os.environ.setdefault("SSL_CERT_FILE", MACHINE_CA_STORE)


def resolve_hf(pin: table.Pin, tag: str | None, endpoint: str, allow_move: bool, now: str) -> table.Pin:
    trust_machine_ca_store()
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError

    intended = _intended(pin, tag)
    api = HfApi(endpoint=endpoint)
    try:
        commit = api.model_info(pin.repository, revision=intended).sha
    except HfHubHTTPError as err:
        raise ResolveError(f"pin {pin.name}: the Hub at {endpoint} answered {err}; check the "
                           "repository, the revision and HF_TOKEN") from None
    if not commit or not table.COMMIT_RE.match(commit):
        raise ResolveError(f"pin {pin.name}: the Hub gave no commit id for {pin.repository}@{intended}")
    source = f"{endpoint}/api/models/{pin.repository}/revision/{intended}"
    if pin.kind == "hf_model":
        _moved(pin, intended, {"revision": commit}, allow_move)
        return replace(pin, intended=intended, revision=commit, provenance=table.Provenance(
            now, "huggingface_hub HfApi.model_info (the commit of the intended revision)", source))
    with tempfile.TemporaryDirectory(prefix="pin-resolve-") as tmp:
        try:
            local = hf_hub_download(pin.repository, pin.path, revision=commit, cache_dir=tmp,
                                    endpoint=endpoint)
        except HfHubHTTPError as err:
            raise ResolveError(f"pin {pin.name}: downloading {pin.path} at {commit}: {err}") from None
        sha256 = hashlib.sha256(Path(local).read_bytes()).hexdigest()
    _moved(pin, intended, {"revision": commit, "sha256": sha256}, allow_move)
    return replace(pin, intended=intended, revision=commit, sha256=sha256, provenance=table.Provenance(
        now, f"huggingface_hub HfApi.model_info, then hf_hub_download of {pin.path} at that "
             "commit (sha256 of the file)", source))


def repoint(pin: table.Pin, ref: str) -> tuple[table.Pin, str]:
    """The row moved to REGISTRY/REPO (unresolved until resolved), and TAG, from REGISTRY/REPO:TAG."""
    repository, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag or not repository:
        raise ResolveError(f"--ref {ref!r}: expected REGISTRY/REPO:TAG, e.g. docker.io/lmsysorg/sglang:v0.5.19")
    if pin.kind != "image":
        raise ResolveError(f"--ref applies to image pins; {pin.name} is a {pin.kind}")
    if repository == pin.repository:
        return pin, tag
    return replace(pin, repository=repository, digest=pin.unresolved, provenance=None), tag


def resolve(pins: table.PinTable, names: list[str], args: argparse.Namespace, skopeo: Skopeo) -> table.PinTable:
    now = utc_now()
    if (args.tag or args.ref) and len(names) != 1:
        raise ResolveError("--tag and --ref apply to one pin; name exactly one")
    for name in names:
        pin = pins.get(name, "command line")
        if args.ref:
            pin, args.tag = repoint(pin, args.ref)
        if pin.kind == "image":
            new = resolve_image(pin, args.tag, skopeo, args.allow_tag_move, now)
        elif pin.kind in ("hf_model", "hf_file"):
            new = resolve_hf(pin, args.tag, args.hub_endpoint, args.allow_tag_move, now)
        else:
            raise ResolveError(f"pin {name} is an {pin.kind}: Bazel checks its sha256 on every "
                               "fetch; change its URL and sha256 together by hand and review")
        pins = pins.with_pin(new)
        value = ", ".join(f"{k} {getattr(new, k)}" for k in table.VALUE_FIELDS[new.kind])
        print(f"{name}: {new.repository}{' ' + new.path if new.path else ''} @ {new.intended} -> {value}")
    return pins


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="resolve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="+", metavar="NAME", help="rows of pins/repository_locations.bzl")
    parser.add_argument("--tag", help="resolve this tag/branch instead of the row's intended one (one NAME)")
    parser.add_argument("--ref", metavar="REGISTRY/REPO:TAG",
                        help="point one image pin at another repository and tag, then resolve it")
    parser.add_argument("--allow-tag-move", action="store_true",
                        help="accept a new value for a tag the row already resolved")
    parser.add_argument("--table", type=Path, help="default: the workspace's pins/repository_locations.bzl")
    parser.add_argument("--hub-endpoint", default=os.environ.get("HF_ENDPOINT", DEFAULT_HUB))
    parser.add_argument("--authfile", type=Path, help="registry credentials (default: skopeo's)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        path = args.table or table.workspace_table_path()
        pins = table.load(path)
        with tempfile.TemporaryDirectory(prefix="pin-resolve-") as tmp:
            skopeo = Skopeo(policy=Path(tmp) / "policy.json", authfile=args.authfile)
            skopeo.write_policy()
            pins = resolve(pins, args.names, args, skopeo)
        table.write(pins, path)
    except (table.PinError, ResolveError) as err:
        print(f"resolve: error: {err}", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
