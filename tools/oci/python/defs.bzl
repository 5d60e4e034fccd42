"""Public API of the Python layer producer (see tools/oci/python/README.md).

    load("//tools/oci/python:defs.bzl", "python_wheels_layer")
"""

load("//tools/oci/python/private:wheels.bzl", _python_wheels_layer = "python_wheels_layer")

python_wheels_layer = _python_wheels_layer
