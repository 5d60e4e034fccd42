"""Runs pytest inside a Bazel py_test: JUnit XML for Bazel, no cache writes, test filter."""

import os
import sys

import pytest


def main() -> int:
    # Bazel puts the launcher's own directory first on sys.path; tests import by package path.
    sys.path.pop(0)
    args = ["-p", "no:cacheprovider", "-q", "-rfEs", *sys.argv[1:]]
    xml = os.environ.get("XML_OUTPUT_FILE")
    if xml:
        args.append(f"--junitxml={xml}")
    only = os.environ.get("TESTBRIDGE_TEST_ONLY")
    if only:
        args += ["-k", only]
    # Exit 5 ("no tests collected") stays a failure: a test target that runs nothing is a bug.
    return pytest.main(args)


if __name__ == "__main__":
    sys.exit(main())
