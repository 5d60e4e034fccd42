"""Consumable outputs of an image: `.view` (symlinked full layout), `.load` (podman storage or
docker-archive) and the `oci-image-tool validate` conformance test."""

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

def _load_impl(ctx):
    require_blobs(ctx.attr.image[OciImageInfo], "load")
    args, files = image_runfiles_args(ctx.attr.image[OciImageInfo])
    tag = ctx.attr.repo_tag or "localhost/%s:latest" % ctx.attr.image.label.name
    return [write_launcher(ctx, ctx.attr._load, args + ["--tag", tag], files, "load the image into podman or a docker-archive tar")]

oci_load = rule(
    implementation = _load_impl,
    executable = True,
    doc = """`bazel run <image>.load`: the image into the project's podman storage (tools/podman),
tagged `repo_tag`; `-- --format docker-archive --out FILE` writes a tar for `docker load`
instead; `-- --tag T` overrides the tag. Like rules_oci's oci_load.""",
    attrs = {
        "image": attr.label(providers = [OciImageInfo], mandatory = True),
        "repo_tag": attr.string(doc = "repository:tag (default localhost/<image target name>:latest)"),
        "_load": attr.label(default = "//tools/oci:load", executable = True, cfg = "target"),
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
