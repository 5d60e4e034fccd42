"""No CA bundle file in the build: the pip sites hold no cacert.pem, the TLS tools name the machine's store.

A TLS-intercepting proxy's installer appends its CA to every certifi/cacert.pem it finds on disk,
Bazel's output base included, at any time: seen a minute into `bazel test`, under a running test.
So pip_parse deletes every cacert.pem from the extracted sites
(tools/python/private/pip_repository.bzl), and no test's runfiles carry a file it can rewrite.
The resolver, the one tool whose TLS goes through certifi's users (huggingface_hub -> httpx),
trusts the machine's CA store by SSL_CERT_FILE (pins/resolve.py).

This test's runfiles hold every site of @pip_tools (`@pip_tools//:pkgs`), the only extracted pip
repository, so no test can carry a bundle from one.
"""

from __future__ import annotations

import os
import re
import ssl
from pathlib import Path

import certifi
import httpx
import huggingface_hub
import pytest
import requests.utils

from pins import resolve

MACHINE_CA_STORE = "/etc/ssl/certs/ca-certificates.crt"


def _runfiles() -> Path:
    return Path(os.environ["TEST_SRCDIR"])


def _locked_names(lock: Path) -> set[str]:
    names = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", lock.read_text(), re.M)
    return {re.sub(r"[-_.]+", "_", name).lower() for name in names}


def test_no_cacert_pem_in_the_runfiles() -> None:
    found, sites = [], set()
    for top, dirs, files in os.walk(_runfiles()):
        found += [os.path.join(top, f) for f in files if f == "cacert.pem"]
        if Path(top).name == "site" and Path(top).parent.name == "pip_tools":
            sites.update(dirs)
    assert not found, f"CA bundle files in the runfiles, which an outside agent can rewrite: {found}"
    # Not vacuous: every locked package's site was walked, certifi's among them.
    lock = _runfiles() / "pip_tools" / "requirements.lock"
    assert sites == _locked_names(lock), "this test's runfiles should hold every site of @pip_tools"
    assert (Path(certifi.__file__).parent / "core.py").is_file()


def test_certifi_names_a_bundle_that_is_not_there() -> None:
    # Importing certifi, requests, httpx and huggingface_hub (above) read no bundle; a client
    # that falls back to certifi's fails loudly instead of trusting a rewritten file.
    assert not Path(certifi.where()).exists()
    assert requests.utils.DEFAULT_CA_BUNDLE_PATH == certifi.where()


def _unset(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv(name, "")  # recorded, so the test leaves the environment as it was
    monkeypatch.delenv(name)


def test_the_hub_client_trusts_the_machine_store(monkeypatch: pytest.MonkeyPatch) -> None:
    _unset(monkeypatch, "SSL_CERT_FILE")
    _unset(monkeypatch, "SSL_CERT_DIR")
    with pytest.raises(FileNotFoundError):
        httpx.create_ssl_context()  # without the resolver's setting: certifi.where(), missing
    assert resolve.MACHINE_CA_STORE == MACHINE_CA_STORE
    assert resolve.trust_machine_ca_store() == MACHINE_CA_STORE
    assert os.environ["SSL_CERT_FILE"] == MACHINE_CA_STORE
    # What every httpx.Client huggingface_hub makes loads: exactly the machine store's roots.
    got = httpx.create_ssl_context().get_ca_certs(binary_form=True)
    want = ssl.create_default_context(cafile=MACHINE_CA_STORE).get_ca_certs(binary_form=True)
    assert got and got == want
    huggingface_hub.close_session()
    try:
        assert isinstance(huggingface_hub.get_session(), httpx.Client)
    finally:
        huggingface_hub.close_session()


def test_a_callers_ssl_cert_file_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", "/etc/ssl/other.pem")
    assert resolve.trust_machine_ca_store() == "/etc/ssl/other.pem"
