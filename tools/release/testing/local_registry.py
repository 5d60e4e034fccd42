"""A real OCI registry (Debian's docker-registry, distribution 2.8) on 127.0.0.1, for tests.

    with LocalRegistry(Path(tmp)) as reg:
        reg.address   # "127.0.0.1:<port>"

Writes its own config (storage under the given directory, http on a free loopback port),
starts the server, waits until /v2/ answers, and stops exactly that process (by pid) on exit.
Run as a program to keep one up for manual work: `local_registry.py --dir /tmp/reg`.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

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


class RegistryStartError(Exception):
    """The registry did not come up."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LocalRegistry:
    def __init__(self, root: Path, binary: str = BINARY) -> None:
        self.root = Path(root)
        self.binary = binary
        self.port = 0
        self.process: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, attempts: int = 3) -> "LocalRegistry":
        if shutil.which(self.binary) is None:
            raise RegistryStartError(f"{self.binary} not found: apt-get install docker-registry")
        self.root.mkdir(parents=True, exist_ok=True)
        for _ in range(attempts):  # a free port can be taken between probe and bind
            self.port = _free_port()
            config = self.root / "config.yml"
            config.write_text(_CONFIG.format(root=self.root, port=self.port))
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
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.1)
        return False

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
