"""The mTLS conformance pieces, without BuildGrid or Bazel."""

from __future__ import annotations

import os
import socket
import ssl
import threading
from pathlib import Path

import pytest

from tools.remote import certs, diagnose, rcfile

TEMPLATE = Path(os.environ["RC_TEMPLATE"])


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> certs.TlsFiles:
    return certs.generate(tmp_path_factory.mktemp("tls"))


def _handshake(files: certs.TlsFiles, client: certs.Issued | None, server_name: str) -> tuple[Exception | None, Exception | None]:
    """One TLS handshake over a socketpair, the server requiring a client certificate from files.ca."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(files.server.cert, files.server.key)
    server_ctx.load_verify_locations(files.ca)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(files.ca)
    if client:
        client_ctx.load_cert_chain(client.cert, client.key)
    a, b = socket.socketpair()
    errors: dict[str, Exception | None] = {"server": None, "client": None}

    def serve() -> None:
        try:
            with server_ctx.wrap_socket(a, server_side=True) as conn:
                conn.sendall(b"ok")
        except (ssl.SSLError, OSError) as err:
            errors["server"] = err

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client_ctx.wrap_socket(b, server_hostname=server_name) as conn:
            conn.recv(2)  # TLS 1.3: a refused client certificate surfaces on the first read
    except (ssl.SSLError, OSError) as err:
        errors["client"] = err
    thread.join()
    return errors["server"], errors["client"]


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost"])
def test_the_client_certificate_is_accepted_and_the_server_name_verifies(files, name) -> None:
    assert _handshake(files, files.client, name) == (None, None)


def test_a_client_certificate_from_another_ca_is_refused(files) -> None:
    server_error, _ = _handshake(files, files.wrong_client, "127.0.0.1")
    assert isinstance(server_error, ssl.SSLError)
    assert "certificate verify failed" in str(server_error)


def test_no_client_certificate_is_refused(files) -> None:
    server_error, _ = _handshake(files, None, "127.0.0.1")
    assert isinstance(server_error, ssl.SSLError)


def test_a_name_outside_the_certificate_is_refused_by_the_client(files) -> None:
    _, client_error = _handshake(files, files.client, "cache.example")
    assert isinstance(client_error, ssl.SSLCertVerificationError)


def test_keys_are_private_pkcs8_pem(files) -> None:
    for issued in (files.server, files.client, files.wrong_client):
        assert issued.key.read_text().startswith("-----BEGIN PRIVATE KEY-----")  # PKCS#8, unencrypted
        assert issued.key.stat().st_mode & 0o077 == 0


# --- the rc template ---------------------------------------------------------------------------

VALUES = {
    "CACHE_ENDPOINT": "127.0.0.1:1", "EXEC_ENDPOINT": "127.0.0.1:1", "INSTANCE_NAME": "i",
    "CA_CERT": "/ca.crt", "CLIENT_CERT": "/c.crt", "CLIENT_KEY": "/c.key",
    "HEADER_NAME": "x-h", "HEADER_VALUE": "v", "JOBS": "8", "TIMEOUT": "120",
}


def test_the_template_takes_every_setting_a_cluster_needs() -> None:
    assert rcfile.placeholders(TEMPLATE.read_text()) == set(VALUES)


def test_the_template_holds_no_value_of_its_own() -> None:
    """Every build flag's value is a placeholder: nothing cluster-specific or secret is committed."""
    for line in TEMPLATE.read_text().splitlines():
        if line.startswith("build"):
            assert line.split(" ", 1)[0] in ("build:remote", "build:remote-cache"), line
            assert rcfile.PLACEHOLDER.search(line), line


def test_the_template_renders_to_flags_in_the_remote_groups() -> None:
    rendered = rcfile.render(TEMPLATE.read_text(), VALUES)
    lines = [l for l in rendered.splitlines() if l and not l.startswith("#")]
    assert not [l for l in lines if "@" in l]
    assert "build:remote-cache --remote_header=x-h=v" in lines
    assert "build:remote --remote_executor=grpcs://127.0.0.1:1" in lines
    assert lines[0].startswith("startup --host_jvm_args=-Djava.library.path=/usr/share/bazel:")


def test_a_missing_or_unused_value_is_named() -> None:
    values = {k: v for k, v in VALUES.items() if k != "CLIENT_KEY"} | {"EXTRA": "x"}
    with pytest.raises(rcfile.RcError, match=r"\['CLIENT_KEY'\].*\['EXTRA'\]"):
        rcfile.render(TEMPLATE.read_text(), values)


def test_a_value_that_would_split_the_flag_is_refused() -> None:
    with pytest.raises(rcfile.RcError, match="HEADER_VALUE"):
        rcfile.render(TEMPLATE.read_text(), VALUES | {"HEADER_VALUE": "Bearer abc"})


# --- refusal causes, on the lines Bazel 4.2.3 and BuildGrid 0.4.4 logged ------------------------

BAZEL_NULL = "ERROR: Failed to query remote execution capabilities: null"
SERVER = "I1202 17:07:21.256183 390 ssl_transport_security.cc:2563] Handshake failed with error SSL_ERROR_SSL: "


@pytest.mark.parametrize("logs, cause", [
    ((BAZEL_NULL, SERVER + "error:1000007d:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED: unable to get local issuer certificate"),
     "client-cert-refused"),
    ((BAZEL_NULL, SERVER + "error:100000c0:SSL routines:OPENSSL_internal:PEER_DID_NOT_RETURN_A_CERTIFICATE: Invalid certificate verification context"),
     "no-client-cert"),
    ((BAZEL_NULL,), "handshake-closed"),
    (("ERROR: Failed to query remote execution capabilities: General OpenSslEngine problem",
      SERVER + "error:10000438:SSL routines:OPENSSL_internal:TLSV1_ALERT_INTERNAL_ERROR: Invalid certificate verification context"),
     "server-cert-refused"),
    (("ERROR: Failed to query remote execution capabilities: UNAUTHENTICATED: No valid authorization or authentication provided",),
     "credential-refused"),
    (("", "Caused by: java.lang.UnsupportedOperationException: JDK provider does not support ALPN protocol"), "no-tls-provider"),
])
def test_each_refusal_is_named(logs, cause) -> None:
    found = diagnose.explain(*logs)
    assert found is not None and found.cause == cause, found


def test_the_refused_client_certificate_message_says_so() -> None:
    found = diagnose.explain(BAZEL_NULL, SERVER + "CERTIFICATE_VERIFY_FAILED: unable to get local issuer certificate")
    assert found.message.startswith("the server refused the client certificate")


def test_a_successful_run_has_no_diagnosis() -> None:
    assert diagnose.explain("INFO: Build completed successfully, 4 total actions", "Starting BuildGrid server...") is None
