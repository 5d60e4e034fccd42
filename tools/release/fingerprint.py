"""The recipe fingerprint: one sha256 over what a recipe's image is made from.

    fingerprint = sha256(canonical JSON of {
        "schema": 1,
        "declaration": <the resolved series declaration (patch chain output), parents included>,
        "patches": [{"series", "file", "sha256"} in chain order],
        "base_digest": <manifest digest of the base image>,
    })

Canonical JSON = sorted keys, no whitespace, UTF-8, so formatting never changes it. The patch
sha256s are also inside the declaration; they are listed again so the fingerprint's inputs
read plainly. A release record keeps the fingerprint; recomputing it with the record's own base
digest tells "the series changed" apart from "the base changed".
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from tools.oci.ocilayout import canonical_json

SCHEMA = 1


class FingerprintError(Exception):
    """The declaration cannot be fingerprinted."""


def patch_hashes(declaration: dict) -> list[dict[str, str]]:
    try:
        return [
            {"series": p.get("series", declaration.get("series", "")), "file": p["file"], "sha256": p["sha256"]}
            for p in declaration["patches"]
        ]
    except (KeyError, TypeError) as err:
        raise FingerprintError(f"declaration lacks patches[].file/sha256 ({err}); is it a resolved series declaration?") from None


def fingerprint(declaration: dict, base_digest: str) -> str:
    doc = {
        "schema": SCHEMA,
        "declaration": declaration,
        "patches": patch_hashes(declaration),
        "base_digest": base_digest,
    }
    return "sha256:" + hashlib.sha256(canonical_json(doc)).hexdigest()


def fingerprint_file(declaration_path: Path, base_digest: str) -> str:
    return fingerprint(json.loads(Path(declaration_path).read_text()), base_digest)


def main(argv: list[str] | None = None) -> int:
    """`fingerprint.py --declaration D --base-digest-file F --out O`: writes 'sha256:<hex>\\n'
    (the recipe fingerprint the engine image carries as a manifest annotation)."""
    import argparse
    import sys

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--declaration", type=Path, required=True, help="resolved series declaration (patch chain output)")
    p.add_argument("--base-digest-file", type=Path, required=True, help="the base image's .digest file")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    try:
        value = fingerprint_file(args.declaration, args.base_digest_file.read_text().strip())
    except (FingerprintError, OSError, json.JSONDecodeError) as err:
        print(f"fingerprint.py: error: {args.declaration}: {err}", file=sys.stderr)
        return 1
    args.out.write_text(value + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
