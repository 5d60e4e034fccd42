"""debian_packages (the repository rule) against a fake Debian mirror on 127.0.0.1, in one nested Bazel.

The mirror is HTTPS (Bazel downloads an index, which has no checksum, only over HTTPS) with a
throwaway certificate the nested Bazel's JVM trusts. It serves .debs and a Packages index built
here. One `bazel build --keep_going` (a nested Bazel costs 20-90 s here) fetches three
repositories of one workspace, each a lock with its own mirrors:

- `drift`: a locked .deb comes from the second mirror when the first has none; a locked version
  gone from every mirror is replaced by the index's newest one, with one warning and the drift
  in resolved.lock;
- `cached`: a current lock whose only mirror is dead, its .debs already in the repository cache
  under their sha256: fetched from the cache alone;
- `cold`: the same dead mirror and one .deb not in the cache: fails naming that package, the
  index it could not read either, and the fix.

What debian.py computes for the rule (the download plan, drift resolution, the resolved lock,
the errors) is tested directly, without Bazel, in test_debian.py.
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

from tools.oci.debian.debian import Archive, Lock, Pin, relock_command
from tools.oci.debian.tests.debfixture import build_deb, packages_index

DEBIAN = Path(__file__).resolve().parents[1]
BAZEL = os.environ.get("GLM53_NESTED_BAZEL", "/usr/bin/bazel-4")
DEAD = "https://127.0.0.1:1"  # nothing listens on port 1
RULE_FILES = ["repositories.bzl", "private/debian_repository.bzl", "debian.py"]


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


def write_lock(path: Path, mirrors: tuple[str, ...], pins: list[Pin]) -> None:
    archive = Archive("debian", ("bookworm",), mirrors)
    relock = relock_command("//:" + path.stem + "_lock")
    path.write_text(Lock(("hello", "world"), (), (archive,), tuple(pins), relock=relock).render())


def workspace(tmp: Path, locks: dict[str, tuple[tuple[str, ...], list[Pin]]]) -> Path:
    ws = tmp / "ws"
    for rel in RULE_FILES:
        (ws / "tools/oci/debian" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(DEBIAN / rel, ws / "tools/oci/debian" / rel)
    (ws / "tools/oci/debian/BUILD.bazel").write_text('exports_files(["debian.py"])\n')
    (ws / "tools/oci/debian/private/BUILD.bazel").write_text("")
    (ws / "BUILD.bazel").write_text(f"exports_files({sorted(n + '.lock' for n in locks)!r})\n")
    rules = "".join(f'debian_packages(name = "{n}", lock = "//:{n}.lock")\n' for n in locks)
    (ws / "WORKSPACE").write_text(f'workspace(name = "t")\n\nload("//tools/oci/debian:repositories.bzl", "debian_packages")\n\n{rules}')
    for name, (mirrors, pins) in locks.items():
        write_lock(ws / f"{name}.lock", mirrors, pins)
    return ws


def seed_repository_cache(cache: Path, debs: list[tuple[Pin, Path]]) -> None:
    """Bazel's repository cache layout: content_addressable/sha256/<sha256>/file."""
    for pin, path in debs:
        entry = cache / "content_addressable/sha256" / pin.sha256
        entry.mkdir(parents=True)
        shutil.copyfile(path, entry / "file")


def bazel(ws: Path, tmp: Path, truststore: Path, cache: Path, *targets: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp), "TMPDIR": str(tmp)}
    return subprocess.run(
        [BAZEL, "--batch", "--nohome_rc", f"--output_user_root={tmp / 'root'}",
         f"--host_jvm_args=-Djavax.net.ssl.trustStore={truststore}", "--host_jvm_args=-Djavax.net.ssl.trustStorePassword=changeit",
         f"--output_base={tmp / 'ob'}", "build", "--keep_going", f"--repository_cache={cache}",
         "--noshow_progress", *targets],
        cwd=ws, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)


def resolved(tmp: Path, repo: str) -> Lock:
    return Lock.parse((tmp / f"ob/external/{repo}/resolved.lock").read_text(), "resolved.lock")


def stored(tmp: Path, repo: str) -> list[str]:
    return sorted(p.name for p in (tmp / f"ob/external/{repo}/debs").iterdir())


def test_the_rule_fetches_resolves_drift_uses_the_cache_and_fails_clearly(tmp_path: Path, mirror) -> None:
    server, debs = mirror
    hello, world_gone, world_now, world_old = (debs[k] for k in [("hello", "1.0-1"), ("world", "2.0-1"),
                                                                 ("world", "2.0-2"), ("world", "1.9-1")])
    root = tmp_path / "mirror/debian"
    cache = tmp_path / "repo-cache"
    seed_repository_cache(cache, [(hello, root / hello.path), (world_now, root / world_now.path)])
    # The first mirror has nothing: every download of `drift` falls through to the second.
    ws = workspace(tmp_path, {
        "drift": ((f"{server.url}/empty", f"{server.url}/debian"), [hello, world_gone]),
        "cached": ((DEAD,), [hello, world_now]),
        "cold": ((DEAD,), [hello, world_old]),
    })
    proc = bazel(ws, tmp_path, server.truststore, cache, *[f"@{r}//:{t}" for r in ("drift", "cached", "cold")
                                                           for t in ("debs", "resolved.lock")])
    out = proc.stdout
    assert proc.returncode != 0, out  # `cold` cannot be fetched

    assert out.count("WARNING: drift.lock: 1 locked version(s) are on no mirror") == 1, out
    assert "world 2.0-1 -> 2.0-2" in out and "Relock with `./tools/bazel run //:drift_lock`" in out
    got = resolved(tmp_path, "drift")
    assert got.source == "drift.lock"
    assert [(d.name, d.locked, d.used) for d in got.drift] == [("world", "2.0-1", "2.0-2")]
    assert sorted(got.pins) == sorted([hello, world_now])
    assert stored(tmp_path, "drift") == sorted(p.filename for p in got.pins)

    assert "WARNING: cached.lock" not in out
    assert resolved(tmp_path, "cached").drift == () and sorted(resolved(tmp_path, "cached").pins) == sorted([hello, world_now])
    assert stored(tmp_path, "cached") == sorted([hello.filename, world_now.filename])

    # hello came from the cache; only world 1.9-1 is named.
    assert ("cold.lock: world=1.9-1 could not be downloaded from any mirror, and neither could "
            f"{DEAD}/dists/bookworm/main/binary-amd64/Packages.xz") in out, out
    assert "warm --repository_cache / --distdir" in out
