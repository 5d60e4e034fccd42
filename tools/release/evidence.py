"""Release evidence of a recipe image: signed provenance and its verification.

The SBOM it covers is made per layer and merged by layer_sbom.py.

    evidence.py statement --recipe //recipes:glm53_v3 --facts F --declaration D --contents C
                          --lock SHORT=PATH ... --sbom S --out provenance.json
    evidence.py sign      --statement S --key KEY.pem --out provenance.dsse.json [--public-key-out P]
    evidence.py verify    --envelope E --public-key P --digest-file glm53_v3.digest [--sbom S]

`verify` checks, in order: the DSSE signature by the given public key, that the payload is an
in-toto Statement with a SLSA v1 predicate, that its subject digest is the built image's
digest, and (with --sbom) that the SBOM file is the one the statement lists as a byproduct.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

from tools.release import dsse, provenance


class VerifyError(Exception):
    """The evidence does not verify; the message names the failed check."""


def _json(path: Path):
    return json.loads(Path(path).read_text())


def _write_json(path: Path, value) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")


def cmd_statement(args: argparse.Namespace) -> int:
    locks = []
    for item in args.lock:
        short, sep, path = item.partition("=")
        if not sep:
            raise VerifyError(f"--lock {item!r}: expected SHORT_PATH=PATH")
        locks.append((short, Path(path)))
    doc = provenance.statement(
        recipe=args.recipe,
        facts=_json(args.facts),
        declaration=_json(args.declaration),
        contents=_json(args.contents),
        locks=locks,
        sbom=args.sbom,
    )
    _write_json(args.out, doc)
    return 0


def user_path(path: Path | None) -> Path | None:
    """A path the user typed after `bazel run ... --`: relative to where they ran bazel."""
    base = os.environ.get("BUILD_WORKING_DIRECTORY")
    if path is None or path.is_absolute() or not base:
        return path
    return Path(base) / path


def cmd_sign(args: argparse.Namespace) -> int:
    args.key, args.out, args.public_key_out = (user_path(p) for p in (args.key, args.out, args.public_key_out))
    body = Path(args.statement).read_bytes()
    envelope = dsse.sign(body, args.key)
    _write_json(args.out, envelope)
    if args.public_key_out:
        args.public_key_out.write_bytes(dsse.public_key_pem(args.key))
    print(f"sign: {args.out} signed by key {envelope['signatures'][0]['keyid']}")
    return 0


def verify_evidence(envelope: dict, public_pem: bytes, built_digest: str, sbom: Path | None) -> dict:
    verified = dsse.verify(envelope, public_pem)
    if verified.payload_type != dsse.IN_TOTO:
        raise VerifyError(f"payloadType {verified.payload_type!r}, expected {dsse.IN_TOTO!r}")
    statement = json.loads(verified.body)
    if statement.get("_type") != provenance.STATEMENT_TYPE:
        raise VerifyError(f"statement _type {statement.get('_type')!r}, expected {provenance.STATEMENT_TYPE!r}")
    if statement.get("predicateType") != provenance.PREDICATE_TYPE:
        raise VerifyError(f"predicateType {statement.get('predicateType')!r}, expected {provenance.PREDICATE_TYPE!r}")
    subjects = [s.get("digest", {}).get("sha256") for s in statement.get("subject", [])]
    if built_digest.split(":", 1)[1] not in subjects:
        raise VerifyError(
            f"the statement's subject digests {subjects} do not include the built image {built_digest};"
            " the evidence belongs to another build: rebuild the .evidence target"
        )
    if sbom is not None:
        wanted = [b["digest"]["sha256"] for b in statement["predicate"]["runDetails"].get("byproducts", [])
                  if b.get("name") == "sbom.spdx.json"]
        actual = hashlib.sha256(Path(sbom).read_bytes()).hexdigest()
        if actual not in wanted:
            raise VerifyError(f"{sbom} hashes to {actual}; the signed statement lists {wanted}")
    return statement


def cmd_verify(args: argparse.Namespace) -> int:
    built = Path(args.digest_file).read_text().strip()
    statement = verify_evidence(dsse.load_envelope(args.envelope), Path(args.public_key).read_bytes(), built, args.sbom)
    deps = statement["predicate"]["buildDefinition"]["resolvedDependencies"]
    print(
        f"verify: OK: {args.envelope} is signed by key {dsse.key_id(Path(args.public_key).read_bytes())},"
        f" subject {statement['subject'][0]['name']}@{built}, {len(deps)} materials"
        + (f", SBOM {args.sbom} matches" if args.sbom else "")
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evidence.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="subcommand", required=True)
    st = sub.add_parser("statement", help="in-toto Statement with a SLSA v1 provenance predicate")
    st.add_argument("--recipe", required=True)
    st.add_argument("--facts", type=Path, required=True, help="<recipe>.release_facts.json")
    st.add_argument("--declaration", type=Path, required=True)
    st.add_argument("--contents", type=Path, required=True, help="OciImageInfo.contents of the image")
    st.add_argument("--lock", action="append", default=[], metavar="SHORT_PATH=PATH")
    st.add_argument("--sbom", type=Path)
    st.add_argument("--out", type=Path, required=True)
    st.set_defaults(func=cmd_statement)
    sg = sub.add_parser("sign", help="wrap a statement in a DSSE envelope signed with an ed25519 key")
    sg.add_argument("--statement", type=Path, required=True)
    sg.add_argument("--key", type=Path, required=True, help="ed25519 private key (PEM)")
    sg.add_argument("--out", type=Path, required=True)
    sg.add_argument("--public-key-out", type=Path)
    sg.set_defaults(func=cmd_sign)
    v = sub.add_parser("verify", help="check signature, statement type, subject digest (and SBOM)")
    v.add_argument("--envelope", type=Path, required=True)
    v.add_argument("--public-key", type=Path, required=True)
    v.add_argument("--digest-file", type=Path, required=True, help="the built <recipe>.digest")
    v.add_argument("--sbom", type=Path)
    v.set_defaults(func=cmd_verify)
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (VerifyError, dsse.DsseError, OSError, ValueError, KeyError) as err:
        print(f"evidence.py {args.subcommand}: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
