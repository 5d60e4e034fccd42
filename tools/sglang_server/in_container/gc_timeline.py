"""Records the cyclic garbage collector's pauses in the SGLang HTTP server process.

A collection runs in whichever thread allocated past the threshold and holds the GIL for its
whole length, so a /health probe that waits through one shows up in a py-spy profile only as
an allocation frame of some thread. This SGLang general plugin (entry point
`lab_gc_timeline`, loaded with SGLANG_PLUGINS=...,lab_gc_timeline) appends one JSON line per
collection of at least MIN_PAUSE_MS to the file named by LAB_GC_TIMELINE:

    {"pid": 12, "generation": 2, "start": <time.monotonic()>, "ms": 41.3, "collected": 0}

`start` is CLOCK_MONOTONIC, shared with the lab's probes. Only the process started as the
server records (load_plugins also runs in the spawned scheduler, a multiprocessing child).
The callback allocates nothing but the line and writes it with one os.write on an O_APPEND
descriptor: it takes no lock a collecting thread could hold. It reads nothing that walks the
heap: gc.get_freeze_count() walks every frozen object (6 ms a call for 760 K objects on a quiet
host), and in the one lab run whose recorder called it, py-spy put 647 ms of the loop's slow
probes on that call.
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import time

TIMELINE_ENV = "LAB_GC_TIMELINE"
MIN_PAUSE_MS = 1.0


def register() -> None:
    """Plugin entry point: start recording, if asked for and in the server process."""
    path = os.environ.get(TIMELINE_ENV)
    if not path or multiprocessing.parent_process() is not None:
        return
    gc.callbacks.append(Recorder(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)))


class Recorder:
    """A gc.callbacks entry writing one line per collection of at least MIN_PAUSE_MS."""

    def __init__(self, fd: int, min_pause_ms: float = MIN_PAUSE_MS) -> None:
        self.fd = fd
        self.min_pause_ms = min_pause_ms
        self.pid = os.getpid()
        self._started = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.monotonic()
            return
        ms = (time.monotonic() - self._started) * 1000.0
        if ms < self.min_pause_ms or os.getpid() != self.pid:  # a forked child inherits the callback
            return
        line = json.dumps({"pid": self.pid, "generation": info.get("generation"), "start": self._started,
                           "ms": round(ms, 3), "collected": info.get("collected")})
        os.write(self.fd, (line + "\n").encode())
