"""Public API: run things inside built OCI images (podman, else bubblewrap).

    load("//tools/podman:defs.bzl", "image_suite_test", "image_files", "oci_load")

image_suite_test: a pytest suite inside an image, judged "all-pass" or "stock-bugs".
image_files: <name>.json naming an image's layout, digest and layer blobs, all in runfiles.
oci_load: `bazel run <image>.load` into the project's podman storage (or a docker-archive tar).
"""

load("//tools/podman/private:image_files.bzl", _image_files = "image_files")
load(
    "//tools/podman/private:image_test.bzl",
    _CONTAINER_TEST_TAGS = "CONTAINER_TEST_TAGS",
    _PARALLEL_CONTAINER_TEST_TAGS = "PARALLEL_CONTAINER_TEST_TAGS",
    _image_suite_test = "image_suite_test",
)
load("//tools/podman/private:load.bzl", _oci_load = "oci_load")

image_suite_test = _image_suite_test
image_files = _image_files
oci_load = _oci_load

# Tags of a test that runs podman (outside the sandbox, one at a time, never remote, cached).
CONTAINER_TEST_TAGS = _CONTAINER_TEST_TAGS

# The same for one that runs beside other tests, one CPU.
PARALLEL_CONTAINER_TEST_TAGS = _PARALLEL_CONTAINER_TEST_TAGS
