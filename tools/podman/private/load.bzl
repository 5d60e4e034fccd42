"""oci_load: `bazel run <image>.load` into the project's podman storage or a docker-archive tar."""

load("//tools/oci:defs.bzl", "OciImageInfo")
load("//tools/oci:internal.bzl", "image_runfiles_args", "require_blobs", "write_launcher")

def _load_impl(ctx):
    require_blobs(ctx.attr.image[OciImageInfo], "load")
    args, files = image_runfiles_args(ctx.attr.image[OciImageInfo])
    tag = ctx.attr.repo_tag or "localhost/%s:latest" % ctx.attr.image.label.name
    return [write_launcher(ctx, ctx.attr._load, args + ["--tag", tag], files, "load the image into podman or a docker-archive tar")]

oci_load = rule(
    implementation = _load_impl,
    executable = True,
    doc = """`bazel run <image>.load`: the image into the project's podman storage (tools/podman/load.py),
tagged `repo_tag`; `-- --format docker-archive --out FILE` writes a tar for `docker load`
instead; `-- --tag T` overrides the tag. Like rules_oci's oci_load.""",
    attrs = {
        "image": attr.label(providers = [OciImageInfo], mandatory = True),
        "repo_tag": attr.string(doc = "repository:tag (default localhost/<image target name>:latest)"),
        "_load": attr.label(default = "//tools/podman:load", executable = True, cfg = "target"),
    },
)
