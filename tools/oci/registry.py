"""The one registry client: repository names and the skopeo calls that push and pull.

A repository is HOST[:PORT]/PATH (e.g. docker.io/nearai/sglang-glm53, 127.0.0.1:5000/test/x;
the grammar is tools/oci/reference.py's).
TLS verification is only turned off for loopback registries (127.0.0.1, localhost, [::1]),
which is what the project's tests run; every other registry is spoken to over verified TLS.
Credentials: skopeo's own lookup ($REGISTRY_AUTH_FILE, then its default auth files, which
include ~/.docker/config.json), or an explicit auth file.

Pushes (tools/release/push.py), pin resolution (pins/resolve.py) and the shallow pull of a
base (pull.py, run by the oci_pull repository rule) all go through `Skopeo`; nothing else in
the repository speaks the registry protocol.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

# The grammar is tools/oci/reference.py's; RefError is its error under the name callers use.
from tools.oci.reference import ReferenceError as RefError  # noqa: F401
from tools.oci.reference import Repository, check_digest, check_tag, parse_repository  # noqa: F401


class RegistryError(Exception):
    """skopeo failed or the registry answered something unexpected."""


@dataclass(frozen=True)
class Skopeo:
    """skopeo with a project-owned signature policy (no /etc/containers/policy.json needed)."""

    policy: Path
    authfile: Path | None = None
    binary: str = "skopeo"

    def write_policy(self) -> None:
        self.policy.parent.mkdir(parents=True, exist_ok=True)
        self.policy.write_text('{"default": [{"type": "insecureAcceptAnything"}]}\n')

    def run(self, args: list[str]) -> subprocess.CompletedProcess:
        """`skopeo --policy P ARGS...`; RegistryError with skopeo's message when it fails."""
        cmd = [self.binary, "--policy", str(self.policy), *args]
        try:
            done = subprocess.run(cmd, capture_output=True, check=False)
        except FileNotFoundError:
            raise RegistryError(f"{self.binary} not found: `./tools/bazel` installs skopeo (apt-get install skopeo)") from None
        if done.returncode != 0:
            raise RegistryError(f"`{' '.join(cmd)}` failed:\n{done.stderr.decode(errors='replace').strip()}")
        return done

    def _tls(self, repository: Repository, flag: str) -> list[str]:
        return [f"{flag}=false"] if repository.is_loopback else []

    def _auth(self, flag: str) -> list[str]:
        return [f"{flag}={self.authfile}"] if self.authfile else []

    def push(self, layout: Path, repository: Repository, tag: str, digest_out: Path) -> str:
        """Copies the layout's image to REPO:TAG byte for byte; returns the digest skopeo wrote.

        --preserve-digests: without it skopeo gzips uncompressed layers for a registry and
        the pushed manifest (and digest) would differ from the built one.
        """
        self.run([
            "copy", "--preserve-digests", "--retry-times", "3",
            *self._tls(repository, "--dest-tls-verify"),
            *self._auth("--dest-authfile"),
            "--digestfile", str(digest_out),
            f"oci:{os.path.realpath(layout)}",
            repository.docker_ref(tag=tag),
        ])
        return digest_out.read_text().strip()

    def copy_between(self, source: Repository, digest: str, dest: Repository, tag: str) -> None:
        """Registry to registry, byte for byte (a shallow base into the push destination)."""
        self.run([
            "copy", "--preserve-digests", "--retry-times", "3",
            *self._tls(source, "--src-tls-verify"), *self._tls(dest, "--dest-tls-verify"),
            *self._auth("--src-authfile"), *self._auth("--dest-authfile"),
            source.docker_ref(digest=digest), dest.docker_ref(tag=tag),
        ])

    def copy_to_dir(self, repository: Repository, digest: str, dest: Path) -> None:
        """REPO@DIGEST (one image manifest) into a `dir:` directory: blobs as files named by hex.

        Unlike an OCI layout, `dir:` keeps a Docker schema-2 manifest as it is, so the blobs
        (compressed as the registry holds them) keep their digests; skopeo checks each layer
        against its digest while copying.
        """
        self.run([
            "copy", "--preserve-digests", "--retry-times", "3",
            *self._tls(repository, "--src-tls-verify"),
            *self._auth("--src-authfile"),
            repository.docker_ref(digest=digest), f"dir:{dest}",
        ])

    def raw_manifest(self, repository: Repository, digest: str) -> bytes:
        """The manifest (or index) bytes the registry serves for REPO@DIGEST, unverified.

        skopeo does not check these bytes against the digest; callers do (pull.py).
        """
        return self.run([
            "inspect", "--raw", "--retry-times", "3",
            *self._tls(repository, "--tls-verify"),
            *self._auth("--authfile"),
            repository.docker_ref(digest=digest),
        ]).stdout

    def raw_config(self, repository: Repository, manifest_digest: str) -> bytes:
        """The config blob of the image manifest REPO@DIGEST, byte for byte."""
        return self.run([
            "inspect", "--config", "--raw", "--retry-times", "3",
            *self._tls(repository, "--tls-verify"),
            *self._auth("--authfile"),
            repository.docker_ref(digest=manifest_digest),
        ]).stdout

    def manifest_digest(self, repository: Repository, tag: str) -> str | None:
        """sha256 of the manifest bytes the registry serves for REPO:TAG; None if no such tag."""
        cmd = [
            "inspect", "--raw", "--retry-times", "3",
            *self._tls(repository, "--tls-verify"),
            *self._auth("--authfile"),
            repository.docker_ref(tag=tag),
        ]
        try:
            done = self.run(cmd)
        except RegistryError as err:
            text = str(err).lower()
            if "manifest unknown" in text or "not found" in text or "name unknown" in text:
                return None
            raise
        return "sha256:" + hashlib.sha256(done.stdout).hexdigest()
