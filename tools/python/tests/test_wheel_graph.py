"""wheel_graph.py: closures from Requires-Dist, with markers, extras and cycles."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

GRAPH = Path(__file__).resolve().parents[1] / "private" / "wheel_graph.py"


def wheel(site: Path, name: str, *requires: str) -> None:
    info = site / name / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    lines = [f"Metadata-Version: 2.1", f"Name: {name}", "Version: 1.0"] + [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


def graph(site: Path) -> dict:
    done = subprocess.run([sys.executable, str(GRAPH), str(site)], stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout)


def test_closures_follow_markers_extras_and_cycles(tmp_path: Path) -> None:
    wheel(tmp_path, "app", "lib-a>=1", "tool[fast]", 'win_only; sys_platform == "win32"', 'testing; extra == "test"')
    wheel(tmp_path, "lib_a", "Lib.B")  # names normalised like requirement() labels
    wheel(tmp_path, "lib_b", "lib_a")  # a cycle
    wheel(tmp_path, "tool", 'speedup; extra == "fast"', 'slow; extra == "slow"')
    for leaf in ("speedup", "slow", "win_only", "testing", "lonely"):
        wheel(tmp_path, leaf)
    closure = graph(tmp_path)["closure"]
    assert closure["app"] == ["app", "lib_a", "lib_b", "speedup", "tool"]
    assert closure["lib_a"] == closure["lib_b"] == ["lib_a", "lib_b"]
    assert closure["tool"] == ["tool"]  # extras only when asked for
    assert closure["lonely"] == ["lonely"]


def test_requirements_missing_from_the_lock_are_reported(tmp_path: Path) -> None:
    wheel(tmp_path, "app", "six>=1.5", 'never; python_version < "3"')
    out = graph(tmp_path)
    assert out["closure"]["app"] == ["app"]
    assert out["unlocked"] == {"app": ["six"]}


def test_a_wheel_without_metadata_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    done = subprocess.run([sys.executable, str(GRAPH), str(tmp_path)], stderr=subprocess.PIPE, text=True)
    assert done.returncode != 0 and "expected one *.dist-info/METADATA" in done.stderr
