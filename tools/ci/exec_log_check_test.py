"""exec_log_check.py on execution logs written the way Bazel 4.2.3 writes them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tools.ci import exec_log_check


def spawn(mnemonic: str, runner: str, message: str = "", outputs: tuple[str, ...] = ("bazel-out/k8-fastbuild/bin/x",)) -> dict:
    # The fields (and the pretty-printed, concatenated layout) of a real log's SpawnExec.
    return {"commandArgs": ["/usr/bin/python3", "tool.py"], "listedOutputs": list(outputs), "remotable": True,
            "cacheable": True, "progressMessage": message, "mnemonic": mnemonic, "runner": runner,
            "remoteCacheHit": runner == "remote cache hit", "exitCode": 0}


def write(tmp: Path, log: list[dict]) -> Path:
    path = tmp / "exec.json"
    path.write_text("".join(json.dumps(s, indent=2) + "\n" for s in log))
    return path


def run(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, exec_log_check.__file__, str(path)], text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_sandboxed_cached_remote_and_test_spawns_pass(tmp_path: Path) -> None:
    proc = run(write(tmp_path, [
        spawn("OciLayer", "linux-sandbox", "Writing layer //a:layer"),
        spawn("Genrule", "remote cache hit", "Executing genrule //a:g"),
        spawn("OciImage", "remote", "Assembling OCI image //a:img"),
        spawn("TestRunner", "local", "Testing //a:podman_test"),
    ]))
    assert proc.returncode == 0, proc.stdout
    assert "4 spawns (1 linux-sandbox, 1 remote, 1 remote cache hit, 1 test); 0 build spawns outside" in proc.stdout


def test_a_local_or_processwrapper_build_spawn_fails_naming_the_action(tmp_path: Path) -> None:
    proc = run(write(tmp_path, [
        spawn("OciLayer", "linux-sandbox", "Writing layer //a:layer"),
        spawn("Genrule", "local", "Executing genrule //a:unsandboxed"),
        spawn("LayerSbom", "processwrapper-sandbox", "", outputs=("bazel-out/k8-fastbuild/bin/a/l.spdx.json",)),
    ]))
    assert proc.returncode == 1
    lines = [line for line in proc.stdout.splitlines() if "not linux-sandbox" in line]
    assert len(lines) == 2, proc.stdout
    assert "Genrule `Executing genrule //a:unsandboxed`: ran by 'local'" in lines[0]
    # No progress message: the action is named by its first output.
    assert "LayerSbom `bazel-out/k8-fastbuild/bin/a/l.spdx.json`: ran by 'processwrapper-sandbox'" in lines[1]
    assert "--strategy/--spawn_strategy" in lines[0]


def test_an_empty_log_passes_and_a_foreign_file_is_an_error(tmp_path: Path) -> None:
    assert run(write(tmp_path, [])).returncode == 0
    bad = tmp_path / "bep.txt"
    bad.write_text("not json\n")
    proc = run(bad)
    assert proc.returncode != 0 and f"{bad}: not a Bazel JSON execution log at offset 0" in proc.stdout
