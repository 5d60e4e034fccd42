"""Public API: ordered, hash-pinned SGLang patch series applied and verified in one action.

    load("//tools/patches:defs.bzl", "patch_chain", "patch_series", "patch_rehash", "chain_base_files")

    patch_series(name = "v1_series", declaration = "v1/series.json", patches = glob(["v1/*.diff"]))
    patch_series(name = "v2_series", declaration = "v2/series.json", patches = glob(["v2/*.diff"]), extends = ":v1_series")
    patch_chain(name = "v2", series = ":v2_series")   # base = "@sglang_src_0_5_19//:wheel.zip"
    patch_rehash(name = "rehash")                       # bazel run //patches:rehash -- v2 [--write]
    patch_declaration(name = "v2_declaration", series = "v2", series_files = ":series_files")
                                                        # :v2_declaration.update, :v2_declaration_test
    chain_base_files(name = "v2_base", chain = ":v2", site = "usr/lib/python3/dist-packages", fix = "...")
                                                        # for oci_pull(expect = ...): what a base must hold

See patches/README.md for the declaration format and the errors.
"""

load("//tools/files:defs.bzl", "generated_files")
load("//tools/patches/private:base_files.bzl", _chain_base_files = "chain_base_files")
load(
    "//tools/patches/private:patch_chain.bzl",
    _PatchChainInfo = "PatchChainInfo",
    _PatchSeriesInfo = "PatchSeriesInfo",
    _patch_chain = "patch_chain",
    _patch_series = "patch_series",
)
load("//tools/python:defs.bzl", "py_program")

PatchChainInfo = _PatchChainInfo
PatchSeriesInfo = _PatchSeriesInfo
patch_series = _patch_series
chain_base_files = _chain_base_files

def patch_chain(name, series, base = "@sglang_src_0_5_19//:wheel.zip", **kwargs):
    """The verified, applied series `series` (a patch_series label) on `base` (the declared wheel).

    Provides PatchChainInfo and DefaultInfo with the patched directory, PROVENANCE.json,
    PROVENANCE and the resolved declaration.
    """
    _patch_chain(name = name, series = series, base = base, **kwargs)

def patch_rehash(name, base = "@sglang_src_0_5_19//:tree", base_marker = "@sglang_src_0_5_19//:sglang/__init__.py", **kwargs):
    """`bazel run :<name> -- <series> [--write]`: recompute a declaration's hashes, show the change.

    Reads and writes the declarations under this package's directory in the workspace.
    """
    py_program(
        name = name,
        srcs = ["//tools/patches/private:rehash.py"],
        deps = ["//tools/patches/private:patchchain"],
        data = [base, base_marker],
        args = [
            "--base-marker",
            "$(rootpath %s)" % base_marker,
            "--allow-input-symlinks",
            "--patches-dir-from-workspace",
            native.package_name(),
        ],
        **kwargs
    )

def patch_declaration(name, series, series_files, base = "@sglang_src_0_5_19//:tree", base_marker = "@sglang_src_0_5_19//:sglang/__init__.py", **kwargs):
    """`<series>/series.json` as the committed, generated file of generated_files(name).

    `bazel run :<name>.update` writes what `:rehash -- <series> --write` would (the hashes
    recomputed from the patches and the base); `:<name>_test` fails while the declaration differs.

    Args:
      name: the generated_files name.
      series: the series directory, e.g. "v3".
      series_files: every series.json and .diff of this package (the series and its ancestors).
      base: the base tree the root series applies to.
      base_marker: the base's sglang/__init__.py.
      **kwargs: passed to generated_files.
    """
    generated_files(
        name = name,
        srcs = [series + "/series.json"],
        generator = "//tools/patches/private:declare",
        generator_args = [
            series,
            "--patches-dir=" + native.package_name(),
            "--base-marker=$(execpath %s)" % base_marker,
        ],
        data = [series_files, base, base_marker],
        **kwargs
    )
