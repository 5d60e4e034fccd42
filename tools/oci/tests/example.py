"""A Python file for the example layer of //tools/oci:BUILD.bazel (compiled to .pyc there)."""

GREETING = "hello"
