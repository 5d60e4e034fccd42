"""pytest_main.py's side of Bazel's sharding protocol, run as Bazel runs a sharded target."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

MAIN = Path(os.environ["PYTEST_MAIN"]).resolve()
TESTS = [f"test_{i}" for i in range(7)]


def run(tmp: Path, index: int | None, total: int | None, *args: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    suite = tmp / "test_sample.py"
    suite.write_text("".join(f"def {name}():\n    pass\n\n" for name in TESTS))
    xml = tmp / f"shard{index}.xml"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(sys.path), "XML_OUTPUT_FILE": str(xml),
           "TEST_TMPDIR": str(tmp)}
    if total is not None:
        env |= {"TEST_TOTAL_SHARDS": str(total), "TEST_SHARD_INDEX": str(index),
                "TEST_SHARD_STATUS_FILE": str(tmp / "status")}
    proc = subprocess.run([sys.executable, str(MAIN), str(suite), *args], cwd=tmp, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    ran = [case.get("name") for case in ET.parse(xml).iter("testcase")] if xml.exists() else []
    return proc, ran


def test_shards_partition_the_tests_and_touch_the_status_file(tmp_path: Path) -> None:
    shards = []
    for index in range(3):
        proc, ran = run(tmp_path, index, 3)
        assert proc.returncode == 0, proc.stdout
        shards.append(ran)
    assert (tmp_path / "status").exists(), "Bazel reads the touched status file as 'this runner shards'"
    assert sorted(sum(shards, [])) == TESTS, shards  # every test once, in exactly one shard
    assert [len(s) for s in shards] == [3, 2, 2]
    assert shards == [run(tmp_path, i, 3)[1] for i in range(3)], "the same split on every run"


def test_the_deal_is_over_the_tests_left_after_k(tmp_path: Path) -> None:
    shards = [run(tmp_path, index, 2, "-k", "not test_0")[1] for index in range(2)]
    assert sorted(sum(shards, [])) == TESTS[1:] and [len(s) for s in shards] == [3, 3], shards


def test_unsharded_runs_everything(tmp_path: Path) -> None:
    proc, ran = run(tmp_path, None, None)
    assert proc.returncode == 0 and ran == TESTS, proc.stdout
    assert not (tmp_path / "status").exists()


@pytest.mark.parametrize("index,total,match", [
    (0, 8, "shard_count = 8 but only 7 test(s) selected"),
    (3, 3, "TEST_SHARD_INDEX=3 is outside 0..2"),
])
def test_a_split_that_cannot_work_is_an_error(tmp_path: Path, index: int, total: int, match: str) -> None:
    proc, _ = run(tmp_path, index, total)
    assert proc.returncode != 0 and match in proc.stdout, proc.stdout
