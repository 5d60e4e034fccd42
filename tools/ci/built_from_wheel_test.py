"""certifi's CA bundle in @pip_tools is a build output holding exactly the locked wheel's bytes.

A source file of the external repository would be rewritten in place by a machine whose
TLS-intercepting proxy appends its CA to every certifi/cacert.pem, and every test carrying it
would re-run (pip_repository.bzl, BUILT_FROM_WHEEL).
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import certifi


def _recorded_sha256(dist_info: Path, path: str) -> str:
    for line in (dist_info / "RECORD").read_text().splitlines():
        name, digest, _ = line.rsplit(",", 2)
        if name == path:
            algorithm, _, value = digest.partition("=")
            assert algorithm == "sha256", line
            return value
    raise AssertionError(f"{dist_info}/RECORD has no {path}")


def test_bundle_is_a_build_output_with_the_wheels_bytes() -> None:
    bundle = Path(certifi.where())
    real = bundle.resolve()
    assert "/bazel-out/" in str(real) and "/bin/external/" in str(real), (
        f"{bundle} resolves to {real}, a source file of the fetched repository: a rewrite of it "
        "after the fetch re-runs every test carrying it")
    site = Path(certifi.__file__).parent.parent
    dist_info = next(site.glob("certifi-*.dist-info"))
    got = base64.urlsafe_b64encode(hashlib.sha256(bundle.read_bytes()).digest()).rstrip(b"=").decode()
    assert got == _recorded_sha256(dist_info, "certifi/cacert.pem"), f"{bundle} is not the locked wheel's bundle"
