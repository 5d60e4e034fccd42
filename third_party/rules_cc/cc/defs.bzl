"""Forwards rules_cc's public API to the native C++ rules built into Bazel 4.2.3.

Bazel's embedded tools load @rules_cc//cc:defs.bzl; the real rules_cc lives on GitHub, which
these machines cannot reach, and the native rules are what it wraps in this Bazel version.
"""

def _forward(rule):
    def _call(**kwargs):
        rule(**kwargs)
    return _call

cc_binary = _forward(native.cc_binary)
cc_import = _forward(native.cc_import)
cc_library = _forward(native.cc_library)
cc_proto_library = _forward(native.cc_proto_library)
cc_test = _forward(native.cc_test)
cc_toolchain = _forward(native.cc_toolchain)
cc_toolchain_suite = _forward(native.cc_toolchain_suite)
fdo_prefetch_hints = _forward(native.fdo_prefetch_hints)
fdo_profile = _forward(native.fdo_profile)
objc_import = _forward(native.objc_import)
objc_library = _forward(native.objc_library)
