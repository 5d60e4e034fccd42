"""Runs pytest inside a Bazel py_test: JUnit XML for Bazel, no cache writes, test filter,
Bazel's sharding protocol, temporary directories in the test's own TEST_TMPDIR."""

import os
import sys

import pytest
from pytest_shard import Shard  # beside this launcher, as beside the in-image driver


def main() -> int:
    # Bazel puts the launcher's own directory first on sys.path; tests import by package path.
    sys.path.pop(0)
    args = ["-p", "no:cacheprovider", "-q", "-rfEs", *sys.argv[1:]]
    xml = os.environ.get("XML_OUTPUT_FILE")
    if xml:
        args.append(f"--junitxml={xml}")
    # Some tests write gigabytes (a loopback registry holding the CPU base); pytest's default
    # base (/tmp/pytest-of-<user>, three runs kept) would leave them behind.
    tmp = os.environ.get("TEST_TMPDIR")
    if tmp and not any(a.startswith("--basetemp") for a in args):
        args.append(f"--basetemp={os.path.join(tmp, 'pytest')}")
    only = os.environ.get("TESTBRIDGE_TEST_ONLY")
    if only:
        args += ["-k", only]
    shard = Shard.from_env(os.environ)
    # Exit 5 ("no tests collected") stays a failure: a test target that runs nothing is a bug.
    return pytest.main(args, plugins=[shard] if shard else [])


if __name__ == "__main__":
    sys.exit(main())
