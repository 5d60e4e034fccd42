"""WORKSPACE API: SGLang wheels unpacked as source trees the patch series apply to.

    load("//tools/patches:repositories.bzl", "sglang_source_archive", "sglang_source_archives")
    sglang_source_archives(pin_sglang_candidates())   # @sglang_src_<version with _> per row

Each repository exposes `:tree` (the package files) and `sglang/__init__.py` (the root marker).
"""

load("@bazel_tools//tools/build_defs/repo:http.bzl", "http_archive")

# Files with spaces in their names (GPU tuning configs) are left out: Bazel's runfiles cannot
# carry them.
_BUILD = """
package(default_visibility = ["//visibility:public"])

filegroup(
    name = "tree",
    srcs = glob(["sglang/**"], exclude = ["**/* *", "**/__pycache__/**"]),
)

# Marks the package root (the directory holding sglang/).
exports_files(["sglang/__init__.py"])
"""

def sglang_source_repository_name(version):
    """@sglang_src_0_5_23 for "0.5.23"."""
    return "sglang_src_" + version.replace(".", "_")

def sglang_source_archive(name, url, sha256):
    """One SGLang wheel (a zip) unpacked as a source tree, pinned by sha256."""
    http_archive(
        name = name,
        build_file_content = _BUILD,
        sha256 = sha256,
        type = "zip",
        urls = [url],
    )

def sglang_source_archives(candidates):
    """A source tree per row of a candidate table (//pins:defs.bzl pin_sglang_candidates())."""
    for version, row in candidates.items():
        sglang_source_archive(name = sglang_source_repository_name(version), url = row["url"], sha256 = row["sha256"])
