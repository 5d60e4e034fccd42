"""How long one re-arm of the stall dump's backstop holds the GIL, with the CPUs busy.

faulthandler.dump_traceback_later cancels its previous timer by joining that timer's C thread
with the GIL held: the join lasts until the scheduler runs the thread, so with every CPU busy
each re-arm stops every Python thread, the event loop's too. signal.setitimer (the backstop
the module uses) is one system call. Prints p50 / p99 / max per method and load:

  python3 bench_backstop_rearm.py --hogs 0 16 --rearms 200
"""

from __future__ import annotations

import argparse
import faulthandler
import signal
import subprocess
import sys
import time

METHODS = {
    "faulthandler.dump_traceback_later": lambda: faulthandler.dump_traceback_later(60.0),
    "signal.setitimer(ITIMER_REAL)": lambda: signal.setitimer(signal.ITIMER_REAL, 60.0),
}
STOP = {
    "faulthandler.dump_traceback_later": faulthandler.cancel_dump_traceback_later,
    "signal.setitimer(ITIMER_REAL)": lambda: signal.setitimer(signal.ITIMER_REAL, 0),
}


def measure(rearm, rearms: int) -> list[float]:
    times = []
    for _ in range(rearms):
        start = time.perf_counter()
        rearm()
        times.append(time.perf_counter() - start)
        time.sleep(0.02)  # the C thread is waiting again, as between the watcher's re-arms
    return sorted(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hogs", type=int, nargs="+", default=[0, 16], help="busy processes at nice 0")
    parser.add_argument("--rearms", type=int, default=200)
    args = parser.parse_args()
    for hogs in args.hogs:
        procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
        try:
            time.sleep(0.5)
            for name, rearm in METHODS.items():
                t = measure(rearm, args.rearms)
                STOP[name]()
                p99 = t[min(len(t) - 1, int(len(t) * 0.99))]
                print(f"hogs {hogs:2d}  {name:36s} p50 {t[len(t) // 2] * 1e3:7.3f} ms"
                      f"  p99 {p99 * 1e3:7.3f} ms  max {t[-1] * 1e3:7.3f} ms", flush=True)
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    main()
