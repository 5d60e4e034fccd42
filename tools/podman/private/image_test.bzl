"""image_suite_test: runs a CPU test suite inside an image with run_in_image.py."""

load("//tools/oci:defs.bzl", "OciImageInfo", "image_runfiles_args", "write_launcher")

# Tests that start containers must run on the local host, outside Bazel's sandbox (podman keeps
# its storage under ~/.cache and needs /run), one at a time (2 cores, GBs of image), and never
# on a remote executor. "local" implies no-sandbox and no-remote; the others are spelled out so
# they survive strategy overrides.
CONTAINER_TEST_TAGS = ["local", "no-remote", "no-sandbox", "exclusive", "requires-podman"]

def _impl(ctx):
    if bool(ctx.attr.tests_in_image) == bool(ctx.files.host_tests):
        fail("%s: give exactly one of tests_in_image or host_tests" % ctx.label)
    args, files = image_runfiles_args(ctx.attr.image[OciImageInfo], layout_flag = "--layout")
    args = ["suite", "--backend=" + ctx.attr.backend, "--expect=" + ctx.attr.expect] + args
    if ctx.attr.markers:
        args.append("--markers=" + ctx.attr.markers)
    for path in ctx.attr.tests_in_image:
        args += ["--tests", path]
    if ctx.files.host_tests:
        args += ["--host-tests"] + [f.short_path for f in ctx.files.host_tests]
        files += ctx.files.host_tests
    for key, value in sorted(ctx.attr.env.items()):
        args.append("--env=%s=%s" % (key, value))
    return [write_launcher(ctx, ctx.attr._runner, args, files, "in-image CPU suite")]

_image_suite_test = rule(
    implementation = _impl,
    test = True,
    doc = "Runs pytest inside an image (podman, else bubblewrap) and judges the outcome.",
    attrs = {
        "image": attr.label(providers = [OciImageInfo], mandatory = True),
        "expect": attr.string(default = "all-pass", values = ["all-pass", "stock-bugs"]),
        "tests_in_image": attr.string_list(doc = "test paths inside the image"),
        "host_tests": attr.label_list(allow_files = True, doc = "test files mounted into the image instead"),
        "backend": attr.string(default = "auto", values = ["auto", "podman", "bwrap"]),
        "markers": attr.string(doc = "pytest -m expression, e.g. \"timing\" or \"not timing\" (tests that measure time carry @pytest.mark.timing)"),
        "env": attr.string_dict(doc = "extra environment variables in the container"),
        "_runner": attr.label(default = "//tools/podman:run_in_image", executable = True, cfg = "target"),
    },
)

def image_suite_test(name, tags = [], **kwargs):
    """_image_suite_test with the container tags always added and size "large".

    Args:
      name: test name.
      tags: extra tags.
      **kwargs: image, expect, tests_in_image, host_tests, markers, backend, env, size,
        timeout, flaky, ...
    """
    kwargs.setdefault("size", "large")
    _image_suite_test(
        name = name,
        tags = CONTAINER_TEST_TAGS + [t for t in tags if t not in CONTAINER_TEST_TAGS],
        **kwargs
    )
