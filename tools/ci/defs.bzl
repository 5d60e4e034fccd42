"""Test tiers: `bazel test //...` runs the default tier; CI (.ci/run) runs the full tier as well.

    load("//tools/ci:defs.bzl", "FULL_TIER_TAGS")

A test in the full tier carries FULL_TIER_TAGS: `manual` keeps it out of `//...` (and of every
other wildcard), the tier tag is what `tools/ci/full_tier` finds it by. CI passes those labels
to the same `bazel test` as `//...`, so one build event file and one `N passed, N failed` line
cover both tiers; anyone can do the same:

    ./tools/bazel test //... $(tools/ci/full_tier)

Why a test is in the full tier is in docs/decisions.md ("Test tiers").
"""

# tools/ci/full_tier reads this line (`FULL_TIER_TAG = "..."`): keep it a plain string literal.
FULL_TIER_TAG = "tier_full"

FULL_TIER_TAGS = ["manual", FULL_TIER_TAG]
