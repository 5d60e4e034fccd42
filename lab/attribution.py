"""Attributes slow /health probes to the code that ran in the server while they waited.

The session records the HTTP server process with `py-spy record --gil --format chrometrace`:
per thread, a begin/end event for every frame whose presence changed between samples, with
microsecond timestamps counted from py-spy's start. Each sample is the thread that held the
GIL, so what a slow probe overlaps is the code that held it: on the event-loop thread
("MainThread" in `sglang.launch_server`) the loop itself ran; on another thread it held the GIL
the loop was waiting for. (Without `--gil`, a thread waiting for the GIL, e.g. in
`time.sleep(0)`, is sampled as running too.)

py-spy samples from outside, at the lab's lower priority, and keeps a thread's stack open until
its next recorded sample, so its culprits are candidates. The server's own sampler
(tools/sglang_server/in_container/loop_sampler.py, `<server>.loop.jsonl`) reads each thread's
CPU clock from inside: the three slowest probes also get the CPU time every thread spent during
them and the frames it was in (`in_server`).

Pure functions over plain data (no sglang, no podman), unit-tested on the host.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lab.results import Probe, ResultsError

SLOW_MS = 20.0  # probes slower than this are attributed (issue 12's mixed-traffic target)
LOOP_THREAD = "MainThread"
_THREAD_FRAME = re.compile(r"^thread \((?P<tid>\w+)\): (?P<name>.*)$")
_PACKAGE_DIR = re.compile(r".*/(?:site|dist)-packages/")
_BEHIND = re.compile(r"([\d.]+)s behind in sampling")
# Innermost stdlib frames that wait rather than run. py-spy's idle detection does not catch
# every timed wait (a Condition.wait with a timeout shows as running), so these are dropped.
# Runner.run innermost is the loop thread inside the event loop's C code (uvloop): polling, or
# waiting for the GIL; what held the loop then shows on the other threads.
_WAITING = re.compile(
    r"^(?:(?:Runner\.run|Condition\.wait|Event\.wait|_worker|Queue\.get|SimpleQueue\.get|Thread\.join|Thread\._wait_for_tstate_lock"
    r"|\w*Selector\.select|select|sleep|_recv_into|recv_into|accept) \(/usr/lib/python3[.\d]*/"
    # v3's offload_process: the innermost Python frame of a thread blocked in a pipe read or
    # write to its child (readinto/write, GIL released) while the child works.
    r"|(?:_read_exact|_write_all) \([^)]*glm53_offload/offload_process\.py:)"
)


@dataclass(frozen=True)
class Span:
    """One thread ran `stack` (outermost first) from `start` to `end` (monotonic seconds)."""

    thread: str
    start: float
    end: float
    stack: tuple[str, ...]


@dataclass(frozen=True)
class Share:
    thread: str
    frame: str  # the innermost frame
    sglang_frame: str | None  # the innermost frame in sglang's own code, if any
    ms: float


@dataclass(frozen=True)
class SlowProbe:
    start: float
    end: float
    ms: float
    # Where the probe's wait went, largest first; empty when nothing ran (e.g. not profiled).
    shares: list[Share] = field(default_factory=list)

    @property
    def loop_ms(self) -> float:
        """How long the event-loop thread itself ran during the probe."""
        return round(sum(share.ms for share in self.shares if share.thread == LOOP_THREAD), 1)


@dataclass(frozen=True)
class Culprit:
    thread: str
    frame: str
    sglang_frame: str | None
    ms: float  # summed over every slow probe it overlapped
    probes: int


def _frame(event: dict) -> str:
    args = event.get("args") or {}
    filename = _PACKAGE_DIR.sub("", str(args.get("filename", "")))
    line = args.get("line", 0)
    return f"{event['name']} ({filename}:{line})" if filename else str(event["name"])


def load_trace(path: Path, launched: float) -> list[Span]:
    """Spans of a py-spy chrometrace file whose timestamp 0 is the monotonic time `launched`."""
    try:
        events = json.loads(path.read_text())
    except FileNotFoundError:
        raise ResultsError(f"{path}: missing; py-spy did not write it (see the .log beside it)") from None
    except ValueError as err:
        raise ResultsError(f"{path}: not JSON ({err}); py-spy was probably killed before writing") from None
    if isinstance(events, dict):
        events = events.get("traceEvents", [])
    by_tid: dict[object, list[tuple[int, int, dict]]] = defaultdict(list)
    for order, event in enumerate(events):
        if event.get("ph") in ("B", "E"):
            by_tid[event.get("tid")].append((int(event["ts"]), order, event))
    spans = []
    for tid, items in by_tid.items():
        items.sort(key=lambda item: (item[0], item[1]))
        stack: list[str] = []
        thread = str(tid)
        last_ts = None
        for ts, _, event in items:
            if last_ts is not None and ts > last_ts and len(stack) > 1 and not _WAITING.match(stack[-1]):
                spans.append(Span(thread, launched + last_ts / 1e6, launched + ts / 1e6, tuple(stack[1:])))
            last_ts = ts
            if event["ph"] == "B":
                match = _THREAD_FRAME.match(str(event["name"]))
                if not stack and match:
                    thread = match.group("name")
                stack.append(_frame(event))
            elif stack:
                stack.pop()
    return sorted(spans, key=lambda span: span.start)


GC_THREAD = "cyclic GC"


def load_gc_pauses(path: Path) -> list[Span]:
    """The server's cyclic-GC pauses (tools/sglang_server/in_container/gc_timeline.py) as spans
    of a thread of their own: a collection holds the GIL, so a probe it overlaps waited for it.
    The thread that ran it is sampled by py-spy as well, in whatever frame allocated."""
    spans = []
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    for number, line in enumerate(lines, 1):
        try:
            pause = json.loads(line)
            start, ms, generation = float(pause["start"]), float(pause["ms"]), pause["generation"]
        except (ValueError, KeyError, TypeError) as err:
            raise ResultsError(f"{path}:{number}: not a GC pause record ({err!r})") from None
        spans.append(Span(GC_THREAD, start, start + ms / 1000.0, ("gc", f"collect generation {generation}")))
    return sorted(spans, key=lambda span: span.start)


def gc_summary(pauses: list[Span]) -> dict:
    """How many collections of 1 ms or more the server ran, the longest, and their sum."""
    lengths = [(span.end - span.start) * 1000.0 for span in pauses]
    return {"pauses": len(lengths), "max_ms": round(max(lengths, default=0.0), 1),
            "total_ms": round(sum(lengths), 1),
            "generation_2": sum(1 for span in pauses if span.stack[-1].endswith(" 2"))}


# The in-server sampler's name for the event-loop thread (its LOOP_NAME; a test checks they
# agree); a sample's empty stack is the loop
# inside uvloop's C code (reading sockets, running its callbacks' C parts).
SAMPLED_LOOP = "loop"
NO_PYTHON_FRAME = "(no Python frame: uvloop's C code)"


@dataclass(frozen=True)
class CpuSample:
    """`thread` ran `cpu_ms` of CPU in the sampling period ending at `t`; `frame` is where it was then."""

    t: float
    thread: str
    cpu_ms: float
    frame: str


def load_cpu_samples(path: Path) -> list[CpuSample]:
    """The in-server sampler's records, one per thread per sample; [] when the server wrote none."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    samples = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
            for thread in record["threads"]:
                samples.append(CpuSample(float(record["t"]), str(thread["name"]), float(thread["cpu_ms"]),
                                         thread["stack"][0] if thread["stack"] else NO_PYTHON_FRAME))
        except (ValueError, KeyError, TypeError, IndexError) as err:
            raise ResultsError(f"{path}:{number}: not a loop sampler record ({err!r})") from None
    return samples


def cpu_during(samples: list[CpuSample], start: float, end: float, top: int = 3) -> list[dict]:
    """Per thread, the CPU time of the samples taken in [start, end] (each counts the period before
    it) and its `top` frames by CPU time; the loop thread first, the others by CPU time."""
    per_thread: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    low = _first_at_or_after([sample.t for sample in samples], start)
    for sample in samples[low:]:
        if sample.t > end:
            break
        per_thread[sample.thread][sample.frame] += sample.cpu_ms
    threads = [{"thread": thread, "cpu_ms": round(sum(frames.values()), 1),
                "frames": [[frame, round(ms, 1)] for frame, ms in sorted(frames.items(), key=lambda item: -item[1])[:top]]}
               for thread, frames in per_thread.items()]
    return sorted(threads, key=lambda entry: (entry["thread"] != SAMPLED_LOOP, -entry["cpu_ms"]))


def _sglang_frame(stack: tuple[str, ...]) -> str | None:
    for frame in reversed(stack):
        if "(sglang/" in frame:
            return frame
    return None


def attribute(probes: list[Probe], spans: list[Span], slow_ms: float = SLOW_MS) -> list[SlowProbe]:
    """Every probe slower than `slow_ms`, with the running code it overlapped (by thread and frame)."""
    out = []
    starts = [span.start for span in spans]
    longest = max((span.end - span.start for span in spans), default=0.0)
    for probe in probes:
        if probe.ms <= slow_ms:
            continue
        totals: dict[tuple[str, str, str | None], float] = defaultdict(float)
        # spans are sorted by start; only those starting after probe.start - longest can overlap.
        low = _first_at_or_after(starts, probe.start - longest)
        for span in spans[low:]:
            if span.start > probe.end:
                break
            overlap = min(span.end, probe.end) - max(span.start, probe.start)
            if overlap > 0:
                totals[(span.thread, span.stack[-1], _sglang_frame(span.stack))] += overlap * 1000.0
        shares = [Share(thread, frame, sg, round(ms, 1)) for (thread, frame, sg), ms in totals.items()]
        shares.sort(key=lambda share: -share.ms)
        out.append(SlowProbe(probe.start, probe.end, round(probe.ms, 1), shares))
    return out


def _first_at_or_after(values: list[float], x: float) -> int:
    low, high = 0, len(values)
    while low < high:
        mid = (low + high) // 2
        if values[mid] < x:
            low = mid + 1
        else:
            high = mid
    return low


def culprits(slow: list[SlowProbe], loop: bool, top: int = 8) -> list[Culprit]:
    """The code that ran longest during slow probes, summed over them, on the loop thread
    (`loop`) or on the other threads (which held the GIL the loop may have waited for)."""
    totals: dict[tuple[str, str, str | None], list[float]] = defaultdict(lambda: [0.0, 0])
    for probe in slow:
        for share in probe.shares:
            if (share.thread == LOOP_THREAD) == loop:
                entry = totals[(share.thread, share.frame, share.sglang_frame)]
                entry[0] += share.ms
                entry[1] += 1
    ranked = sorted(totals.items(), key=lambda item: (-item[1][0], item[0][0], item[0][1], item[0][2] or ""))
    return [Culprit(thread, frame, sg, round(ms, 1), int(count)) for (thread, frame, sg), (ms, count) in ranked[:top]]


def summary(slow: list[SlowProbe], top: int = 6, samples: list[CpuSample] | None = None) -> dict:
    """The JSON record of one probe file: counts, the top culprits, the three slowest probes (with
    the in-server sampler's CPU per thread during each, when there are `samples`)."""
    worst = sorted(slow, key=lambda probe: -probe.ms)[:3]
    return {
        "slow_ms": SLOW_MS,
        "slow_probes": len(slow),
        "slow_probe_ms": round(sum(p.ms for p in slow), 1),
        "loop_ran_ms": round(sum(p.loop_ms for p in slow), 1),
        "unattributed": sum(1 for probe in slow if not probe.shares),
        "loop_culprits": [asdict(c) for c in culprits(slow, True, top)],
        "other_thread_culprits": [asdict(c) for c in culprits(slow, False, top)],
        "slowest": [{"ms": p.ms, "start": p.start, "loop_ms": p.loop_ms, "shares": [asdict(s) for s in p.shares[:6]]}
                    | ({"in_server": cpu_during(samples, p.start, p.end)} if samples else {})
                    for p in worst],
    }


def sampler_behind_s(log: Path) -> float:
    """The largest lag py-spy reported (it reports lags over 1 s): a loaded machine thins samples."""
    try:
        text = log.read_text(errors="replace")
    except FileNotFoundError:
        raise ResultsError(f"{log}: missing py-spy log") from None
    return max((float(m.group(1)) for m in _BEHIND.finditer(text)), default=0.0)
