"""Measures what an image request costs the HTTP server process: the longest stretch its GIL is
held (what the event loop can wait for) while the multimodal processor handles one request, with
the processor in this process (v3 before the pool: `process_mm_data_async` on the loop, the
processor on its worker thread) and in offload-process.diff's `MultimodalProcessPool` (a child
decodes and processes; this process reads descriptors). Also the child's resident memory ready,
at its peak during the request, and idle after it.

A ticker thread sleeps 1 ms in a loop; its worst gap is the longest time it could not get the
GIL back. The processor is the GLM-V-class one of glm_vision.py; the images are --count
--side x --side PNGs of seeded stripes (large images, modest bodies).

  PYTHONPATH=.:<tree>:<torchvision shim> python bench_mm_process.py --count 16 --side 3000

Not collected by pytest (no test_ prefix); its numbers are quoted in README.md.

One child serves the warm-up and the measured request, so its ready, peak and idle memory are
one process's: the bench turns off the recycling of a grown child
(SGLANG_OFFLOAD_CHILD_GROWTH_LIMIT_MB, read when offload_process is imported) unless it is set.
"""

from __future__ import annotations

import os

os.environ.setdefault("SGLANG_OFFLOAD_CHILD_GROWTH_LIMIT_MB", str(1 << 30))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import math  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402

import glm_vision  # noqa: E402
from bench_gil_tail import worst_gil_gap


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


class _PeakWatcher:
    """The child's VmHWM, read every 20 ms until stop() (the child may exit at the end)."""

    def __init__(self, pid: int) -> None:
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(pid,))
        self._thread.start()

    def _watch(self, pid: int) -> None:
        while not self._stop.wait(0.02):
            try:
                self.peak_kib = max(self.peak_kib, _status_kib(pid, "VmHWM"))
            except OSError:
                return

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak_kib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=16)
    parser.add_argument("--side", type=int, default=3000)
    parser.add_argument("--child-only", action="store_true",
                        help="skip the in-process arm: the host then holds only the child's memory"
                        " (64 x 9 MP needs it on a 24 GiB host)")
    args = parser.parse_args()

    from glm_tokenizer import build_tokenizer
    from sglang.srt.managers.mm_utils import discard_mm_inputs_shm

    vision = glm_vision.build(Path(tempfile.mkdtemp(prefix="glm_vision_")), build_tokenizer())
    images = [glm_vision.data_url(glm_vision.stripes_png(args.side, args.side, seed))
              for seed in range(args.count)]
    body_mb = sum(len(u) for u in images) / 1e6
    obj = glm_vision.request(images)
    kwargs = glm_vision.mm_kwargs(obj)
    print(f"request: {args.count} x {args.side}x{args.side} PNG, {body_mb:.1f} MB of base64")

    if not args.child_only:
        output, total, gap = worst_gil_gap(lambda: asyncio.run(vision.processor.process_mm_data_async(**kwargs)))
        features = sum(i.feature.numel() * i.feature.element_size() for i in output.mm_items)
        print(f"in-process (worker thread): {total:.2f} s, worst GIL gap {gap * 1000:.0f} ms, "
              f"features {features / 2**20:.0f} MiB")
        del output

    pool = vision.pool(workers=1, max_queued=0)
    try:
        async def never():
            raise RuntimeError("fell back to in-process")

        warm, _, _ = worst_gil_gap(lambda: asyncio.run(pool.process(
            glm_vision.mm_kwargs(glm_vision.request([images[0]])), 1, never)))
        discard_mm_inputs_shm(warm)
        (child,) = [p for p in pool._processes if not p.closed]
        ready_kib = _status_kib(child.pid, "VmRSS")
        peak = _PeakWatcher(child.pid)
        output, total, gap = worst_gil_gap(lambda: asyncio.run(pool.process(kwargs, args.count, never)))
        peak_kib = peak.stop()
        segments = sum(math.prod(f.shape) * f.dtype.itemsize for i in output.mm_items
                       for f in [i.feature] if hasattr(f, "shm_name"))
        discard_mm_inputs_shm(output)
        del output
        print(f"child process: {total:.2f} s, worst GIL gap {gap * 1000:.0f} ms, "
              f"features in /dev/shm segments {segments / 2**20:.0f} MiB")
        live = [p for p in pool._processes if not p.closed]
        after = (f"idle after {_status_kib(child.pid, 'VmRSS') / 1024:.0f} MiB" if child in live
                 else "replaced after the request (SGLANG_OFFLOAD_CHILD_GROWTH_LIMIT_MB is set)")
        # VmHWM: resident pages at their peak, the segments the child mapped to write included.
        print(f"child RSS: ready {ready_kib / 1024:.0f} MiB, peak {peak_kib / 1024:.0f} MiB, {after}")
    finally:
        pool.close()
        vision.processor.shutdown()
    left = [n for n in os.listdir("/dev/shm") if n.startswith("sgl_shm_mmproc")]
    print(f"/dev/shm segments left: {len(left)}")


if __name__ == "__main__":
    main()
