"""Measure the event loop's wall time per stall-dump heartbeat tick.

Arms the module under test (the sglang tree first on sys.path) on a real loop
with the default thresholds and a short heartbeat period (--period-ms, so a
thousand ticks take seconds, not a quarter of an hour), then keeps the loop
busy with a pacer: a call_soon callback that reads perf_counter_ns and
re-schedules itself, so consecutive pacer calls are one loop iteration apart.
An iteration in which the heartbeat ran is longer by what the tick cost the
loop -- timer bookkeeping, the callback, its rescheduling and anything it
waits for with the GIL held -- whatever the loop implementation.  The tick's
cost is that iteration's length minus the median iteration without a tick.

The pacer knows an iteration held a tick because the dumper replaced its
``_beat`` record (every version of the module keeps one).  A heartbeat that
runs as a task (asyncio.sleep) spends a second, short iteration waking the
task; only the iteration that ran the tick is counted.

Also reports iterations longer than --slow-us that held no tick: other stalls
on the loop during the run (the watcher thread's faulthandler re-arm, which
holds the GIL, garbage collection, preemption by other processes).

Prints median, p99 and max in microseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from typing import Dict, List

from stall_dump_locate import load_stall_dump_module, locate

TARGET_MEDIAN_US = 2.0
TARGET_P99_US = 20.0


def _percentile(samples: List[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def _stats(us: List[float]) -> Dict[str, float]:
    return {
        "n": len(us),
        "median": statistics.median(us),
        "p99": _percentile(us, 99),
        "max": max(us),
    }


class _BareHeartbeat:
    """The floor: a call_later callback that only stores a timestamp."""

    def __init__(self, loop: asyncio.AbstractEventLoop, period: float) -> None:
        self._beat = time.monotonic()
        self._period = period
        self._call_later = loop.call_later
        self._call_later(period, self._tick)

    def _tick(self) -> None:
        self._beat = time.monotonic()
        self._call_later(self._period, self._tick)


async def _measure(
    sources: Dict[str, object], ticks: int, slow_us: float
) -> Dict[str, object]:
    """Pace the loop until every source replaced its `_beat` `ticks` times."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    names = list(sources)
    objs = [sources[n] for n in names]
    tick_gaps: Dict[str, List[int]] = {n: [] for n in names}
    # A sample of tick-free iterations for the baseline: the first after each
    # tick plus every 1000th.
    plain_gaps: List[int] = []
    slow_plain: List[int] = []
    last = [o._beat for o in objs]
    state = {"prev": 0, "count": 0, "pending": False}
    clock = time.perf_counter_ns
    slow_ns = slow_us * 1000

    def pace() -> None:
        now = clock()
        gap = now - state["prev"]
        ticked = [i for i, o in enumerate(objs) if o._beat is not last[i]]
        for i in ticked:
            last[i] = objs[i]._beat
        if len(ticked) == 1:  # an iteration holding two ticks counts for neither
            tick_gaps[names[ticked[0]]].append(gap)
        if ticked:
            state["pending"] = True
            if min(len(g) for g in tick_gaps.values()) >= ticks:
                done.set_result(None)
                return
        else:
            state["count"] += 1
            if gap > slow_ns:
                slow_plain.append(gap)
            if state["count"] % 1000 == 0 or state["pending"]:
                plain_gaps.append(gap)
                state["pending"] = False
        state["prev"] = clock()
        loop.call_soon(pace)

    state["prev"] = clock()
    loop.call_soon(pace)
    started = time.monotonic()
    await done
    seconds = time.monotonic() - started
    base = statistics.median(plain_gaps)
    return {
        "ticks": {
            n: _stats([(g - base) / 1000 for g in gaps]) for n, gaps in tick_gaps.items()
        },
        "iteration": _stats([g / 1000 for g in plain_gaps]),
        "slow": [g / 1000 for g in slow_plain],
        "iterations": state["count"] + sum(len(g) for g in tick_gaps.values()),
        "seconds": seconds,
    }


FLOOR = "floor: bare call_later storing a timestamp"
MODULE = "stall dump heartbeat (module under test)"


async def _bench(module, period: float, ticks: int, slow_us: float):
    """Both heartbeats at once, under the same load; the floor's period is
    not a divisor of the module's so their ticks rarely share an iteration."""
    loop = asyncio.get_running_loop()
    bare = _BareHeartbeat(loop, period * 0.73)
    dumper = module.install(loop, 30, 60)
    if dumper is None:
        raise RuntimeError("install() did not arm; see the warning above")
    try:
        # Skip the first ticks: the pacer would start mid-iteration.
        await asyncio.sleep(period * 1.5)
        return await _measure({FLOOR: bare, MODULE: dumper}, ticks, slow_us)
    finally:
        dumper.stop()
        bare._call_later = lambda *_: None  # ends its chain


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ticks", type=int, default=1000, help="ticks measured")
    parser.add_argument(
        "--period-ms", type=float, default=10.0, help="heartbeat period (ms)"
    )
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="uvloop")
    parser.add_argument(
        "--slow-us",
        type=float,
        default=TARGET_P99_US,
        help="report tick-free iterations longer than this (us)",
    )
    args = parser.parse_args()
    if args.ticks < 100:
        parser.error("--ticks must be at least 100 for a p99")
    module = load_stall_dump_module()
    module._HEARTBEAT_SECONDS = args.period_ms / 1000
    print(f"module: {locate()}")
    print(
        f"python {platform.python_version()} on {platform.machine()}, "
        f"{os.cpu_count()} CPUs, loadavg {os.getloadavg()[0]:.2f}, loop={args.loop}, "
        f"{args.ticks} ticks {args.period_ms:g} ms apart"
    )
    period = args.period_ms / 1000
    if args.loop == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            r = runner.run(_bench(module, period, args.ticks, args.slow_us))
    else:
        r = asyncio.run(_bench(module, period, args.ticks, args.slow_us))
    print("loop wall time per tick (iteration with the tick - median iteration without):")
    for name, t in r["ticks"].items():
        print(
            f"  {name:42s} median {t['median']:8.2f} us  p99 {t['p99']:9.2f} us  "
            f"max {t['max']:9.2f} us  (n={t['n']})"
        )
    it = r["iteration"]
    print(
        f"loop iteration without a tick: median {it['median']:.2f} us, p99 "
        f"{it['p99']:.2f} us; {len(r['slow'])} of {r['iterations']} iterations in "
        f"{r['seconds']:.1f} s took > {args.slow_us:g} us with no tick"
        + (f" (max {max(r['slow']):.1f} us)" if r["slow"] else "")
    )
    tick, floor = r["ticks"][MODULE], r["ticks"][FLOOR]
    met = tick["median"] <= TARGET_MEDIAN_US and tick["p99"] <= TARGET_P99_US
    print(
        f"target median <= {TARGET_MEDIAN_US:g} us, p99 <= {TARGET_P99_US:g} us: "
        + ("met" if met else "NOT met")
        + f"; module minus floor: median {tick['median'] - floor['median']:+.2f} us,"
        f" p99 {tick['p99'] - floor['p99']:+.2f} us"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
