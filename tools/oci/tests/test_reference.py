"""The digest / reference grammar: the corner cases the per-module regexes used to disagree on."""

from __future__ import annotations

import pytest

from tools.oci.reference import (Reference, ReferenceError, Repository, check_digest, check_tag,
                                 parse_reference, parse_repository, pinned_digest)

D = "sha256:" + "ab" * 32
E = "sha256:" + "cd" * 32


@pytest.mark.parametrize("value", [D, "sha256:" + "0" * 64])
def test_digest_accepted(value: str) -> None:
    assert check_digest(value, "x") == value


@pytest.mark.parametrize("value", [
    D + "\n",                   # `$` in a re.match pattern lets a trailing newline through
    " " + D,
    "sha256:" + "AB" * 32,      # uppercase hex
    "sha256:" + "a" * 63,
    "sha512:" + "a" * 64,
    "ab" * 32,                  # no algorithm
    "~unresolved~",
    None,
])
def test_digest_refused(value: object) -> None:
    with pytest.raises(ReferenceError, match="sha256:<64 lowercase hex>"):
        check_digest(value, "x")


@pytest.mark.parametrize("tag", ["v3", "_private", "A.b_c-d", "a" * 128])
def test_tags_of_the_distribution_spec(tag: str) -> None:
    assert check_tag(tag) == tag


@pytest.mark.parametrize("tag", ["", "-a", ".a", "a" * 129, "a b", "a:b", "a\n", "ä", "~unresolved~"])
def test_bad_tags(tag: str) -> None:
    with pytest.raises(ReferenceError, match="not allowed"):
        check_tag(tag)


def test_repository_needs_a_host() -> None:
    assert parse_repository("docker.io/nearai/sglang-glm53") == Repository("docker.io", "nearai/sglang-glm53")
    with pytest.raises(ReferenceError, match="not a registry host"):
        parse_repository("nearai/sglang-glm53")


@pytest.mark.parametrize("value,want", [
    ("docker.io/library/nginx", Reference(Repository("docker.io", "library/nginx"))),
    ("docker.io/library/nginx:1.29-alpine", Reference(Repository("docker.io", "library/nginx"), "1.29-alpine")),
    (f"docker.io/library/nginx@{D}", Reference(Repository("docker.io", "library/nginx"), None, D)),
    # tag@digest: both kept, the digest is what the reference pins
    (f"docker.io/library/nginx:1.29@{D}", Reference(Repository("docker.io", "library/nginx"), "1.29", D)),
    # a port is not a tag
    (f"127.0.0.1:5000/test/x:t@{D}", Reference(Repository("127.0.0.1:5000", "test/x"), "t", D)),
    ("localhost:5000/x", Reference(Repository("localhost:5000", "x"))),
    (f"[::1]:5000/x@{D}", Reference(Repository("[::1]:5000", "x"), None, D)),
])
def test_references(value: str, want: Reference) -> None:
    ref = parse_reference(value)
    assert ref == want
    assert str(ref) == value


def test_the_digest_wins_over_the_tag() -> None:
    ref = parse_reference(f"docker.io/library/nginx:1.29@{D}")
    assert ref.pinned == f"docker.io/library/nginx@{D}"
    assert pinned_digest(f"docker.io/library/nginx:1.29@{D}") == D


def test_a_tag_alone_is_no_pin() -> None:
    with pytest.raises(ReferenceError, match="not pinned by digest"):
        _ = parse_reference("docker.io/library/nginx:1.29").pinned
    assert pinned_digest("docker.io/library/nginx:1.29") is None


@pytest.mark.parametrize("value", [
    f"nginx@{D}",                               # no host: would mean docker.io silently
    f"docker.io/Library/nginx@{D}",             # uppercase path
    f"docker.io/library/nginx@{D}@{E}",         # two digests
    f"docker.io/library/nginx@{D}\n",
    f"docker.io/library/nginx:@{D}",            # empty tag
    f"docker.io/library/nginx:a:b@{D}",         # a colon inside the path
    f"docker.io/library/nginx:-x@{D}",          # bad tag
    "docker.io/library/nginx@sha256:abc",
    "docker.io/library/nginx@",
    "docker.io/library/nginx@latest",
    "",
])
def test_malformed_references(value: str) -> None:
    with pytest.raises(ReferenceError):
        parse_reference(value)
    assert pinned_digest(value) is None


def test_unresolved_sentinel_only_where_asked_for() -> None:
    ref = parse_reference("docker.io/library/nginx@~unresolved~", unresolved="~unresolved~")
    assert ref.unresolved and ref.digest is None
    with pytest.raises(ReferenceError, match="not pinned by digest"):
        _ = ref.pinned
    with pytest.raises(ReferenceError):
        parse_reference("docker.io/library/nginx@~unresolved~")


@pytest.mark.parametrize("value,loopback", [
    ("docker.io/nearai/sglang-glm53", False),
    ("127.0.0.1:5000/test/x", True),
    ("localhost:5000/x", True),
    ("localhost/x", True),
    ("[::1]:5000/x", True),
    ("registry.example.com:443/a/b_c/d.e", False),
    ("127.0.0.1.evil.com:5000/x", False),  # a fine host, but not loopback
])
def test_valid_repositories(value: str, loopback: bool) -> None:
    repo = parse_repository(value)
    assert str(repo) == value and repo.is_loopback is loopback


@pytest.mark.parametrize("value", [
    "nearai/sglang",            # no host: would silently mean docker.io
    "docker.io",                # no path
    "docker.io/NearAI/x",       # uppercase path
    "docker.io/x:tag",          # tag inside the repository
    "docker.io/x@sha256:abc",
    "docker.io/x/",             # empty component
    "-bad.example.com/x",
])
def test_invalid_repositories(value: str) -> None:
    with pytest.raises(ReferenceError):
        parse_repository(value)


def test_transport_names() -> None:
    repo = parse_repository("127.0.0.1:5000/test/x")
    assert repo.docker_ref(tag="t") == "docker://127.0.0.1:5000/test/x:t"
    assert repo.docker_ref(tag="t", digest=D) == f"docker://127.0.0.1:5000/test/x@{D}"
    with pytest.raises(ReferenceError):
        repo.docker_ref(tag="-t")
