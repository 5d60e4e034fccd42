"""Candidate SGLang releases the patch series may move to: the bump check's table.

    bazel run //patches:bump_check -- --to 0.5.23

Each row pins one release's cp311 wheel on PyPI's file host by sha256, like the source base
@sglang_src_0_5_19. WORKSPACE turns every row into a repository @sglang_src_<version with _>
(sglang_source_archives in //tools/patches:repositories.bzl); //patches:bump_check reads the
same rows. `cpu_base` names the CPU image whose stock files the series' detects_stock_bug tests
run against (None: the check reports "still needed" as unknown). A test keeps each row equal
to the sglang entry of that base's lock.
"""

SGLANG_CANDIDATES = {
    "0.5.23": {
        "wheel": "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
        "url": "https://files.pythonhosted.org/packages/57/dd/0206d00b2ea5b163bbdd216e91cc4f23ea90fde8620db0a6272d4236b68e/sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
        "sha256": "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937",
        "cpu_base": "//recipes/bases:sglang_cpu_0_5_23",
        "cpu_lock": "//third_party/python:sglang_cpu_0_5_23.lock",
    },
}
