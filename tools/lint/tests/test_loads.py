"""starlark.py's load rule: private/ only from its own area, tools/oci:internal.bzl only under tools/."""

from __future__ import annotations

from tools.lint.starlark import load_violations


def test_loads_inside_the_rule_pass() -> None:
    assert load_violations({
        "tools/oci/defs.bzl": 'load("//tools/oci/private:image.bzl", "x")\n',
        "tools/oci/debian/private/rootfs.bzl": 'load("//tools/oci:internal.bzl", "layer_outputs")\nload(":settings.bzl", "y")\n',
        "tools/podman/private/load.bzl": 'load(\n    "//tools/oci:internal.bzl",\n    "write_launcher",\n)\n',
        "recipes/BUILD.bazel": 'load("//tools/oci:defs.bzl", "oci_image")\n',
    }) == []


def test_a_cross_area_private_load_and_internal_outside_tools_fail() -> None:
    assert load_violations({
        "lab/defs.bzl": 'load("//tools/oci/private:providers.bzl", "OciImageInfo")\n',
        "recipes/BUILD.bazel": 'load("//tools/oci:internal.bzl", "write_launcher")\n',
        "tools/engine/private/engine.bzl": 'load("//tools/podman/private:image_test.bzl", "x")\n',
    }) == [
        "lab/defs.bzl: loads //tools/oci/private:providers.bzl, the private implementation of tools/oci; "
        "load tools/oci's public defs.bzl (or its internal.bzl from under tools/) instead",
        "recipes/BUILD.bazel: loads //tools/oci:internal.bzl, which is for the rules under //tools; "
        "BUILD files load //tools/oci:defs.bzl",
        "tools/engine/private/engine.bzl: loads //tools/podman/private:image_test.bzl, the private implementation "
        "of tools/podman; load tools/podman's public defs.bzl (or its internal.bzl from under tools/) instead",
    ]
