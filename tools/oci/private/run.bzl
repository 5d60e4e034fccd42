"""Consumable outputs of an image: `.view` (symlinked full layout) and the `oci-image-tool
validate` conformance test. `.load` (podman) is tools/podman's oci_load."""

load(":launcher.bzl", "image_runfiles_args", "require_blobs", "write_launcher")
load(":providers.bzl", "OciImageInfo")

def _view_impl(ctx):
    require_blobs(ctx.attr.image[OciImageInfo], "view")
    args, files = image_runfiles_args(ctx.attr.image[OciImageInfo])
    return [write_launcher(ctx, ctx.attr._materialize, args + ["--mode", "symlink", "--replace", "--out"], files, "bazel run TARGET -- DIR: the full layout of symlinks")]

oci_view = rule(
    implementation = _view_impl,
    executable = True,
    doc = """`bazel run <image>.view -- DIR`: writes a complete OCI layout of the image to DIR.

Index, manifest, config and the embedded blobs are copied (small); every other layer blob is a
symlink to its Bazel output, so it takes about a second whatever the base's size. The view
stays valid until those outputs are rebuilt or cleaned. DIR is relative to where Bazel ran; an
old view there is replaced.""",
    attrs = {
        "image": attr.label(providers = [OciImageInfo], mandatory = True),
        "_materialize": attr.label(default = "//tools/oci:materialize", executable = True, cfg = "target"),
    },
)

def _validate_test_impl(ctx):
    image = ctx.attr.image[OciImageInfo]
    require_blobs(image, "validate")
    args, files = image_runfiles_args(image)
    files = files + ctx.files._host_tools
    return [write_launcher(ctx, ctx.attr._validate, args + ["--digest-file", image.digest.short_path], files, "oci-image-tool validate on the full view")]

oci_validate_test = rule(
    implementation = _validate_test_impl,
    test = True,
    doc = """Runs `oci-image-tool validate --type image` on a symlinked full layout of the image:
schemas of index, manifest and config, and the size and digest of every blob.""",
    attrs = {
        "image": attr.label(providers = [OciImageInfo], mandatory = True),
        "_validate": attr.label(default = "//tools/oci:validate", executable = True, cfg = "target"),
        # The host's oci-image-tool version (tools/ci/host_tools.bzl).
        "_host_tools": attr.label(default = "//tools/ci:host_tools", allow_single_file = True),
    },
)
