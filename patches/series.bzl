"""The SGLang release each patch series is written against: one row per series directory.

A root series' series.json pins that release's wheel as its `base` and an extension inherits its
parent's (//patches:series_base_test binds both to this table and to the pin table). The
chains, the declarations and the recipes read the version from here: the chain's base wheel
(@sglang_src_<version>), and the image base a recipe of the series builds on
(//recipes/bases:sglang_cpu_<version>).
"""

SERIES_SGLANG = {
    "v1": "0.5.19",
    "v2": "0.5.19",
    "v3": "0.5.19",
    # A root series of its own: a series on another base cannot extend v1-v3.
    "v4": "0.5.23",
}
