"""DSSE envelopes (https://github.com/secure-systems-lab/dsse) signed with ed25519 by securesystemslib.

    envelope = {"payload": b64(body), "payloadType": type,
                "signatures": [{"keyid": <sha256 hex of the DER public key>, "sig": b64(sig)}]}

securesystemslib (hash-locked in //third_party/python:tools.lock) builds the PAE, signs and
verifies; pyca/cryptography reads the PEM keys. The key id stays the sha256 of the DER public
key, so envelopes and ids are the same as those made before with the openssl CLI. ed25519
signatures are deterministic: the same statement and key give the same envelope (Bazel can
cache it).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from securesystemslib import exceptions
from securesystemslib.dsse import Envelope
from securesystemslib.signer import CryptoSigner, SSlibKey

IN_TOTO = "application/vnd.in-toto+json"


class DsseError(Exception):
    """Signing or verification failed; the message says which check."""


def _private_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as err:
        raise DsseError(f"{path}: cannot read an unencrypted PEM private key ({type(err).__name__})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise DsseError(f"{path}: not an ed25519 key; make one with `openssl genpkey -algorithm ed25519`")
    return key


def _public_key(public_pem: bytes) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(public_pem)
    except ValueError as err:
        raise DsseError(f"cannot read the PEM public key ({err})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise DsseError("the public key is not an ed25519 key")
    return key


def _key_id(key: Ed25519PublicKey) -> str:
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def _sslib_key(key: Ed25519PublicKey) -> SSlibKey:
    return SSlibKey.from_crypto(key, keyid=_key_id(key))


def public_key_pem(private_key: Path) -> bytes:
    return _private_key(private_key).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def key_id(public_pem: bytes) -> str:
    return _key_id(_public_key(public_pem))


def sign(body: bytes, private_key: Path, payload_type: str = IN_TOTO) -> dict:
    key = _private_key(private_key)
    envelope = Envelope(body, payload_type, {})
    envelope.sign(CryptoSigner(key, _sslib_key(key.public_key())))
    return envelope.to_dict()


@dataclass(frozen=True)
class Verified:
    payload_type: str
    body: bytes
    key_id: str


def verify(envelope: dict, public_pem: bytes) -> Verified:
    """Checks that one signature by `public_pem` covers the envelope; returns the payload."""
    key = _sslib_key(_public_key(public_pem))
    try:
        parsed = Envelope.from_dict(json.loads(json.dumps(envelope)))  # from_dict rewrites its argument
    except (KeyError, ValueError, TypeError, AttributeError, exceptions.FormatError) as err:
        raise DsseError(f"not a DSSE envelope ({type(err).__name__}: {err})") from None
    if key.keyid not in parsed.signatures:
        raise DsseError(f"no signature by key {key.keyid}; the envelope has {sorted(parsed.signatures)}")
    try:
        parsed.verify([key], 1)
    except exceptions.VerificationError:
        raise DsseError(
            f"signature check failed: the envelope was not signed by key {key.keyid}, or it was altered") from None
    return Verified(parsed.payload_type, parsed.payload, key.keyid)


def load_envelope(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise DsseError(f"{path}: cannot read the envelope ({err})") from None
