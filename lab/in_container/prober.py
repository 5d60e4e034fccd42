"""Polls GET /health on a fixed period and writes one JSON line per probe.

Runs as its own process beside the server (same network namespace), like an orchestrator's
liveness probe: a new TCP connection per probe, probes never overlap, and a probe that is
still waiting when the next one is due delays it (the next starts when it returns). Each line:

    {"start": <monotonic s>, "end": <monotonic s>, "ms": <latency>, "status": <HTTP status or 0>,
     "error": <str or null>, "loop_sched": [[cpu_ns, runqueue_ns, slices], [...]] or null,
     "prober_sched": [[cpu_ns, runqueue_ns, slices], [...]] or null,
     "loop_stat": [[minor_faults, major_faults, user_ms, kernel_ms], [...]] or null,
     "steal": [[cpu0_ms, cpu1_ms, ...], [...]] or null}

With --loop-pid, "loop_sched" is the server's event-loop thread's /proc/<pid>/task/<pid>/schedstat
(its main thread runs uvicorn's loop) read just before and just after the probe: the growth of
the runqueue field is time the loop was runnable but had no CPU (lab/results.py splits it off);
null when it could not be read (the server gone). "prober_sched" is the prober's own thread's
schedstat around the same probe: a probe can also wait because the prober itself had no CPU
(sending the request or reading the answer), which is the host's doing as much as the loop's wait.
"loop_stat" is the loop thread's /proc/<pid>/task/<pid>/stat around the probe: its page faults
(exact counts) and its user and kernel time (in clock ticks, so sampled at 1/CLK_TCK): loop CPU
time spent in the kernel (faulting pages in, reclaiming memory) is not the loop's Python work.

"steal" is each CPU's steal time from /proc/stat around the probe (with --loop-pid): time the
hypervisor ran something else while this machine's virtual CPU was ready to run. The guest sees
it nowhere else: a thread whose CPU was stolen still counts as running in its schedstat. Counted
in clock ticks (10 ms at CLK_TCK 100), so a count of ticks, like the kernel time.

CLOCK_MONOTONIC is shared by all processes of the machine/container, so the session lines
probes up with its own request timestamps. SIGTERM stops it after flushing.

    python3 prober.py --port 30000 --interval-ms 200 --timeout-s 60 --out probes.jsonl [--loop-pid PID]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path


class _Stop(Exception):
    pass


def _raise_stop(signum, frame) -> None:
    raise _Stop()


def read_schedstat(path: Path) -> list[int] | None:
    """[time on CPU ns, time waiting on a runqueue ns, timeslices], or None if unreadable."""
    try:
        return [int(field) for field in path.read_text().split()[:3]]
    except (OSError, ValueError):
        return None


_MS_PER_TICK = 1000 // os.sysconf("SC_CLK_TCK")  # stat's user and kernel times are in ticks


def read_stat(path: Path) -> list[int] | None:
    """[minor faults, major faults, user ms, kernel ms] from a /proc/.../stat, or None if
    unreadable. The fields after the command name (which may hold spaces) are counted from its
    closing parenthesis: minflt is field 10, majflt 12, utime 14, stime 15 (proc(5))."""
    try:
        text = path.read_text()
        fields = text[text.rindex(")") + 2 :].split()
        return [int(fields[7]), int(fields[9]), int(fields[11]) * _MS_PER_TICK,
                int(fields[12]) * _MS_PER_TICK]
    except (OSError, ValueError, IndexError):
        return None


def read_steal(path: Path = Path("/proc/stat")) -> list[int] | None:
    """Each CPU's steal time in ms (the 8th value of its cpuN line, in clock ticks), or None."""
    try:
        return [int(line.split()[8]) * _MS_PER_TICK for line in path.read_text().splitlines()
                if line.startswith("cpu") and line[3:4].isdigit()]
    except (OSError, ValueError, IndexError):
        return None


# This thread's own schedstat (the prober is single-threaded).
OWN_SCHEDSTAT = Path("/proc/thread-self/schedstat")


def probe_once(host: str, port: int, timeout_s: float, schedstat: Path | None = None) -> dict:
    # Read outside the timed window, so the probe's latency does not include the reads.
    stat = schedstat.with_name("stat") if schedstat else None
    stat_before = read_stat(stat) if stat else None
    steal_before = read_steal() if schedstat else None
    before = read_schedstat(schedstat) if schedstat else None
    own_before = read_schedstat(OWN_SCHEDSTAT) if schedstat else None
    start = time.monotonic()
    status, error = 0, None
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", "/health", headers={"Connection": "close"})
        response = conn.getresponse()
        response.read()
        status = response.status
    except (OSError, http.client.HTTPException) as err:
        error = f"{type(err).__name__}: {err}" if not isinstance(err, socket.timeout) else "timeout"
    finally:
        conn.close()
    end = time.monotonic()
    sample = {"start": start, "end": end, "ms": (end - start) * 1000.0, "status": status, "error": error}
    if schedstat is not None:
        own_after = read_schedstat(OWN_SCHEDSTAT)
        after = read_schedstat(schedstat)
        sample["loop_sched"] = [before, after] if before and after else None
        sample["prober_sched"] = [own_before, own_after] if own_before and own_after else None
        stat_after = read_stat(stat)
        sample["loop_stat"] = [stat_before, stat_after] if stat_before and stat_after else None
        steal_after = read_steal()
        sample["steal"] = [steal_before, steal_after] if steal_before and steal_after else None
    return sample


def run(host: str, port: int, interval_s: float, timeout_s: float, out: Path, loop_pid: int | None = None) -> int:
    signal.signal(signal.SIGTERM, _raise_stop)
    schedstat = Path(f"/proc/{loop_pid}/task/{loop_pid}/schedstat") if loop_pid else None
    count = 0
    with out.open("a", encoding="utf-8") as sink:
        try:
            next_due = time.monotonic()
            while True:
                delay = next_due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                sample = probe_once(host, port, timeout_s, schedstat)
                sink.write(json.dumps(sample) + "\n")
                sink.flush()
                count += 1
                next_due = max(sample["start"] + interval_s, sample["end"])
        except (_Stop, KeyboardInterrupt):
            pass
    return count


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--interval-ms", type=float, default=200.0, help="probe period (default: 200)")
    parser.add_argument("--timeout-s", type=float, default=60.0,
                        help="give up on one probe after this long and record a miss (default: 60)")
    parser.add_argument("--out", type=Path, required=True, help="JSON-lines file to append to")
    parser.add_argument("--loop-pid", type=int,
                        help="the server's pid: record its main (event-loop) thread's schedstat around each probe")
    args = parser.parse_args(argv)
    run(args.host, args.port, args.interval_ms / 1000.0, args.timeout_s, args.out, args.loop_pid)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
