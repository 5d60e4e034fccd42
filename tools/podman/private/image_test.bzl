"""image_suite_test: runs a CPU test suite inside an image with run_in_image.py."""

# Tests that start containers must run on this machine, outside Bazel's sandbox (podman needs
# its storage under ~/.cache and /run), one at a time (2 cores, GBs of image), and never on a
# remote executor: "local" implies no-sandbox and no-remote; the others are spelled out so
# they survive a --strategy override.
CONTAINER_TEST_TAGS = ["local", "no-remote", "no-sandbox", "exclusive", "requires-podman"]

def image_suite_test(
        name,
        image,
        expect = "all-pass",
        tests_in_image = [],
        host_tests = None,
        backend = "auto",
        env = {},
        tags = [],
        **kwargs):
    """Runs pytest inside `image` and judges the result.

    Args:
      name: test name.
      image: label of an OCI layout target (its outputs may include a .digest file).
      expect: "all-pass", or "stock-bugs" (exactly the @detects_stock_bug tests fail).
      tests_in_image: test paths inside the image (the recipe's shipped suite).
      host_tests: label of test files to mount instead (e.g. a stock base has none shipped).
      backend: "auto" (podman, else bwrap), "podman" or "bwrap".
      env: extra environment variables inside the container.
      tags: extra tags; the container tags are always added.
      **kwargs: passed to py_test (size, timeout, ...).
    """
    if bool(tests_in_image) == bool(host_tests):
        fail("image_suite_test {}: give exactly one of tests_in_image or host_tests".format(name))
    args = [
        "suite",
        "--backend=" + backend,
        "--expect=" + expect,
        "--layout",
        "$(rootpaths {})".format(image),
    ]
    data = [image]
    for path in tests_in_image:
        args += ["--tests", path]
    if host_tests:
        args += ["--host-tests", "$(rootpaths {})".format(host_tests)]
        data.append(host_tests)
    for key, value in sorted(env.items()):
        args.append("--env={}={}".format(key, value))
    kwargs.setdefault("size", "large")
    native.py_test(
        name = name,
        srcs = ["//tools/podman:image_test_main.py"],
        main = "//tools/podman:image_test_main.py",
        python_version = "PY3",
        deps = ["//tools/podman:run_in_image_lib"],
        data = data,
        args = args,
        tags = CONTAINER_TEST_TAGS + [t for t in tags if t not in CONTAINER_TEST_TAGS],
        **kwargs
    )
