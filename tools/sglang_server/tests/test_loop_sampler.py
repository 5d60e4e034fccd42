"""The loop sampler plugin: the loop thread's frames and CPU time, nothing for an idle loop, and
the entry point SGLang's load_plugins calls."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

IN_CONTAINER = Path(__file__).resolve().parents[1] / "in_container"
sys.path.insert(0, str(IN_CONTAINER))

import loop_sampler  # noqa: E402


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def spin_until(spinning: threading.Event, stop: threading.Event) -> None:
    spinning.set()
    while not stop.is_set():
        sum(range(1000))


def _sampler(path: Path, thread: threading.Thread) -> loop_sampler.Sampler:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    return loop_sampler.Sampler(thread.ident, fd, 0.002)


def test_a_sample_names_the_loops_innermost_frame_and_its_cpu_time(tmp_path: Path):
    spinning, stop = threading.Event(), threading.Event()
    loop = threading.Thread(target=spin_until, args=(spinning, stop))
    loop.start()
    sampler = _sampler(tmp_path / "loop.jsonl", loop)
    try:
        sampler.sample(time.monotonic())  # the clocks' base
        spinning.wait()
        ran = []
        while not ran:  # until the spinning thread's clock moved
            ran = sampler.sample(time.monotonic())
    finally:
        stop.set()
        loop.join()
        os.close(sampler.fd)
    line = _lines(tmp_path / "loop.jsonl")[-1]
    assert set(line) == {"t", "wait_ms", "threads"} and line["threads"] == ran
    [entry] = [entry for entry in ran if entry["name"] == "loop"]
    assert entry["stack"][0].startswith("spin_until (test_loop_sampler.py:")
    assert entry["cpu_ms"] > 0


def test_a_thread_that_did_not_run_is_not_written(tmp_path: Path):
    blocked = threading.Event()
    waiter = threading.Thread(target=blocked.wait, name="waiter")
    waiter.start()
    path = tmp_path / "loop.jsonl"
    sampler = _sampler(path, waiter)
    try:
        # Once the thread waits, its CPU clock stops: sample until it is not named.
        while any(entry["name"] == "loop" for entry in sampler.sample(time.monotonic())):
            pass
        assert all(entry["name"] != "loop" for entry in sampler.sample(time.monotonic()))
    finally:
        blocked.set()
        waiter.join()
        os.close(sampler.fd)


def test_another_thread_is_named_with_its_cpu_time(tmp_path: Path):
    blocked, spinning, stop = threading.Event(), threading.Event(), threading.Event()
    loop = threading.Thread(target=blocked.wait)
    worker = threading.Thread(target=spin_until, args=(spinning, stop), name="worker")
    loop.start()
    worker.start()
    sampler = _sampler(tmp_path / "loop.jsonl", loop)
    try:
        spinning.wait()
        sampler.sample(time.monotonic())
        ran = []
        while not any(entry["name"] == "worker" for entry in ran):
            ran = sampler.sample(time.monotonic())
    finally:
        stop.set()
        blocked.set()
        worker.join()
        loop.join()
        os.close(sampler.fd)
    [entry] = [entry for entry in ran if entry["name"] == "worker"]
    assert entry["cpu_ms"] >= loop_sampler.MIN_OTHER_CPU_MS
    assert entry["stack"][0].startswith("spin_until (")


def test_the_runners_frames_are_not_the_loops_work():
    import asyncio

    async def handler() -> list[str]:
        return loop_sampler.frame_names(sys._getframe())

    names = asyncio.run(handler())
    assert names[0].startswith("test_the_runners_frames_are_not_the_loops_work.<locals>.handler (")
    assert not any(name.startswith(("Runner.run", "run_until_complete", "BaseEventLoop.run_forever"))
                   for name in names)


def test_the_entry_point_samples_the_server_process_main_thread(tmp_path: Path):
    """Through importlib's entry points, as SGLang's load_plugins finds it: the main thread's busy
    function shows up in the file while the process runs."""
    path = tmp_path / "server.loop.jsonl"
    script = f"""
import json, sys
from importlib.metadata import entry_points

def busy_in_main():
    while True:
        sum(range(1000))
        try:
            lines = open({str(path)!r}).read().splitlines()
        except FileNotFoundError:
            continue
        if any(entry["name"] == "loop" and entry["stack"][:1] and entry["stack"][0].startswith("busy_in_main")
               for line in lines for entry in json.loads(line)["threads"]):
            return

[ep] = [ep for ep in entry_points(group="sglang.srt.plugins") if ep.name == "lab_loop_sampler"]
ep.load()()
busy_in_main()
"""
    env = {**os.environ, "PYTHONPATH": str(IN_CONTAINER), loop_sampler.SAMPLES_ENV: str(path)}
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
