"""debian_packages (the repository rule) against a fake Debian mirror on 127.0.0.1, in a nested Bazel.

The mirror is HTTPS (Bazel downloads an index, which has no checksum, only over HTTPS) with a
throwaway certificate the nested Bazel's JVM trusts. It serves .debs and a Packages index built here. Checked: a locked .deb comes from the
second mirror when the first has none; a locked version gone from every mirror is replaced by
the index's newest one, with one warning and the drift in resolved.lock; a current lock
re-fetches from the repository cache alone (server stopped, downloads disabled), and with an
empty cache fails naming the packages and the fix.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import ssl
import subprocess
import threading
from pathlib import Path

import pytest

from tools.oci.debian import Archive, Lock, Pin, relock_command
from tools.oci.tests.debfixture import build_deb, packages_index

OCI = Path(__file__).resolve().parents[1]
BAZEL = os.environ.get("GLM53_NESTED_BAZEL", "/usr/bin/bazel-4")
RULE_FILES = ["deb.bzl", "private/debian_repository.bzl", "debian.py"]


def certificate(tmp: Path) -> tuple[Path, Path, Path]:
    """A self-signed certificate for 127.0.0.1: (cert, key, Java truststore)."""
    cert, key, store = tmp / "cert.pem", tmp / "key.pem", tmp / "trust.p12"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    subprocess.run(["keytool", "-importcert", "-noprompt", "-alias", "mirror", "-file", str(cert), "-keystore", str(store),
                    "-storetype", "PKCS12", "-storepass", "changeit"], check=True, capture_output=True)
    return cert, key, store


class Mirror:
    def __init__(self, root: Path, cert: Path, key: Path) -> None:
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
        handler.log_message = lambda *a: None  # type: ignore[method-assign]
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:  # idempotent: shutdown() returns at once once serving stopped
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def mirror(tmp_path: Path):
    root = tmp_path / "mirror"
    debs = {}
    for name, version in [("hello", "1.0-1"), ("world", "2.0-1"), ("world", "2.0-2"), ("world", "1.9-1")]:
        path = f"pool/main/{name[0]}/{name}/{name}_{version}_amd64.deb"
        debs[(name, version)] = Pin(name, version, build_deb(root / "debian" / path, name, version,
                                                            {f"usr/share/{name}/v": version.encode()}), "debian", path)
    # 2.0-1 was locked, then left the archive; the index holds 2.0-2 (and an older 1.9-1).
    (root / "debian" / debs[("world", "2.0-1")].path).unlink()
    index = root / "debian/dists/bookworm/main/binary-amd64/Packages.xz"
    index.parent.mkdir(parents=True)
    index.write_bytes(packages_index([(p.name, p.version, p.sha256, p.path, "") for k, p in debs.items()
                                      if k != ("world", "2.0-1")]))
    cert, key, store = certificate(tmp_path)
    server = Mirror(root, cert, key)
    server.truststore = store  # type: ignore[attr-defined]
    yield server, debs
    server.stop()


def workspace(tmp: Path, mirror_url: str, pins: list[Pin]) -> Path:
    ws = tmp / "ws"
    for rel in RULE_FILES:
        (ws / "tools/oci" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(OCI / rel, ws / "tools/oci" / rel)
    (ws / "tools/oci/BUILD.bazel").write_text('exports_files(["debian.py"])\n')
    (ws / "tools/oci/private/BUILD.bazel").write_text("")
    (ws / "BUILD.bazel").write_text('exports_files(["fake.lock"])\n')
    (ws / "WORKSPACE").write_text('workspace(name = "t")\n\nload("//tools/oci:deb.bzl", "debian_packages")\n\n'
                                  'debian_packages(name = "fake_debs", lock = "//:fake.lock")\n')
    # The first mirror has nothing: every download falls through to the second.
    archive = Archive("debian", ("bookworm",), (f"{mirror_url}/empty", f"{mirror_url}/debian"))
    (ws / "fake.lock").write_text(Lock(("hello", "world"), (), (archive,), tuple(pins),
                                       relock=relock_command("//:fake_lock")).render())
    return ws


def bazel(ws: Path, tmp: Path, truststore: Path, *flags: str, cache: str = "repo-cache") -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp), "TMPDIR": str(tmp)}
    return subprocess.run(
        [BAZEL, "--batch", "--nohome_rc", f"--output_user_root={tmp / 'root'}",
         f"--host_jvm_args=-Djavax.net.ssl.trustStore={truststore}", "--host_jvm_args=-Djavax.net.ssl.trustStorePassword=changeit",
         f"--output_base={tmp / 'ob'}", "build", f"--repository_cache={tmp.parent / cache}",
         "--noshow_progress", *flags, "@fake_debs//:debs", "@fake_debs//:resolved.lock"],
        cwd=ws, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)


def resolved(tmp: Path) -> Lock:
    return Lock.parse((tmp / "ob/external/fake_debs/resolved.lock").read_text(), "resolved.lock")


def test_locked_debs_come_from_the_mirrors_and_drift_is_resolved_once(tmp_path: Path, mirror) -> None:
    server, debs = mirror
    locked = [debs[("hello", "1.0-1")], debs[("world", "2.0-1")]]
    run = tmp_path / "drift"
    proc = bazel(workspace(run, server.url, locked), run, server.truststore)
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.count("WARNING: fake.lock: 1 locked version(s) are on no mirror") == 1, proc.stdout
    assert "world 2.0-1 -> 2.0-2" in proc.stdout and "Relock with `./tools/bazel run //:fake_lock`" in proc.stdout
    got = resolved(run)
    assert got.source == "fake.lock"
    assert [(d.name, d.locked, d.used) for d in got.drift] == [("world", "2.0-1", "2.0-2")]
    assert sorted(got.pins) == sorted([debs[("hello", "1.0-1")], debs[("world", "2.0-2")]])
    stored = sorted(p.name for p in (run / "ob/external/fake_debs/debs").iterdir())
    assert stored == sorted(p.filename for p in got.pins)


def test_a_current_lock_refetches_offline_from_the_repository_cache(tmp_path: Path, mirror) -> None:
    server, debs = mirror
    current = [debs[("hello", "1.0-1")], debs[("world", "2.0-2")]]
    first = tmp_path / "online"
    proc = bazel(workspace(first, server.url, current), first, server.truststore)
    assert proc.returncode == 0, proc.stdout
    assert "WARNING: fake.lock" not in proc.stdout and resolved(first).drift == ()
    server.stop()
    again = tmp_path / "offline"
    proc = bazel(workspace(again, server.url, current), again, server.truststore, "--experimental_repository_disable_download")
    assert proc.returncode == 0, proc.stdout
    assert sorted(resolved(again).pins) == sorted(current)
    cold = tmp_path / "cold"
    proc = bazel(workspace(cold, server.url, current), cold, server.truststore, cache="empty-cache")
    assert proc.returncode != 0
    assert "fake.lock: hello=1.0-1, world=2.0-2 could not be downloaded from any mirror" in proc.stdout, proc.stdout
    assert "warm --repository_cache / --distdir" in proc.stdout
