"""The one test registry: Debian's docker-registry (distribution 2.8) on 127.0.0.1.

    with LocalRegistry(Path(tmp)) as reg:
        reg.address                      # "127.0.0.1:<port>"
        reg.skopeo                       # tools/oci/registry.py's client for it (policy, auth file)
        reg.seed(layout_ref, "base/x", "1", "--format", "v2s2")   # skopeo copy in; the served digest

Writes its own config (storage under the given directory, http on a free loopback port),
starts the server, waits until /v2/ answers, and stops exactly that process (by pid) on exit.
With `users`, the registry requires basic auth (htpasswd, bcrypt) and `reg.auth_file` is a
docker/podman auth file holding the first user's credentials.
Every test that needs a registry uses this module (push, pull, pin resolution, production base).
Run as a program to keep one up for manual work:
`bazel run //tools/oci:local_registry_server -- --dir /tmp/reg`.
"""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path

from tools.oci.registry import Repository, Skopeo

BINARY = "/usr/bin/docker-registry"
_CONFIG = """\
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {root}/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
  secret: glm53-engine-test-registry
"""
_AUTH = """\
auth:
  htpasswd:
    realm: glm53-engine-test
    path: {root}/htpasswd
"""


class RegistryStartError(Exception):
    """The registry did not come up."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _bcrypt(password: str) -> str:
    with warnings.catch_warnings():  # crypt is deprecated, but the only stdlib bcrypt
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt
    return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))


class LocalRegistry:
    def __init__(self, root: Path, binary: str = BINARY, users: dict[str, str] | None = None) -> None:
        self.root = Path(root)
        self.binary = binary
        self.users = dict(users or {})
        self.port = 0
        self.process: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def auth_file(self) -> Path | None:
        return self.root / "auth.json" if self.users else None

    @property
    def skopeo(self) -> Skopeo:
        return Skopeo(policy=self.root / "policy.json", authfile=self.auth_file)

    def repository(self, path: str) -> Repository:
        return Repository(self.address, path)

    def start(self, attempts: int = 3) -> "LocalRegistry":
        if shutil.which(self.binary) is None:
            raise RegistryStartError(f"{self.binary} not found: `./tools/bazel` installs it (apt-get install docker-registry)")
        self.root.mkdir(parents=True, exist_ok=True)
        self.skopeo.write_policy()
        auth = ""
        if self.users:
            (self.root / "htpasswd").write_text("".join(f"{u}:{_bcrypt(p)}\n" for u, p in self.users.items()))
            auth = _AUTH.format(root=self.root)
        for _ in range(attempts):  # a free port can be taken between probe and bind
            self.port = _free_port()
            config = self.root / "config.yml"
            config.write_text(_CONFIG.format(root=self.root, port=self.port) + auth)
            if self.users:
                user, password = next(iter(self.users.items()))
                token = base64.b64encode(f"{user}:{password}".encode()).decode()
                self.auth_file.write_text(json.dumps({"auths": {self.address: {"auth": token}}}))
            log = (self.root / "registry.log").open("ab")
            self.process = subprocess.Popen([self.binary, "serve", str(config)], stdout=log, stderr=log)
            if self._wait_ready(timeout=15):
                return self
            self.stop()
        raise RegistryStartError(f"docker-registry did not answer on 127.0.0.1; see {self.root / 'registry.log'}")

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=1) as resp:
                    if resp.status == 200:
                        return True
            except urllib.error.HTTPError as err:
                if err.code == 401 and self.users:  # up, and asking for credentials
                    return True
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.1)
        return False

    def seed(self, source: str, path: str, tag: str, *flags: str) -> str:
        """`skopeo copy [FLAGS] SOURCE` to PATH:TAG here; returns the digest the registry serves."""
        repo = self.repository(path)
        auth = [f"--dest-authfile={self.auth_file}"] if self.auth_file else []
        self.skopeo.run(["copy", "--dest-tls-verify=false", *auth, *flags, source, repo.docker_ref(tag=tag)])
        served = self.skopeo.manifest_digest(repo, tag)
        if served is None:
            raise RegistryStartError(f"{repo}:{tag} was not served after the copy")
        return served

    def blob_file(self, digest: str) -> Path:
        """Where the storage keeps a blob (manifests too): tests alter it to play a bad registry."""
        hexpart = digest.split(":", 1)[1]
        return self.root / "data/docker/registry/v2/blobs/sha256" / hexpart[:2] / hexpart / "data"

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> "LocalRegistry":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, required=True, help="storage and config directory")
    args = parser.parse_args(argv)
    # SIGTERM ends the program like Ctrl-C does, so the registry child is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    with LocalRegistry(args.dir) as registry:
        print(f"registry at {registry.address} (pid {registry.process.pid}); Ctrl-C stops it", flush=True)
        try:
            registry.process.wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
