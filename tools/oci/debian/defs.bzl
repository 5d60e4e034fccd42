"""Public API of the Debian layer producer (see tools/oci/debian/README.md).

    load("//tools/oci/debian:defs.bzl", "debian_rootfs_layer", "debian_lock", "lock_mode_flag")

The .debs come from a debian_packages repository (WORKSPACE: //tools/oci/debian:repositories.bzl).
"""

load("//tools/oci/debian/private:rootfs.bzl", _debian_rootfs_layer = "debian_rootfs_layer")
load("//tools/oci/debian/private:settings.bzl", _LockModeInfo = "LockModeInfo", _lock_mode_flag = "lock_mode_flag")
load("//tools/python:defs.bzl", "py_program")

debian_rootfs_layer = _debian_rootfs_layer
lock_mode_flag = _lock_mode_flag
LockModeInfo = _LockModeInfo

def debian_lock(name, out, roots, exclude, archives, **kwargs):
    """`bazel run :<name>` writes the Debian lock `out` (workspace path): the closure of `roots`
    minus `exclude`, resolved against `archives` (NAME SUITES MIRRORS...) by debroot.py."""
    py_program(
        name = name,
        srcs = ["//tools/oci/debian:debroot.py"],
        args = ["lock", "--out", out, "--target=//%s:%s" % (native.package_name(), name)] +
               ["--root-pkg=" + p for p in roots] +
               ["--exclude=" + p for p in exclude] +
               ["--archive='%s'" % a for a in archives],
        deps = ["//tools/oci/debian:debroot_lib"],
        **kwargs
    )
