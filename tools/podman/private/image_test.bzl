"""image_suite_test: runs a CPU test suite inside an image with run_in_image.py."""

load("//tools/oci:defs.bzl", "OciImageInfo")
load("//tools/oci:internal.bzl", "image_runfiles_args", "write_launcher")

# Tests that start containers run on the local host, outside Bazel's sandbox (podman keeps its
# storage under ~/.cache and needs /run), and never on a remote executor, but their results are
# cached: no "local" (which Bazel 4.2.3 also implies for "exclusive" unless
# --incompatible_exclusive_test_sandboxed, set in .bazelrc) and no "no-remote". What the host
# contributes is an input: they carry //tools/ci:host_tools. "integration" keeps them out of
# --config=quick.
_CONTAINER = ["no-remote-exec", "no-sandbox", "requires-podman", "integration"]

# One at a time, in Bazel's serial phase after every other test: for a test whose bound on time
# would assert the machine's load rather than the code (the timing suite).
CONTAINER_TEST_TAGS = _CONTAINER + ["exclusive"]

# Beside other tests, one CPU each: podman's storage takes concurrent pulls and runs (its own
# locks; each run names its image by digest and its view by pid, no test prunes), and a test
# that must remove an image from storage (the rollout rehearsal) keeps its own storage.
PARALLEL_CONTAINER_TEST_TAGS = _CONTAINER + ["cpu:1"]

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
    return [write_launcher(ctx, ctx.attr._runner, args, files + ctx.files._host_tools, "in-image CPU suite")]

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
        # The host's podman, runc, ... versions: a host upgrade reruns the suite (tools/ci/host_tools.bzl).
        "_host_tools": attr.label(default = "//tools/ci:host_tools", allow_single_file = True),
    },
)

def image_suite_test(name, tags = [], exclusive = True, **kwargs):
    """_image_suite_test with the container tags always added and size "large".

    Args:
      name: test name.
      tags: extra tags.
      exclusive: False for a suite that runs beside other tests (PARALLEL_CONTAINER_TEST_TAGS).
      **kwargs: image, expect, tests_in_image, host_tests, markers, backend, env, size,
        timeout, flaky, ...
    """
    kwargs.setdefault("size", "large")
    container = CONTAINER_TEST_TAGS if exclusive else PARALLEL_CONTAINER_TEST_TAGS
    _image_suite_test(
        name = name,
        tags = container + [t for t in tags if t not in container],
        **kwargs
    )
