"""The series' SGLang base is the pinned source wheel.

patches/v1/series.json names the wheel its before-hashes come from; the patch tooling reads it
there, so it is bound to the pin table's `sglang_src_0_5_19` row here instead of being a second,
free value.
"""

from __future__ import annotations

import json
from pathlib import Path

from pins import table


def test_the_series_base_is_the_pinned_source_wheel() -> None:
    pin = table.load().pins["sglang_src_0_5_19"]
    declared = json.loads(Path("patches/v1/series.json").read_text())["base"]
    assert declared["sha256"] == pin.sha256, (
        f"patches/v1/series.json base.sha256 {declared['sha256']} is not the pinned "
        f"sglang_src_0_5_19 {pin.sha256}")
    assert pin.urls[0].endswith("/" + declared["wheel"])
