"""Each series' SGLang base is the pinned source wheel of its series.bzl version.

A root series' series.json names the wheel its before-hashes come from; the patch tooling reads it
there, so it is bound to the pin table's `sglang_src_<version>` row here instead of being a second,
free value. An extension inherits its parent's base, so series.bzl must give it its parent's
version (the chain and the recipes read the version from series.bzl).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pins import table

SERIES_SGLANG = dict(item.split("=", 1) for item in os.environ["SERIES_SGLANG"].split())


def _declaration(series: str) -> dict:
    return json.loads(Path(f"patches/{series}/series.json").read_text())


def test_every_series_directory_has_a_version() -> None:
    assert SERIES_SGLANG, "SERIES_SGLANG is empty"


@pytest.mark.parametrize("series", sorted(SERIES_SGLANG))
def test_the_series_base_is_the_pinned_source_wheel_of_its_version(series: str) -> None:
    version = SERIES_SGLANG[series]
    declared = _declaration(series)
    if "extends" in declared:
        parent = declared["extends"]
        assert SERIES_SGLANG.get(parent) == version, (
            f"patches/series.bzl gives {series} SGLang {version} but it extends {parent} "
            f"({SERIES_SGLANG.get(parent)}): an extension is on its parent's base")
        return
    row = "sglang_src_" + version.replace(".", "_")
    pin = table.load().pins[row]
    base = declared["base"]
    assert base["sha256"] == pin.sha256, (
        f"patches/{series}/series.json base.sha256 {base['sha256']} is not the pinned "
        f"{row} {pin.sha256}")
    assert pin.urls[0].endswith("/" + base["wheel"])
