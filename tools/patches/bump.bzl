"""Public API of the bump check (the series on candidate SGLang releases).

    load("//tools/patches:bump.bzl", "patch_bump_check")
    patch_bump_check(name = "bump_check", candidates = sglang_candidates(), series = ["v3"],
                     tests = [":v3_tests"], patch_tests = {"v1/x.diff": ["v1/tests/test_x.py"]})

Not in defs.bzl: the check runs tests in images, so it loads tools/podman (and through it
tools/oci); keeping it here keeps those loads out of every file that loads defs.bzl for the
chain rules or PatchChainInfo. (No load cycle requires it: tools/oci loads nothing of
tools/patches.)
"""

load("//tools/patches/private:bump_check.bzl", _patch_bump_check = "patch_bump_check")

patch_bump_check = _patch_bump_check
