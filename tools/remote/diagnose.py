"""Names the cause of a failed connection to a remote cache/executor from what Bazel and the server logged.

Bazel 4.2.3 reports a server that rejected its client certificate as `Failed to query remote
execution capabilities: null`, and a missing TLS provider only in its java.log; the server's
own log (BuildGrid's gRPC core) says which side refused what. `explain` turns the text of
those logs into one sentence with the fix, or None when nothing matches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TEMPLATE = "tools/remote/remote.bazelrc.template"

@dataclass(frozen=True)
class Diagnosis:
    cause: str  # a stable key: the conformance run asserts on it
    message: str


# (cause, pattern, explanation), first match wins: the server's verdict is more specific than Bazel's.
RULES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("no-tls-provider", re.compile(r"JDK provider does not support ALPN"),
     "Bazel has no TLS provider for grpcs:// (Debian's Bazel 4.2.3 needs OpenSSL through "
     "netty-tcnative): run ./tools/bazel once (it installs libnetty-tcnative-jni) and keep the "
     f"`startup --host_jvm_args=-Djava.library.path=...` line of {TEMPLATE} in your rc file"),
    ("no-client-cert", re.compile(r"PEER_DID_NOT_RETURN_A_CERTIFICATE|certificate required", re.I),
     "the server refused the connection: it requires a client certificate and Bazel sent none "
     "(set --tls_client_certificate and --tls_client_key)"),
    ("client-cert-refused", re.compile(r"CERTIFICATE_VERIFY_FAILED|SSLV3_ALERT_BAD_CERTIFICATE|TLSV1_ALERT_UNKNOWN_CA|"
                r"bad_certificate|unknown_ca", re.I),
     "the server refused the client certificate: it is not signed by a CA the server trusts "
     "(or it expired); use the certificate and key the cluster issued you "
     "(--tls_client_certificate, --tls_client_key)"),
    ("server-cert-refused", re.compile(r"General OpenSslEngine problem|PKIX path|unable to find valid certification path|"
                r"No subject alternative", re.I),
     "Bazel refused the server's certificate: --tls_certificate must be the CA that signed it, "
     "and the endpoint's host name must be one of its names"),
    ("unreadable-key", re.compile(r"File does not contain valid private key|Input stream not contain valid certificates"),
     "Bazel could not read the client key or certificate: --tls_client_key must be an unencrypted "
     "PKCS#8 PEM key (openssl pkcs8 -topk8 -nocrypt), --tls_client_certificate a PEM certificate"),
    ("credential-refused", re.compile(r"UNAUTHENTICATED|PERMISSION_DENIED"),
     "the server refused the credential: the --remote_header value is missing, wrong or not allowed "
     "on this --remote_instance_name"),
    ("handshake-closed", re.compile(r"capabilities: null"),
     "the server closed the TLS handshake without an answer Bazel could read: with mTLS this is "
     "the server refusing the client certificate (or none sent); check the server's log"),
    ("unreachable", re.compile(r"Connection refused|UNAVAILABLE: io exception|UnknownHostException"),
     "Bazel could not reach the endpoint: check the host and port of --remote_executor/--remote_cache"),
)


def explain(*logs: str) -> Diagnosis | None:
    text = "\n".join(logs)
    for cause, pattern, explanation in RULES:
        match = pattern.search(text)
        if match:
            return Diagnosis(cause, f"{explanation} [log: {match.group(0)!r}]")
    return None
