"""The one registry client: repository names and the skopeo calls that push and pull.

A repository is HOST[:PORT]/PATH (e.g. docker.io/nearai/sglang-glm53, 127.0.0.1:5000/test/x).
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
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

# The tag grammar of the OCI distribution spec (and the upstream publish workflow).
TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_HOST_RE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9a-fA-F:]+\])(?::[0-9]{1,5})?$")
_PATH_COMPONENT_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


class RefError(ValueError):
    """A repository, tag or digest is malformed; the message says what the grammar is."""


class RegistryError(Exception):
    """skopeo failed or the registry answered something unexpected."""


@dataclass(frozen=True)
class Repository:
    host: str  # with :port when given
    path: str

    def __str__(self) -> str:
        return f"{self.host}/{self.path}"

    @property
    def is_loopback(self) -> bool:
        if self.host.startswith("["):
            hostname = self.host[: self.host.index("]") + 1]
        else:
            hostname = self.host.split(":")[0]
        return hostname in LOOPBACK_HOSTS

    def docker_ref(self, tag: str | None = None, digest: str | None = None) -> str:
        if digest:
            return f"docker://{self}@{digest}"
        return f"docker://{self}:{tag}"


def parse_repository(value: str) -> Repository:
    """HOST[:PORT]/PATH; the host is required so a record never depends on a default registry."""
    host, sep, path = value.partition("/")
    if not sep or not path:
        raise RefError(
            f"repository {value!r}: expected HOST[:PORT]/PATH, e.g. docker.io/nearai/sglang-glm53"
        )
    if "." not in host and ":" not in host and host != "localhost":
        raise RefError(
            f"repository {value!r}: {host!r} is not a registry host; write the host explicitly"
            f" (e.g. docker.io/{value})"
        )
    if not _HOST_RE.match(host):
        raise RefError(f"repository {value!r}: {host!r} is not a valid HOST[:PORT]")
    if "@" in path or ":" in path:
        raise RefError(f"repository {value!r}: give the tag with --tag, not in the repository")
    for component in path.split("/"):
        if not _PATH_COMPONENT_RE.match(component):
            raise RefError(
                f"repository {value!r}: path component {component!r} must be lowercase"
                " [a-z0-9] separated by '.', '_', '__' or '-'"
            )
    return Repository(host, path)


def check_tag(tag: str) -> str:
    if not TAG_RE.match(tag):
        raise RefError(
            f"tag {tag!r} is not allowed: it must match {TAG_RE.pattern}"
            " (letters, digits, '.', '_', '-', at most 128 characters, not starting with '.' or '-')"
        )
    return tag


def check_digest(digest: str, where: str) -> str:
    if not DIGEST_RE.match(digest):
        raise RefError(f"{where}: {digest!r} is not sha256:<64 lowercase hex>")
    return digest


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
