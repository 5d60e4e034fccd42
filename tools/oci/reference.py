"""Digests, tags, repositories and image references: the one grammar every tool checks against.

    sha256:<64 lowercase hex>                          a digest (nothing else is accepted)
    HOST[:PORT]/PATH                                   a repository, the host always written out
    HOST[:PORT]/PATH[:TAG][@sha256:<64 hex>]           a reference

The rule for references: a reference may carry a tag and a digest; the digest names the content
(the tag is a note of where it came from, and can move), so wherever both are given the digest
wins, and a pin is a reference with a digest. Path components and tags follow the OCI
distribution spec. A host is required so that no reference silently means docker.io.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
# OCI distribution spec: tags are [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}.
TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
HOST_RE = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9a-fA-F:]+\])(?::[0-9]{{1,5}})?")
PATH_COMPONENT_RE = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


class ReferenceError(ValueError):
    """A digest, tag, repository or reference is malformed; the message says the grammar."""


def check_digest(value: object, where: str) -> str:
    """`value` if it is sha256:<64 lowercase hex> (no surrounding whitespace), else an error."""
    if not isinstance(value, str) or not DIGEST_RE.fullmatch(value):
        raise ReferenceError(f"{where}: {value!r} is not sha256:<64 lowercase hex>")
    return value


def check_tag(tag: object, where: str = "tag") -> str:
    if not isinstance(tag, str) or not TAG_RE.fullmatch(tag):
        raise ReferenceError(
            f"{where} {tag!r} is not allowed: it must match {TAG_RE.pattern}"
            " (letters, digits, '_', '.', '-', at most 128 characters, not starting with '.' or '-')"
        )
    return tag


@dataclass(frozen=True)
class Repository:
    host: str  # with :port when given
    path: str

    def __str__(self) -> str:
        return f"{self.host}/{self.path}"

    @property
    def is_loopback(self) -> bool:
        hostname = self.host[: self.host.index("]") + 1] if self.host.startswith("[") else self.host.split(":")[0]
        return hostname in LOOPBACK_HOSTS

    def docker_ref(self, tag: str | None = None, digest: str | None = None) -> str:
        """The containers-image transport name (skopeo, podman): by digest when one is given."""
        if digest:
            return f"docker://{self}@{check_digest(digest, 'digest')}"
        return f"docker://{self}:{check_tag(tag)}"


def parse_repository(value: object, where: str = "repository") -> Repository:
    """HOST[:PORT]/PATH, without tag or digest."""
    if not isinstance(value, str):
        raise ReferenceError(f"{where} {value!r}: expected a string HOST[:PORT]/PATH")
    host, sep, path = value.partition("/")
    if not sep or not path:
        raise ReferenceError(f"{where} {value!r}: expected HOST[:PORT]/PATH, e.g. docker.io/nearai/sglang-glm53")
    if "." not in host and ":" not in host and host != "localhost":
        raise ReferenceError(f"{where} {value!r}: {host!r} is not a registry host; write the host"
                             f" explicitly (e.g. docker.io/{value})")
    if not HOST_RE.fullmatch(host):
        raise ReferenceError(f"{where} {value!r}: {host!r} is not a valid HOST[:PORT]")
    if "@" in path or ":" in path:
        raise ReferenceError(f"{where} {value!r}: a repository has no tag or digest; give them apart")
    for component in path.split("/"):
        if not PATH_COMPONENT_RE.fullmatch(component):
            raise ReferenceError(f"{where} {value!r}: path component {component!r} must be lowercase"
                                 " [a-z0-9] separated by '.', '_', '__' or '-'")
    return Repository(host, path)


@dataclass(frozen=True)
class Reference:
    repository: Repository
    tag: str | None = None
    digest: str | None = None
    # The digest is the pin table's UNRESOLVED sentinel: a pin without a value yet.
    unresolved: bool = False

    def __str__(self) -> str:
        tag = f":{self.tag}" if self.tag else ""
        return f"{self.repository}{tag}@{self.digest}" if self.digest else f"{self.repository}{tag}"

    @property
    def pinned(self) -> str:
        """repository@digest: what the reference names, whatever its tag says."""
        if self.digest is None:
            raise ReferenceError(f"{self} is not pinned by digest: use {self.repository}@sha256:<64 hex>")
        return f"{self.repository}@{self.digest}"


def parse_reference(value: object, where: str = "image", unresolved: str | None = None) -> Reference:
    """HOST[:PORT]/PATH[:TAG][@DIGEST]; `unresolved`, when given, is accepted in place of DIGEST."""
    if not isinstance(value, str):
        raise ReferenceError(f"{where} {value!r}: expected a string HOST[:PORT]/PATH[:TAG][@sha256:<64 hex>]")
    name, at, digest = value.partition("@")
    host, slash, rest = name.partition("/")
    path, colon, tag = rest.rpartition(":") if ":" in rest else (rest, "", "")
    repository = parse_repository(f"{host}{slash}{path}", f"{where} {value!r}: repository")
    if colon:
        check_tag(tag, f"{where} {value!r}: tag")
    if not at:
        return Reference(repository, tag or None)
    if unresolved is not None and digest == unresolved:
        return Reference(repository, tag or None, None, unresolved=True)
    return Reference(repository, tag or None, check_digest(digest, f"{where} {value!r}: digest"))


def pinned_digest(value: object) -> str | None:
    """The digest of a well-formed reference, None for anything else (a tag, junk)."""
    try:
        return parse_reference(value).digest
    except ReferenceError:
        return None
