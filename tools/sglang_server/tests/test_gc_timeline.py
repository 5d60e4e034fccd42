"""The GC timeline plugin: what it writes for a collection, what it leaves out, where it records."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

IN_CONTAINER = Path(__file__).resolve().parents[1] / "in_container"
sys.path.insert(0, str(IN_CONTAINER))

import gc_timeline  # noqa: E402


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _collect_recorded(path: Path, generation: int, min_pause_ms: float) -> None:
    """One gc.collect(generation) with a Recorder writing to `path`."""
    recorder = gc_timeline.Recorder(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), min_pause_ms)
    gc.callbacks.append(recorder)
    try:
        gc.collect(generation)
    finally:
        gc.callbacks.remove(recorder)
        os.close(recorder.fd)


def test_a_full_collection_is_written_with_its_monotonic_start(tmp_path: Path):
    path = tmp_path / "server.gc.jsonl"
    before = time.monotonic()
    _collect_recorded(path, 2, min_pause_ms=0.0)
    after = time.monotonic()
    [line] = [line for line in _lines(path) if line["generation"] == 2]
    assert before <= line["start"] <= line["start"] + line["ms"] / 1000.0 <= after
    assert line["pid"] == os.getpid() and set(line) == {"pid", "generation", "start", "ms", "collected"}


def test_pauses_under_the_threshold_are_not_written(tmp_path: Path):
    path = tmp_path / "server.gc.jsonl"
    _collect_recorded(path, 0, min_pause_ms=3_600_000)
    assert path.read_text() == ""


def test_the_entry_point_records_in_the_server_process_only(tmp_path: Path):
    """Through importlib's entry points, as SGLang's load_plugins finds it: the process started
    as the server records; a multiprocessing child (the scheduler) does not."""
    path = tmp_path / "server.gc.jsonl"
    script = f"""
import gc, multiprocessing, sys
from importlib.metadata import entry_points

def child():
    [ep] = [ep for ep in entry_points(group="sglang.srt.plugins") if ep.name == "lab_gc_timeline"]
    ep.load()()
    gc.collect(2)

if __name__ == "__main__":
    [ep] = [ep for ep in entry_points(group="sglang.srt.plugins") if ep.name == "lab_gc_timeline"]
    ep.load()()
    gc.callbacks[-1].min_pause_ms = 0.0
    gc.collect(2)
    process = multiprocessing.get_context("spawn").Process(target=child)
    process.start()
    process.join()
    sys.exit(process.exitcode)
"""
    env = {**os.environ, "PYTHONPATH": str(IN_CONTAINER), gc_timeline.TIMELINE_ENV: str(path)}
    main = tmp_path / "server_main.py"  # a file: a spawned child imports the main module again
    main.write_text(script)
    run = subprocess.run([sys.executable, str(main)], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    pids = {line["pid"] for line in _lines(path)}
    assert len(pids) == 1 and any(line["generation"] == 2 for line in _lines(path))
