"""Test helper: run the programs of tools/oci (and of areas built on it) as the rules do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def tool_runner(*dirs: Path) -> Runner:
    """run(name, *args, check=True): <dir>/<name>.py of the first dir that has it, with this
    interpreter; with check, a non-zero exit fails the test showing both outputs."""

    def run(name: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        script = next((d / f"{name}.py" for d in dirs if (d / f"{name}.py").is_file()), None)
        if script is None:
            raise AssertionError(f"no {name}.py in {[str(d) for d in dirs]}")
        # The program imports by path from the workspace root, as this process does.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        proc = subprocess.run([sys.executable, str(script), *args], text=True, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if check and proc.returncode != 0:
            raise AssertionError(f"{name}.py {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc

    return run
