"""Helpers of the OCI rules for the rules of other areas under //tools (not for BUILD files).

    load("//tools/oci:internal.bzl", "write_launcher", "image_runfiles_args", ...)

The public rules and providers are in defs.bzl; this file is the rest of what tools/engine,
tools/podman, tools/release and the layer producers (tools/oci/debian, tools/oci/python) build
on, so none of them loads another area's private/. A BUILD file outside //tools has no use for
it (//tools/oci:internal_loads_test fails when one loads it).
"""

load("//tools/oci/private:launcher.bzl", _image_runfiles_args = "image_runfiles_args", _require_blobs = "require_blobs", _shell_quote = "shell_quote", _write_launcher = "write_launcher")
load("//tools/oci/private:layers.bzl", _layer_outputs = "layer_outputs", _layer_return = "layer_return")
load("//tools/oci/private:providers.bzl", _layer_args = "layer_args", _layer_blobs = "layer_blobs")
load("//tools/oci/private:structure.bzl", _STRUCTURE_TEST_ATTRS = "STRUCTURE_TEST_ATTRS", _structure_test_args = "structure_test_args")

# Launchers (bazel run / test scripts): the one writer, its quoting, an image's runfiles.
shell_quote = _shell_quote
write_launcher = _write_launcher
image_runfiles_args = _image_runfiles_args
require_blobs = _require_blobs

# An image's layer blobs and materialize.py's DESCRIPTOR=BLOB arguments.
layer_args = _layer_args
layer_blobs = _layer_blobs

# A layer rule's three outputs and providers (debian_rootfs_layer, python_wheels_layer).
layer_outputs = _layer_outputs
layer_return = _layer_return

# Extending oci_structure_test with an area's own checker (tools/engine).
STRUCTURE_TEST_ATTRS = _STRUCTURE_TEST_ATTRS
structure_test_args = _structure_test_args
