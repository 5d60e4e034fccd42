"""Public API: tests that run a pytest suite inside a built OCI image (podman, else bwrap)."""

load("//tools/podman/private:image_test.bzl", _image_suite_test = "image_suite_test")

image_suite_test = _image_suite_test
