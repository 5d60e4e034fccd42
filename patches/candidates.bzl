"""The bump check's candidates: the pin table's sglang_candidate rows, each with its CPU base.

    bazel run //patches:bump_check -- --to 0.5.23

The pin table (pins/repository_locations.bzl) pins each candidate release's wheel; which CPU
image the series' detects_stock_bug tests run on for that release is this package's choice, so
it is written here: `cpu_base` (an image of recipes/bases) and `cpu_lock` (the PyPI lock that
image installs; //patches:candidates_test keeps the pinned wheel equal to the lock's sglang
entry). A candidate without a row has no CPU base: the check reports "still needed" as unknown.
"""

load("//pins:defs.bzl", "pin_sglang_candidates")
load("//recipes/bases:cpu_bases.bzl", "cpu_base_name", BASE_ROWS = "CPU_BASES")

# The candidates that have a CPU base; version -> (cpu_base, cpu_lock), read from recipes/bases'
# table (the image and the lock it installs).
CPU_BASES = {
    version: ("//recipes/bases:" + cpu_base_name(version), BASE_ROWS[version].lock)
    for version in ["0.5.23"]
}

def sglang_candidates():
    """{version: {wheel, url, sha256, cpu_base, cpu_lock}}; cpu_base and cpu_lock are None for a
    candidate without a CPU base."""
    pinned = pin_sglang_candidates()
    for version in CPU_BASES:
        if version not in pinned:
            fail("patches/candidates.bzl: CPU_BASES names %s, which no sglang_candidate row of pins/repository_locations.bzl pins (known: %s)" % (version, ", ".join(sorted(pinned))))
    out = {}
    for version, row in pinned.items():
        cpu_base, cpu_lock = CPU_BASES.get(version, (None, None))
        out[version] = dict(row, cpu_base = cpu_base, cpu_lock = cpu_lock)
    return out
