"""Repository and tag grammar."""

from __future__ import annotations

import pytest

from tools.oci.registry import RefError, check_tag, parse_repository


@pytest.mark.parametrize("value,loopback", [
    ("docker.io/nearai/sglang-glm53", False),
    ("127.0.0.1:5000/test/x", True),
    ("localhost:5000/x", True),
    ("localhost/x", True),
    ("[::1]:5000/x", True),
    ("registry.example.com:443/a/b_c/d.e", False),
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
    "127.0.0.1.evil.com:5000/x",  # not loopback, and fine as a host: must not be treated as loopback
])
def test_invalid_or_non_loopback(value: str) -> None:
    if value == "127.0.0.1.evil.com:5000/x":
        assert parse_repository(value).is_loopback is False
        return
    with pytest.raises(RefError):
        parse_repository(value)


@pytest.mark.parametrize("tag", ["v3", "glm53-v3-0123456789ab", "A.b_c-d", "a" * 128])
def test_good_tags(tag: str) -> None:
    assert check_tag(tag) == tag


@pytest.mark.parametrize("tag", ["", "-a", ".a", "_a", "a" * 129, "a b", "a:b", "a\nb", "ä"])
def test_bad_tags(tag: str) -> None:
    with pytest.raises(RefError, match="not allowed"):
        check_tag(tag)
