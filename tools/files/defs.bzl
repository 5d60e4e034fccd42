"""Public API: committed files that a program generates from the tree.

    load("//tools/files:defs.bzl", "generated_files")

    generated_files(
        name = "files",
        srcs = glob(["*.yaml"]),          # the committed files, relative to this package
        generator = "//deploy/compose_gen:generate",
        generator_args = ["--release=glm53_v3=$(execpath //recipes/releases:glm53_v3.json)"],
        data = ["//recipes/releases:glm53_v3.json"],
    )

makes `:files` (the committed files), `bazel run :files.update` (rewrites them in the workspace)
and `:files_test` (fails with a unified diff and that command when they are stale). The
generator runs as a sandboxed build action, so only generators that are pure functions of their
declared inputs fit; the ones that ask a registry or PyPI stay `bazel run` programs.
"""

load("//tools/files/private:generated.bzl", _generated_files = "generated_files")

generated_files = _generated_files
