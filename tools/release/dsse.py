"""DSSE envelopes (https://github.com/secure-systems-lab/dsse) signed with ed25519 via openssl.

    PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body
    envelope = {"payload": b64(body), "payloadType": type,
                "signatures": [{"keyid": <sha256 hex of the DER public key>, "sig": b64(sig)}]}

ed25519 signatures are deterministic, so signing the same statement with the same key gives
the same envelope (and Bazel can cache it). openssl (Debian's 3.0) does the cryptography: the
tools lock has no crypto library, and openssl is on every machine of this project's kind.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

IN_TOTO = "application/vnd.in-toto+json"


class DsseError(Exception):
    """Signing or verification failed; the message says which check."""


def pae(payload_type: str, body: bytes) -> bytes:
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(body), body)


def _openssl(*args: str, stdin: bytes | None = None) -> bytes:
    done = subprocess.run(["openssl", *args], input=stdin, capture_output=True, check=False)
    if done.returncode != 0:
        raise DsseError(f"openssl {' '.join(args)} failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def public_key_pem(private_key: Path) -> bytes:
    return _openssl("pkey", "-in", str(private_key), "-pubout")


def key_id(public_pem: bytes) -> str:
    der = _openssl("pkey", "-pubin", "-outform", "DER", stdin=public_pem)
    return hashlib.sha256(der).hexdigest()


def sign(body: bytes, private_key: Path, payload_type: str = IN_TOTO) -> dict:
    with tempfile.TemporaryDirectory(prefix="dsse.") as tmp:
        message = Path(tmp) / "pae"
        message.write_bytes(pae(payload_type, body))
        signature = _openssl("pkeyutl", "-sign", "-inkey", str(private_key), "-rawin", "-in", str(message))
    return {
        "payload": base64.b64encode(body).decode(),
        "payloadType": payload_type,
        "signatures": [{"keyid": key_id(public_key_pem(private_key)), "sig": base64.b64encode(signature).decode()}],
    }


@dataclass(frozen=True)
class Verified:
    payload_type: str
    body: bytes
    key_id: str


def verify(envelope: dict, public_pem: bytes) -> Verified:
    """Checks that one signature by `public_pem` covers the envelope; returns the payload."""
    try:
        body = base64.b64decode(envelope["payload"], validate=True)
        payload_type = envelope["payloadType"]
        signatures = envelope["signatures"]
    except (KeyError, ValueError, TypeError) as err:
        raise DsseError(f"not a DSSE envelope ({err})") from None
    wanted = key_id(public_pem)
    candidates = [s for s in signatures if s.get("keyid") in (wanted, "", None)]
    if not candidates:
        raise DsseError(f"no signature by key {wanted}; the envelope has {[s.get('keyid') for s in signatures]}")
    with tempfile.TemporaryDirectory(prefix="dsse.") as tmp:
        message, sig, pub = Path(tmp) / "pae", Path(tmp) / "sig", Path(tmp) / "pub.pem"
        message.write_bytes(pae(payload_type, body))
        pub.write_bytes(public_pem)
        for candidate in candidates:
            sig.write_bytes(base64.b64decode(candidate["sig"]))
            done = subprocess.run(
                ["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", str(pub), "-rawin",
                 "-in", str(message), "-sigfile", str(sig)],
                capture_output=True, check=False,
            )
            if done.returncode == 0:
                return Verified(payload_type, body, wanted)
    raise DsseError(f"signature check failed: the envelope was not signed by key {wanted}, or it was altered")


def load_envelope(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise DsseError(f"{path}: cannot read the envelope ({err})") from None
