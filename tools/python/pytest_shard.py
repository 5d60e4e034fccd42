"""Bazel's test sharding protocol for pytest, as a plugin.

Shared by the host launcher (tools/python/pytest_main.py) and the in-image suite driver
(tools/podman/in_image/pytest_driver.py, which runs it inside an image): it needs only the
standard library and pytest.
"""

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
            raise SystemExit(f"pytest sharding: TEST_TOTAL_SHARDS={total!r} needs an integer TEST_SHARD_INDEX ({e})")
        if not 0 <= shard.index < shard.total:
            raise SystemExit(f"pytest sharding: TEST_SHARD_INDEX={shard.index} is outside 0..{shard.total - 1}")
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
