"""Bazel test entry point: `run_in_image.py suite ...` with the arguments the macro wrote."""

import sys

from tools.podman import run_in_image

if __name__ == "__main__":
    sys.exit(run_in_image.main(sys.argv[1:]))
