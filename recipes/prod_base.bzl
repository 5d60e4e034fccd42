"""The production base's contract, read by WORKSPACE (what the pull hashes) and recipes/BUILD.bazel.

The base must hold the SGLang files PROD_BASE_CHAIN is written against (their before-hashes)
at PROD_BASE_SITE/sglang/; the pull hashes that directory (oci_pull's `scan`) and every build
on the base checks it against //recipes:prod_base_expect (oci_pull's `expect`).
"""

PROD_BASE_SITE = "usr/lib/python3/dist-packages"
PROD_BASE_CHAIN = "//patches:v3"
