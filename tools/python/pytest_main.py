"""Runs pytest inside a Bazel py_test: JUnit XML for Bazel, no cache writes, test filter,
Bazel's sharding protocol, temporary directories in the test's own TEST_TMPDIR."""

import os
import sys

import pytest


class Shard:
    """Bazel's test sharding protocol (`shard_count` on the target).

    Bazel runs the target TEST_TOTAL_SHARDS times with TEST_SHARD_INDEX = 0..N-1 and expects
    each run to touch TEST_SHARD_STATUS_FILE, which says the runner honoured the split (without
    it every shard would run every test). The items left after -k/-m are dealt round-robin in
    collection order, which is deterministic (file order, then definition order), so each test
    always lands in the same shard and the shards' counts differ by at most one.
    """

    def __init__(self, index: int, total: int) -> None:
        self.index, self.total = index, total

    @staticmethod
    def from_env(env) -> "Shard | None":
        total = env.get("TEST_TOTAL_SHARDS")
        if not total:
            return None
        status = env.get("TEST_SHARD_STATUS_FILE")
        if status:
            open(status, "a").close()
        try:
            shard = Shard(int(env["TEST_SHARD_INDEX"]), int(total))
        except (KeyError, ValueError) as e:
            raise SystemExit(f"pytest_main.py: TEST_TOTAL_SHARDS={total!r} needs an integer TEST_SHARD_INDEX ({e})")
        if not 0 <= shard.index < shard.total:
            raise SystemExit(f"pytest_main.py: TEST_SHARD_INDEX={shard.index} is outside 0..{shard.total - 1}")
        return shard

    # After pytest's own -k/-m deselection, so the deal is over the tests that would run.
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items) -> None:
        if self.total > len(items):
            raise pytest.UsageError(
                f"shard_count = {self.total} but only {len(items)} test(s) selected: shard {self.index} would run "
                "nothing; lower the target's shard_count")
        keep = [item for i, item in enumerate(items) if i % self.total == self.index]
        config.hook.pytest_deselected(items=[item for i, item in enumerate(items) if i % self.total != self.index])
        items[:] = keep


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
