"""health_stall's command line: the servers' environment for A/B runs of an engine setting."""

from __future__ import annotations

from pathlib import Path

import pytest

health_stall = pytest.importorskip("lab.health_stall", reason="needs the host lab (//lab:unit_test)")


def test_server_env_items_become_the_containers_environment(tmp_path: Path):
    env = health_stall.parse_server_env(["SGLANG_MM_PROCESSES=1", "SGLANG_X_MB=a=b"])
    assert env == {"SGLANG_MM_PROCESSES": "1", "SGLANG_X_MB": "a=b"}

    started = []

    class RecordingPodman:
        def start(self, image_id, name, label, command, mounts, env):
            started.append(env)
            return name

        def wait(self, container, timeout_s):
            return 0

        def logs(self, container):
            return ""

    lab = health_stall.Lab(RecordingPodman(), tmp_path, "run", env)
    lab.remove = lambda container: None
    assert lab.run_container("image", "v3", ["true"], [], 1.0, tmp_path / "log") == 0
    assert started == [{"PYTHONUNBUFFERED": "1", "SGLANG_MM_PROCESSES": "1", "SGLANG_X_MB": "a=b"}]


@pytest.mark.parametrize("item, named", [
    ("SGLANG_MM_PROCESSES", "'SGLANG_MM_PROCESSES': expected NAME=VALUE"),
    ("sglang_x=1", "'sglang_x=1': expected NAME=VALUE"),
    ("=1", "'=1': expected NAME=VALUE"),
    ("PYTHONUNBUFFERED=0", "PYTHONUNBUFFERED given twice or set by the lab itself"),
])
def test_a_bad_server_env_item_is_refused_naming_it(item, named):
    with pytest.raises(SystemExit) as refused:
        health_stall.parse_server_env([item])
    assert named in str(refused.value)


def test_a_server_env_name_given_twice_is_refused():
    with pytest.raises(SystemExit, match="SGLANG_A given twice"):
        health_stall.parse_server_env(["SGLANG_A=1", "SGLANG_A=2"])
