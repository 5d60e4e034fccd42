"""Public API of the bump check (the series on candidate SGLang releases).

    load("//tools/patches:bump.bzl", "patch_bump_check")
    patch_bump_check(name = "bump_check", candidates = pin_sglang_candidates(), series = ["v3"],
                     tests = [":v3_tests"], patch_tests = {"v1/x.diff": ["v1/tests/test_x.py"]})

Not in defs.bzl: the check runs tests in images (tools/podman), whose rules load tools/oci,
which loads defs.bzl for PatchChainInfo.
"""

load("//tools/patches/private:bump_check.bzl", _patch_bump_check = "patch_bump_check")

patch_bump_check = _patch_bump_check
