"""Throwaway TLS material for the mTLS conformance run: a CA, a server and a client certificate.

Made at run time, valid for a day, never written into the repository. `generate` also makes a
second, unrelated CA and a client certificate it signed: the server must refuse that one.
Keys are EC P-256; private keys are unencrypted PKCS#8 PEM, the format Bazel 4.2's
`--tls_client_key` (Netty) reads.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=1)
# The server certificate's names: the loopback endpoint is dialled as 127.0.0.1 or localhost.
SERVER_SANS = (x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost"))


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


@dataclass(frozen=True)
class TlsFiles:
    ca: Path  # trusted by both sides: --tls_certificate, and the server's tls-client-certs
    server: Issued
    client: Issued
    wrong_client: Issued  # signed by another CA: must be refused


class _Authority:
    def __init__(self, name: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=False, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )

    def issue(self, common_name: str, *, server: bool) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(list(SERVER_SANS)), critical=False)
        return builder.sign(self.key, hashes.SHA256()), key


def _write(directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Issued:
    issued = Issued(cert=directory / f"{stem}.crt", key=directory / f"{stem}.key")
    issued.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    # Created 0600 before the key is written: the key is never readable by others, even briefly.
    issued.key.touch(mode=0o600)
    issued.key.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return issued


def generate(directory: Path) -> TlsFiles:
    directory.mkdir(parents=True, exist_ok=True)
    ca = _Authority("glm53 conformance CA")
    other = _Authority("unrelated CA")
    ca_path = directory / "ca.crt"
    ca_path.write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    return TlsFiles(
        ca=ca_path,
        server=_write(directory, "server", *ca.issue("glm53 conformance server", server=True)),
        client=_write(directory, "client", *ca.issue("glm53 conformance client", server=False)),
        wrong_client=_write(directory, "wrong-client", *other.issue("glm53 conformance client", server=False)),
    )
