"""Measure what one heartbeat of the event-loop stall dump costs the loop.

The heartbeat runs once a second on the event loop.  Each tick reads the
monotonic clock and the loop thread's CPU clock, stores them, and re-arms
faulthandler.dump_traceback_later (which cancels and joins faulthandler's
previous watchdog thread, then starts a new one: most of the cost).  This
script arms the module under test (the sglang tree first on sys.path) on a
real loop with the default thresholds, then times StallDumper.tick() on the
loop thread, one tick every --gap-ms so faulthandler's watchdog thread is
settled in its wait as it is between real ticks.  It also times the
faulthandler re-arm alone and the tick's bookkeeping without it.

Prints median, p90, p99, mean and max in microseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import os
import platform
import statistics
import sys
import time
from typing import Callable, Dict, List

from stall_dump_locate import load_stall_dump_module, locate


def _percentile(samples: List[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def _stats(samples_ns: List[int]) -> Dict[str, float]:
    us = [s / 1000 for s in samples_ns]
    return {
        "median": statistics.median(us),
        "p90": _percentile(us, 90),
        "p99": _percentile(us, 99),
        "mean": statistics.fmean(us),
        "max": max(us),
    }


async def _time_calls(fn: Callable[[], None], ticks: int, gap_s: float) -> List[int]:
    samples = []
    for _ in range(ticks):
        start = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - start)
        await asyncio.sleep(gap_s)
    return samples


async def _bench(ticks: int, gap_s: float) -> Dict[str, Dict[str, float]]:
    module = load_stall_dump_module()
    dumper = module.install(asyncio.get_running_loop(), 30, 60)
    if dumper is None:
        raise RuntimeError("install() did not arm; see the warning above")
    timeout = dumper.config.stall_seconds + 3.0
    results = {}
    results["tick (full heartbeat work)"] = _stats(
        await _time_calls(dumper.tick, ticks, gap_s)
    )
    results["faulthandler re-arm alone"] = _stats(
        await _time_calls(
            lambda: faulthandler.dump_traceback_later(timeout, file=2), ticks, gap_s
        )
    )
    # The tick with the re-arm replaced by a no-op: clocks and bookkeeping.
    real_arm = dumper._arm_backstop
    dumper._arm_backstop = lambda: None
    try:
        results["tick without the re-arm"] = _stats(
            await _time_calls(dumper.tick, ticks, gap_s)
        )
    finally:
        dumper._arm_backstop = real_arm
    dumper.stop()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ticks", type=int, default=1000, help="samples per series")
    parser.add_argument(
        "--gap-ms", type=float, default=5.0, help="pause between samples (ms)"
    )
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="uvloop")
    args = parser.parse_args()
    if args.ticks < 10:
        parser.error("--ticks must be at least 10 for a p99")
    print(f"module: {locate()}")
    print(
        f"python {platform.python_version()} on {platform.machine()}, "
        f"{os.cpu_count()} CPUs, loadavg {os.getloadavg()[0]:.2f}, loop={args.loop}, "
        f"{args.ticks} samples per series, {args.gap_ms:g} ms apart"
    )
    if args.loop == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            results = runner.run(_bench(args.ticks, args.gap_ms / 1000))
    else:
        results = asyncio.run(_bench(args.ticks, args.gap_ms / 1000))
    for name, s in results.items():
        print(
            f"{name:30s} median {s['median']:7.1f} us  p90 {s['p90']:7.1f} us  "
            f"p99 {s['p99']:7.1f} us  mean {s['mean']:7.1f} us  max {s['max']:8.1f} us"
        )
    median = results["tick (full heartbeat work)"]["median"]
    print(
        f"at one tick per second the loop spends {median / 1e4:.4f}% of its time "
        "in the heartbeat (median)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
