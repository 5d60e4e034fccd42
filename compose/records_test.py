"""The release records the compose files pin carry the patches the variants rely on."""

from __future__ import annotations

import os

from deploy.releases import load_bindings


def test_records_carry_the_patches_the_variants_rely_on():
    # config_variant markers are read from the records' patch lists; a renamed patch would
    # silently drop a marker on the next update, so the names are pinned here.
    records = load_bindings(os.environ["RELEASES"].split())
    assert not records["glm53_v1"].has_qsplit
    assert records["glm53_v2"].has_qsplit and not records["glm53_v2"].has_event_loop_v3
    assert records["glm53_v3"].has_qsplit and records["glm53_v3"].has_event_loop_v3
