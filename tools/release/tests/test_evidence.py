"""Provenance statement, DSSE signing and verification."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest
from securesystemslib.signer import CryptoSigner

from tools.release import dsse, evidence, provenance
from tools.release.tests.fixtures import build

KEY = Path("tools/release/testdata/TEST-ONLY-ed25519.pem")
PUB = Path("tools/release/testdata/TEST-ONLY-ed25519.pub.pem")

CONTENTS = {"layers": [
    {"contents": {"kind": "debian-rootfs", "lock_current": True,
                  "packages": [{"name": "libc6", "version": "2.36-9+deb12u14", "sha256": "a" * 64}]}},
    {"contents": {"kind": "python-wheels", "wheels": [{"name": "torch", "version": "2.13.0+cpu", "sha256": "b" * 64}]}},
    {"contents": {"files": []}},
]}


@pytest.fixture
def signed(tmp_path: Path):
    built = build(tmp_path)
    (tmp_path / "contents.json").write_text(json.dumps(CONTENTS))
    (tmp_path / "sbom.json").write_text('{"spdxVersion": "SPDX-2.3"}\n')
    (tmp_path / "lock").write_text("lock\n")
    assert evidence.main([
        "statement", "--recipe", "//recipes:glm53_v3", "--facts", str(built.facts),
        "--declaration", str(built.declaration), "--contents", str(tmp_path / "contents.json"),
        "--lock", f"recipes/bases/debian.lock={tmp_path / 'lock'}", "--sbom", str(tmp_path / "sbom.json"),
        "--out", str(tmp_path / "statement.json"),
    ]) == 0
    assert evidence.main(["sign", "--statement", str(tmp_path / "statement.json"), "--key", str(KEY),
                          "--out", str(tmp_path / "envelope.json"), "--public-key-out", str(tmp_path / "pub.pem")]) == 0
    return built, tmp_path


def _verify(built, tmp: Path, envelope: str = "envelope.json", pub: Path = PUB, sbom_file: str = "sbom.json") -> int:
    return evidence.main(["verify", "--envelope", str(tmp / envelope), "--public-key", str(pub),
                          "--digest-file", str(built.digest_file), "--sbom", str(tmp / sbom_file)])


def test_statement_lists_subject_and_materials(signed) -> None:
    built, tmp = signed
    doc = json.loads((tmp / "statement.json").read_text())
    assert doc["_type"] == provenance.STATEMENT_TYPE and doc["predicateType"] == provenance.PREDICATE_TYPE
    assert doc["subject"] == [{"name": "//recipes:glm53_v3", "digest": {"sha256": built.digest[7:]}}]
    names = [d["name"] for d in doc["predicate"]["buildDefinition"]["resolvedDependencies"]]
    assert names == ["base", "sglang-source", "patch:v1/a.diff", "patch:v3/stall.diff",
                     "lock:recipes/bases/debian.lock", "deb:libc6", "wheel:torch"]
    assert "Z" not in json.dumps(doc)  # no timestamps: the same inputs give the same bytes


def test_signature_is_deterministic_and_verifies(signed) -> None:
    built, tmp = signed
    first = (tmp / "envelope.json").read_text()
    evidence.main(["sign", "--statement", str(tmp / "statement.json"), "--key", str(KEY), "--out", str(tmp / "again.json")])
    assert (tmp / "again.json").read_text() == first
    assert (tmp / "pub.pem").read_bytes() == PUB.read_bytes()
    assert _verify(built, tmp) == 0


def test_altered_payload_fails(signed, capsys) -> None:
    built, tmp = signed
    envelope = json.loads((tmp / "envelope.json").read_text())
    body = json.loads(base64.b64decode(envelope["payload"]))
    body["predicate"]["buildDefinition"]["resolvedDependencies"].pop()
    envelope["payload"] = base64.b64encode(json.dumps(body).encode()).decode()
    (tmp / "altered.json").write_text(json.dumps(envelope))
    assert _verify(built, tmp, envelope="altered.json") == 1
    assert "signature check failed" in capsys.readouterr().err


def test_envelope_verifies_with_openssl(signed) -> None:
    """An independent DSSE implementation (PAE by hand, openssl's ed25519) accepts the envelope."""
    _, tmp = signed
    envelope = json.loads((tmp / "envelope.json").read_text())
    body, payload_type = base64.b64decode(envelope["payload"]), envelope["payloadType"].encode()
    (tmp / "pae").write_bytes(b"DSSEv1 %d %s %d %s" % (len(payload_type), payload_type, len(body), body))
    (tmp / "sig").write_bytes(base64.b64decode(envelope["signatures"][0]["sig"]))
    done = subprocess.run(["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", str(PUB), "-rawin",
                           "-in", str(tmp / "pae"), "-sigfile", str(tmp / "sig")], capture_output=True)
    assert done.returncode == 0, done.stderr
    assert envelope["signatures"][0]["keyid"] == dsse.key_id(PUB.read_bytes())


def test_other_key_fails(signed, tmp_path: Path, capsys) -> None:
    built, tmp = signed
    other = tmp_path / "other.pem"
    other.write_bytes(CryptoSigner.generate_ed25519().private_bytes)
    (tmp_path / "other.pub").write_bytes(dsse.public_key_pem(other))
    assert _verify(built, tmp, pub=tmp_path / "other.pub") == 1
    assert "no signature by key" in capsys.readouterr().err


def test_other_image_fails(signed, capsys) -> None:
    built, tmp = signed
    built.digest_file.write_text("sha256:" + "c" * 64 + "\n")
    assert _verify(built, tmp) == 1
    assert "belongs to another build" in capsys.readouterr().err


def test_changed_sbom_fails(signed, capsys) -> None:
    built, tmp = signed
    (tmp / "sbom2.json").write_text('{"spdxVersion": "SPDX-2.3", "packages": []}\n')
    assert _verify(built, tmp, sbom_file="sbom2.json") == 1
    assert "the signed statement lists" in capsys.readouterr().err
