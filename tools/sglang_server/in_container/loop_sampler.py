"""Samples what the SGLang HTTP server's threads run, from inside the server.

py-spy samples from outside at the lab's lower priority and records a thread only while it holds
the GIL, and its chrometrace keeps a stack open until that thread's next recorded sample: a slow
/health probe's culprit is then a candidate, not a fact. This SGLang general plugin (entry point
`lab_loop_sampler`, loaded with SGLANG_PLUGINS=...,lab_loop_sampler) runs a thread in the server,
at the server's priority, that every LAB_LOOP_SAMPLE_MS (default 2) reads the CPU clock of each
Python thread and appends one JSON line to the file named by LAB_LOOP_SAMPLES, naming every thread
that ran since the previous sample (the event loop, the main thread, whenever it ran at all;
another thread once it ran MIN_OTHER_CPU_MS) with its innermost Python frames:

    {"t": <time.monotonic()>, "wait_ms": 0.04,
     "threads": [{"name": "loop", "cpu_ms": 1.93, "stack": ["f (file.py:12)", ...]}, ...]}

`cpu_ms` is the thread's CPU time since the previous sample (its pthread CPU clock: exact, kernel
time included); `wait_ms` how late the sample is: the sampler waits for the GIL after its sleep,
so a long wait is a single call holding the GIL, and each stack is where its thread is after it.
`stack` is innermost first, at most MAX_FRAMES frames, empty when the thread had no Python frame
of its own running (the loop inside uvloop's run). Only the process started as the server
records (load_plugins also runs in the spawned scheduler).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import threading
import time

SAMPLES_ENV = "LAB_LOOP_SAMPLES"
PERIOD_ENV = "LAB_LOOP_SAMPLE_MS"
DEFAULT_PERIOD_MS = 2.0
MAX_FRAMES = 12
# Another thread is named once it ran this long between two samples.
MIN_OTHER_CPU_MS = 0.2
THREAD_NAME = "lab-loop-sampler"
# The event-loop thread's name in the records (lab/attribution.py reads it as SAMPLED_LOOP).
LOOP_NAME = "loop"


def register() -> None:
    """Plugin entry point: start sampling, if asked for and in the server process (whose main
    thread runs the event loop)."""
    path = os.environ.get(SAMPLES_ENV)
    if not path or multiprocessing.parent_process() is not None:
        return
    period_ms = float(os.environ.get(PERIOD_ENV, DEFAULT_PERIOD_MS))
    sampler = Sampler(threading.main_thread().ident, os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644),
                      period_ms / 1000.0)
    threading.Thread(target=sampler.run, name=THREAD_NAME, daemon=True).start()


def frame_names(frame, limit: int = MAX_FRAMES) -> list[str]:
    """'function (file:line)' of `frame` and its callers, innermost first, up to the loop's own
    entry (frames of uvloop's and asyncio's runners are not the loop's work)."""
    names = []
    while frame is not None and len(names) < limit:
        code = frame.f_code
        if code.co_name in ("run", "run_until_complete", "run_forever") and (
            "uvloop" in code.co_filename or code.co_filename.endswith(("asyncio/runners.py", "asyncio/base_events.py"))
        ):
            break
        names.append(f"{code.co_qualname} ({code.co_filename.rsplit('/', 2)[-1]}:{frame.f_lineno})")
        frame = frame.f_back
    return names


class Sampler:
    """Writes, per sample, the threads that ran since the previous one: CPU time and frames."""

    def __init__(self, loop_thread_id: int, fd: int, period_s: float) -> None:
        self.loop_thread_id = loop_thread_id
        self.fd = fd
        self.period_s = period_s
        self._clocks: dict[int, int] = {}
        self._cpu_ns: dict[int, int] = {}

    def _cpu_since_last(self, ident: int) -> int:
        """ns the thread ran since the previous sample (0 the first time it is seen)."""
        if ident not in self._clocks:
            self._clocks[ident] = time.pthread_getcpuclockid(ident)
        now = time.clock_gettime_ns(self._clocks[ident])
        last = self._cpu_ns.get(ident, now)
        self._cpu_ns[ident] = now
        return now - last

    def sample(self, due: float) -> list[dict]:
        """The threads that ran since the previous sample; also written as one line."""
        frames = sys._current_frames()
        now = time.monotonic()
        names = {thread.ident: thread.name for thread in threading.enumerate()}
        ran = []
        for ident, frame in frames.items():
            if ident == threading.get_ident():
                continue
            try:
                cpu_ns = self._cpu_since_last(ident)
            except OSError:
                continue  # the thread is exiting
            is_loop = ident == self.loop_thread_id
            if cpu_ns > 0 if is_loop else cpu_ns >= MIN_OTHER_CPU_MS * 1e6:
                ran.append({"name": LOOP_NAME if is_loop else names.get(ident, str(ident)),
                            "cpu_ms": round(cpu_ns / 1e6, 3), "stack": frame_names(frame)})
        for ident in set(self._clocks) - set(frames):  # exited threads
            del self._clocks[ident], self._cpu_ns[ident]
        if ran:
            line = json.dumps({"t": round(now, 6), "wait_ms": round((now - due) * 1000.0, 3), "threads": ran})
            os.write(self.fd, (line + "\n").encode())
        return ran

    def run(self) -> None:
        self.sample(time.monotonic())  # every thread's clock base
        while True:
            due = time.monotonic() + self.period_s
            time.sleep(self.period_s)  # returns once it has the GIL again: a holder delays it
            try:
                self.sample(due)
            except OSError:
                return  # the file is gone: the server is exiting
