"""The interpreter of the registered Python toolchain (//tools/python:py3_runtime).

Repository rules cannot resolve toolchains; the ones that run Python (oci_pull) take this path
instead of whatever `python3` the client's PATH finds. `./tools/bazel` installs it.
"""

PYTHON3 = "/usr/bin/python3"
