"""WORKSPACE API: the SGLang wheels the patch series apply to, kept whole and unpacked.

    load("//tools/patches:repositories.bzl", "sglang_source_archive", "sglang_source_archives")
    sglang_source_archives(pin_sglang_candidates())   # @sglang_src_<version with _> per row

Each repository exposes `:wheel.zip` (the wheel itself: what patch_chain applies to, read in
place), `:tree` (its package files, unpacked) and `sglang/__init__.py` (the root marker).
"""

# Files with spaces in their names (GPU tuning configs) are left out of :tree: Bazel's runfiles
# cannot carry them.
_BUILD = """
package(default_visibility = ["//visibility:public"])

filegroup(
    name = "tree",
    srcs = glob(["sglang/**"], exclude = ["**/* *", "**/__pycache__/**"]),
)

# Marks the package root (the directory holding sglang/); wheel.zip: the wheel itself.
exports_files([
    "sglang/__init__.py",
    "wheel.zip",
])
"""

# The name the wheel keeps in the repository (`extract` picks the format by the extension).
_WHEEL = "wheel.zip"

def _sglang_source_archive_impl(rctx):
    rctx.download(url = rctx.attr.urls, output = _WHEEL, sha256 = rctx.attr.sha256)
    rctx.extract(_WHEEL)
    rctx.file("BUILD.bazel", _BUILD)
    rctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % rctx.name)

_sglang_source_archive = repository_rule(
    implementation = _sglang_source_archive_impl,
    doc = "A wheel, pinned by sha256, kept as wheel.zip (the patch chain's base) and unpacked (:tree).",
    attrs = {
        "urls": attr.string_list(mandatory = True),
        "sha256": attr.string(mandatory = True),
    },
)

def sglang_source_repository_name(version):
    """@sglang_src_0_5_23 for "0.5.23"."""
    return "sglang_src_" + version.replace(".", "_")

def sglang_source_archive(name, url, sha256):
    """One SGLang wheel (a zip), pinned by sha256: `:wheel.zip` and its files as `:tree`."""
    _sglang_source_archive(name = name, sha256 = sha256, urls = [url])

def sglang_source_archives(candidates):
    """A source tree per row of a candidate table (//pins:defs.bzl pin_sglang_candidates())."""
    for version, row in candidates.items():
        sglang_source_archive(name = sglang_source_repository_name(version), url = row["url"], sha256 = row["sha256"])
