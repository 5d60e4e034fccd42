"""Child-process checks for sglang's event-loop stall dump.

Runs each scenario of stall_dump_child.py in its own process (its own
session, output to temp files), parses what the module wrote to stderr and
prints one line per check, then ``SUMMARY: N passed, M failed``; exits 1 when
any check failed.  The sglang tree under test is the first one on sys.path
(PYTHONPATH), so the same suite runs on the patched tree, the stock tree, or
inside the image.  Every wait is bounded and every child's process group is
killed at the end.

Not meant to run under pytest's ``faulthandler_timeout``: children are
separate processes, so that timer (one per process) cannot clash with theirs.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from stall_dump_child import GIL_SECONDS
from stall_dump_child import WATCHER_NAME as WATCH_THREAD
from stall_dump_locate import HTTP_SERVER_RELPATH, load_stall_dump_module, locate
from stall_dump_report import PREFIX, Report, parse

HERE = Path(__file__).resolve().parent
CHILD = HERE / "stall_dump_child.py"
STALL_ENV = "SGLANG_EVENT_LOOP_STALL_DUMP_SECS"
REPEAT_ENV = "SGLANG_EVENT_LOOP_STALL_DUMP_REPEAT_SECS"
MAX_LINE_BYTES = 4096  # PIPE_BUF: one write of at most this is atomic
FIRST_DUMP_SLACK_S = 2.5
IDLE_LOOP_CPU_S = 0.5
# Deterministic scenarios block until the module wrote this dump (the repeat
# proves itself), at most UNTIL_DUMP_LIMIT_S; timing ones block for --block.
UNTIL_DUMP = 2
UNTIL_DUMP_LIMIT_S = 40.0
DETERMINISTIC = "deterministic"
TIMING = "timing"
GROUPS = (DETERMINISTIC, TIMING)
EXPECTED_CHECKS = HERE / "expected_checks.txt"


@dataclasses.dataclass
class Params:
    block: float
    after: float
    threshold: float
    secret: str
    workdir: Path


@dataclasses.dataclass
class Child:
    """One scenario process and what it left behind."""

    name: str
    argv: List[str]
    env: Dict[str, str]
    timeout: float
    group: str = "deterministic"
    proc: Optional[subprocess.Popen] = None
    started: float = 0.0
    rc: Optional[int] = None
    timed_out: bool = False
    stderr_path: Optional[Path] = None
    stdout_path: Optional[Path] = None
    extra: Dict[str, object] = dataclasses.field(default_factory=dict)

    def start(self, workdir: Path) -> None:
        self.stderr_path = workdir / f"{self.name}.stderr"
        self.stdout_path = workdir / f"{self.name}.stdout"
        with open(self.stderr_path, "wb") as err, open(self.stdout_path, "wb") as out:
            self.proc = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        self.started = time.monotonic()

    def wait(self) -> None:
        assert self.proc is not None
        remaining = self.timeout - (time.monotonic() - self.started)
        try:
            self.rc = self.proc.wait(timeout=max(0.1, remaining))
        except subprocess.TimeoutExpired:
            self.timed_out = True
            self.kill_group()
            self.rc = self.proc.wait(timeout=10)

    def kill_group(self) -> None:
        # The group also holds forked grandchildren (fork test, pool workers).
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def stderr(self) -> str:
        return _read(self.stderr_path)

    def stdout(self) -> str:
        return _read(self.stdout_path)


def _read(path: Optional[Path]) -> str:
    if path is None or not path.exists():
        return ""
    return path.read_text(errors="replace")


class Checks:
    def __init__(self) -> None:
        self.results: List[Tuple[str, str, bool, str]] = []
        self.groups: Dict[str, str] = {}  # scenario -> group

    def to_json(self) -> List[Dict[str, object]]:
        return [
            {
                "group": self.groups.get(scenario, DETERMINISTIC),
                "scenario": scenario,
                "check": name,
                "ok": ok,
                "detail": detail,
            }
            for scenario, name, ok, detail in self.results
        ]

    def check(
        self, scenario: str, name: str, fn: Callable[[], Tuple[bool, str]]
    ) -> None:
        try:
            ok, detail = fn()
        except Exception as exc:  # a malformed report fails the check, no more
            ok, detail = False, f"check raised {exc!r}"
        self.results.append((scenario, name, bool(ok), detail))
        print(
            f"{'ok    ' if ok else 'FAILED'} {scenario}: {name} -- {detail}", flush=True
        )

    def summary(self) -> Tuple[int, int]:
        passed = sum(1 for r in self.results if r[2])
        return passed, len(self.results) - passed


# --- scenario table -----------------------------------------------------------


def _env(params: Params, stall: Optional[str], repeat: Optional[str]) -> Dict[str, str]:
    env = dict(os.environ)
    env.pop(STALL_ENV, None)
    env.pop(REPEAT_ENV, None)
    if stall is not None:
        env[STALL_ENV] = stall
    if repeat is not None:
        env[REPEAT_ENV] = repeat
    env["STALL_TEST_SECRET"] = params.secret
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(HERE)] + [p for p in sys.path if p])
    return env


def _child(
    params: Params,
    name: str,
    args: List[str],
    env: Dict[str, str],
    timeout: float = 45.0,
    block: Optional[float] = None,
    group: str = DETERMINISTIC,
) -> Child:
    common = [
        f"--block={params.block if block is None else block:g}",
        f"--after={params.after:g}",
        f"--threshold={params.threshold:g}",
        f"--workdir={params.workdir}",
    ]
    return Child(
        name, [sys.executable, str(CHILD)] + args + common, env, timeout, group
    )


def build_waves(params: Params) -> Tuple[List[Child], List[List[Child]]]:
    """(background, waves): background children start first and run across
    all waves; each wave starts when the previous one has ended."""
    thr = f"{params.threshold:g}"
    until = [f"--until-dump={UNTIL_DUMP}"]
    limit = UNTIL_DUMP_LIMIT_S

    def quiet(name: str, loop: str, stall: Optional[str], repeat: Optional[str]):
        # A 3 s block shows the loop ran on and nothing dumped.
        return _child(
            params, name, ["block", f"--loop={loop}"], _env(params, stall, repeat), block=3
        )

    first = [  # low CPU, plus the one that needs a core
        _child(
            params,
            "asyncio-sleep",
            ["block", "--loop=asyncio", "--long-line"] + until,
            _env(params, thr, thr),
            block=limit,
        ),
        _child(
            params,
            "uvloop-sleep",
            ["block", "--loop=uvloop", "--long-line", "--explicit"] + until,
            _env(params, None, None),
            block=limit,
        ),
        _child(
            params,
            "asyncio-sleep-timed",
            ["block", "--loop=asyncio"],
            _env(params, thr, thr),
            group=TIMING,
        ),
        _child(
            params,
            "uvloop-spin",
            ["block", "--loop=uvloop", "--blocker=spin"],
            _env(params, thr, thr),
            group=TIMING,
        ),
        _child(
            params,
            "uvloop-gil",
            ["block", "--loop=uvloop", "--blocker=gil"],
            _env(params, thr, thr),
            block=GIL_SECONDS,
            group=TIMING,
        ),
        _child(
            params,
            "uvloop-gil-late",
            ["block", "--loop=uvloop", "--blocker=gil-then-wait", "--until-dump=1"],
            _env(params, thr, thr),
            block=limit,
            group=TIMING,
        ),
        _child(
            params,
            "stopped-loop",
            ["stopped-loop", "--loop=uvloop"],
            _env(params, thr, thr),
            block=8,
            group=TIMING,
        ),
        quiet("disabled", "uvloop", "0", None),
        quiet("bad-env", "uvloop", "abc", None),
        quiet("huge-stall", "uvloop", "1e12", None),
        quiet("bad-repeat", "asyncio", thr, "-1"),
        _child(params, "loops", ["loops"], _env(params, thr, thr)),
        _child(
            params, "rearm", ["rearm", "--loop=uvloop"], _env(params, thr, thr), block=5
        ),
    ]
    processes = [
        _child(
            params,
            "asyncio-fork",
            ["fork", "--loop=asyncio", "--until-dump=1"],
            _env(params, thr, thr),
            block=limit,
        ),
        _child(params, "fork-lock", ["fork-lock", "--loop=asyncio"], _env(params, thr, thr)),
        _child(
            params,
            "uvicorn",
            ["uvicorn"] + until,
            _env(params, thr, thr),
            timeout=90.0,
            block=limit,
        ),
    ]
    # Importing sglang's http_server costs ~12 s of CPU (30-50 s on 2 busy
    # cores); it overlaps the waves, whose one CPU-bound child runs boosted.
    background = [
        _child(
            params,
            "real-lifespan",
            ["real-lifespan", "--until-dump=1"],
            _env(params, thr, thr),
            timeout=180.0,
            block=limit,
        )
    ]
    return background, [first, processes]


# --- the uvicorn driver: probes /health while a request blocks the loop ------


def drive_uvicorn(child: Child, params: Params) -> None:
    """Runs in a thread of the suite; results go to child.extra."""
    extra = child.extra
    port = _wait_for_port(child, deadline=time.monotonic() + 30)
    if port is None:
        extra["error"] = "child never printed its port"
        return
    base = f"http://127.0.0.1:{port}"
    if not _wait_healthy(base, deadline=time.monotonic() + 30):
        extra["error"] = "/health never answered"
        return
    post_result: Dict[str, object] = {}
    body = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": params.secret}]}
    ).encode()

    def post() -> None:
        request = urllib.request.Request(
            base + "/v1/chat/completions",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=params.block + 20) as resp:
                post_result["status"] = resp.status
        except Exception as exc:
            post_result["error"] = repr(exc)

    poster = threading.Thread(target=post, daemon=True)
    poster.start()
    # (sent, answered) wall-clock times of each probe, answered None on error;
    # probing goes on until the POST returned and then 5 probes more.
    probes: List[Tuple[float, Optional[float]]] = []
    after_post = 0
    end = time.monotonic() + params.block + 20
    while time.monotonic() < end and after_post < 5:
        if not poster.is_alive():
            after_post += 1
        sent = time.time()
        ok = _probe(base + "/health", timeout=params.block + 10) < float("inf")
        probes.append((sent, time.time() if ok else None))
        time.sleep(0.2)
    poster.join(timeout=params.block + 20)
    extra["post"] = post_result
    extra["probes"] = probes
    if child.proc is not None and child.proc.poll() is None:
        child.proc.send_signal(signal.SIGTERM)


def _wait_for_port(child: Child, deadline: float) -> Optional[int]:
    while time.monotonic() < deadline:
        mark = parse(child.stderr()).mark("port")
        if mark is not None:
            return int(mark.value)
        if child.proc is not None and child.proc.poll() is not None:
            return None
        time.sleep(0.1)
    return None


def _wait_healthy(base: str, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if _probe(base + "/health", timeout=2) < 2:
            return True
        time.sleep(0.2)
    return False


def _probe(url: str, timeout: float) -> float:
    start = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            resp.read()
            if resp.status != 200:
                return float("inf")
    except Exception:
        return float("inf")
    return time.monotonic() - start


# --- shared check groups ----------------------------------------------------


def _pid(child: Child) -> int:
    return child.proc.pid if child.proc is not None else -1


def _secs(report: Report, name: str) -> Optional[float]:
    mark = report.mark(name)
    return None if mark is None else mark.utc.timestamp()


def check_exit(c: Checks, s: str, child: Child, allowed=(0,)) -> None:
    c.check(
        s,
        "child exits cleanly",
        lambda: (
            child.rc in allowed and not child.timed_out,
            (
                f"rc={child.rc} timed_out={child.timed_out} "
                f"stderr tail={child.stderr()[-300:]!r}"
                if child.rc not in allowed
                else f"rc={child.rc}"
            ),
        ),
    )


def check_armed(c: Checks, s: str, child: Child, report: Report, thr: float) -> None:
    def fn():
        want = f"stall={thr:g}s repeat={thr:g}s"
        hits = [
            m
            for m in report.armed
            if int(m["pid"]) == _pid(child)
            and f"stall={m['stall']}s repeat={m['repeat']}s" == want
        ]
        return len(report.armed) == 1 and len(hits) == 1, (
            f"armed lines={[m.group(0) for m in report.armed]}, want one with {want} "
            f"and pid {_pid(child)}"
        )

    c.check(s, "one 'event-loop stall dump armed' line", fn)


def _loop_ident(report: Report) -> Optional[int]:
    return int(report.armed[0]["ident"], 16) if report.armed else None


def _block_dumps(report: Report):
    start = report.mark("block-start")
    end = report.mark("block-end")
    if start is None:
        return []
    last = end.line_no if end is not None else len(report.lines)
    return [d for d in report.dumps if start.line_no < d.line_no < last]


def check_dumps_name_blocker(
    c: Checks, s: str, report: Report, func: str, source: str, min_dumps: int = 2
) -> None:
    def count():
        dumps = _block_dumps(report)
        return len(dumps) >= min_dumps, f"{len(dumps)} dumps during the block"

    c.check(s, f">= {min_dumps} dumps while the loop is blocked", count)

    def names():
        dumps = _block_dumps(report)
        ident = _loop_ident(report)
        bad = []
        for d in dumps:
            first = d.threads[0] if d.threads else None
            own = _child_frames(first)
            ok = (
                first is not None
                and first.is_loop
                and first.ident == ident
                and sum(t.is_loop for t in d.threads) == 1
                and own
                and own[-1].func == func
                and source in own[-1].source
            )
            if not ok:
                bad.append(d.number)
        return bool(dumps) and not bad, (
            f"loop thread listed first, innermost frame of {CHILD.name} {func} / "
            f"{source!r}; "
            f"bad dumps={bad} of {[d.number for d in dumps]}"
        )

    c.check(s, "each dump lists the loop thread first, blocked in the blocker", names)


def _child_frames(thread):
    """The loop thread's frames in stall_dump_child.py (the blocker is the
    innermost; below it may sit threading's Event.wait)."""
    if thread is None:
        return []
    return [f for f in thread.frames if f.file.endswith(CHILD.name)]


def check_first_dump_not_early(c: Checks, s: str, report: Report, thr: float) -> None:
    def fn():
        dumps = _block_dumps(report)
        early = [d.age for d in report.dumps if d.age < thr]
        return bool(dumps) and not early, (
            f"dump ages {[d.age for d in report.dumps]}; none may be under {thr:g}s"
        )

    c.check(s, "no dump before the stall threshold", fn)


def check_first_dump_timing(c: Checks, s: str, report: Report, thr: float) -> None:
    def age():
        dumps = _block_dumps(report)
        first = dumps[0].age if dumps else None
        return first is not None and thr <= first <= thr + FIRST_DUMP_SLACK_S, (
            f"first dump at stall age {first}s, want {thr:g}..{thr + FIRST_DUMP_SLACK_S:g}s"
        )

    c.check(s, "first dump's stall age within threshold + 2.5 s", age)

    def wall():
        dumps = _block_dumps(report)
        start = _secs(report, "block-start")
        if not dumps or start is None:
            return False, "no dump or no block-start mark"
        delay = dumps[0].utc.timestamp() - start
        return 0 <= delay <= thr + FIRST_DUMP_SLACK_S, (
            f"first dump {delay:.2f}s after the block started"
        )

    c.check(s, "first dump written within threshold + 2.5 s of the block", wall)


def check_loop_cpu(c: Checks, s: str, report: Report, busy: bool) -> None:
    def fn():
        dumps = _block_dumps(report)
        pairs = [(d.loop_cpu, d.age) for d in dumps]
        if busy:
            # Judged at the last (longest) dump: the stall age also counts the idle part of
            # the second before the spin started, which weighs most in the first dump.
            cpu, age = pairs[-1] if pairs else (None, 0.0)
            ok = cpu is not None and cpu >= 0.5 * age
            want = "loop CPU >= half the stall age at the last dump"
        else:
            ok = bool(dumps) and all(
                cpu is not None and cpu < IDLE_LOOP_CPU_S for cpu, _ in pairs
            )
            want = f"loop CPU < {IDLE_LOOP_CPU_S}s"
        nice = report.mark("nice")
        return ok, f"{want}; (cpu, age) per dump={pairs}" + (
            f"; priority {nice.value}" if nice else ""
        )

    c.check(s, "loop CPU since last tick: " + ("computing" if busy else "waiting"), fn)


def check_no_faulthandler(c: Checks, s: str, report: Report) -> None:
    c.check(
        s,
        "no faulthandler block (the Python watcher kept up)",
        lambda: (
            not report.fault_blocks,
            f"{len(report.fault_blocks)} faulthandler blocks",
        ),
    )


def check_recovery(
    c: Checks,
    s: str,
    report: Report,
    child: Child,
    block: Optional[float] = None,
) -> None:
    """One recovery line; with `block` (timing) its N near the block length,
    else (deterministic) N at least the age of every dump of the stall."""

    def fn():
        recs = [r for r in report.recoveries if r.pid == _pid(child)]
        secs = [r.seconds for r in recs]
        if block is not None:
            ok = len(recs) == 1 and block - 1.5 <= recs[0].seconds <= block + 2.5
            want = f"one in {block - 1.5:g}..{block + 2.5:g}"
        else:
            ages = [d.age for d in _block_dumps(report)]
            floor = max(ages, default=None)
            ok = len(recs) == 1 and floor is not None and recs[0].seconds >= floor
            want = f"one >= the oldest dump age {floor}"
        return ok, f"recovered after {secs} s, want {want}"

    c.check(s, "one 'event loop recovered after N s' line", fn)

    def after():
        if not report.recoveries:
            return False, "no recovery line"
        last = report.recoveries[-1].line_no
        late = [n for n in report.dump_line_nos() if n > last]
        late += [f.line_no for f in report.fault_blocks if f.line_no > last]
        return not late, f"{len(late)} dump lines after the recovery line" + (
            f", first {report.lines[min(late)][:300]!r}" if late else ""
        )

    c.check(s, "nothing dumped after recovery", after)


def check_secret(c: Checks, s: str, child: Child, secret: str) -> None:
    c.check(
        s,
        "secret from blocked locals/request never appears",
        lambda: (
            secret not in child.stderr() and secret not in child.stdout(),
            "absent" if secret not in child.stderr() + child.stdout() else "LEAKED",
        ),
    )


def check_format(
    c: Checks, s: str, child: Child, report: Report, thr: float, long_line: bool
) -> None:
    def header():
        dumps = report.dumps
        problems = []
        for i, d in enumerate(dumps, start=1):
            if d.pid != _pid(child) or d.threshold != thr or d.number != i:
                problems.append(f"dump {d.number}: pid/threshold/number")
            if d.thread_count != len(d.threads):
                problems.append(
                    f"dump {d.number}: {d.thread_count} threads vs "
                    f"{len(d.threads)} sections"
                )
            if d.end_line_no is None:
                problems.append(f"dump {d.number}: no end line")
        return (
            bool(dumps) and not problems,
            "; ".join(problems) or f"{len(dumps)} dumps consistent",
        )

    c.check(s, "headers: pid, threshold, numbering, thread count, trailer", header)

    def lines():
        raw = (
            Path(child.stderr_path).read_bytes().splitlines()
            if child.stderr_path
            else []
        )
        ours = [l for l in raw if l.startswith(PREFIX.encode())]
        long = [len(l) for l in ours if len(l) + 1 > MAX_LINE_BYTES]
        truncated = sum(1 for l in ours if l.endswith(b"...[truncated]"))
        ok = bool(ours) and not long and (truncated > 0 or not long_line)
        return ok, (
            f"{len(ours)} prefixed lines, {len(long)} over {MAX_LINE_BYTES} bytes, "
            f"{truncated} truncated (a {6000}-char source line is parked)"
        )

    c.check(s, "every dump line prefixed and length-capped", lines)

    def watcher():
        dumps = report.dumps
        ok = bool(dumps) and all(
            any(t.name == repr(WATCH_THREAD) for t in d.threads) for d in dumps
        )
        return ok, f"thread '{WATCH_THREAD}' in every dump"

    c.check(s, "watcher thread is listed in the dump", watcher)


# --- per-scenario evaluations ----------------------------------------------


def eval_sleep(c: Checks, child: Child, p: Params) -> None:
    """Deterministic: the loop is held until the module wrote dump 2."""
    s, report = child.name, parse(child.stderr())
    check_exit(c, s, child)
    check_armed(c, s, child, report, p.threshold)
    check_dumps_name_blocker(c, s, report, "_blocked_in_sleep", "release.wait(")
    check_first_dump_not_early(c, s, report, p.threshold)
    check_loop_cpu(c, s, report, busy=False)
    check_no_faulthandler(c, s, report)
    check_format(c, s, child, report, p.threshold, long_line=True)
    check_recovery(c, s, report, child)
    check_secret(c, s, child, p.secret)


def eval_sleep_timed(c: Checks, child: Child, p: Params) -> None:
    """Timing: a fixed time.sleep block; when the dumps come, how long."""
    s, report = child.name, parse(child.stderr())
    check_exit(c, s, child)
    check_dumps_name_blocker(c, s, report, "_blocked_in_sleep", "time.sleep(")
    check_first_dump_timing(c, s, report, p.threshold)
    check_recovery(c, s, report, child, p.block)


def eval_spin(c: Checks, child: Child, p: Params) -> None:
    s, report = child.name, parse(child.stderr())
    check_exit(c, s, child)
    check_armed(c, s, child, report, p.threshold)
    check_dumps_name_blocker(
        c, s, report, "_spin_in_python", "while time.monotonic() < end"
    )
    check_loop_cpu(c, s, report, busy=True)
    check_no_faulthandler(c, s, report)
    check_recovery(c, s, report, child, p.block)


def _backstop_seconds(thr: float) -> Optional[float]:
    """The bound the module under test states for its backstop."""
    try:
        config = load_stall_dump_module().StallDumpConfig(thr, thr)
        return float(config.backstop_seconds)
    except Exception:
        return None


def check_gil_backstop(
    c: Checks, s: str, report: Report, p: Params, blocker: str
) -> None:
    bound = _backstop_seconds(p.threshold)

    def fault():
        ident = _loop_ident(report)
        start = report.mark("block-start")
        blocks = [
            f
            for f in report.fault_blocks
            if start is not None and f.line_no > start.line_no
        ]
        for block in blocks:
            for t in block.threads:
                # faulthandler lists the innermost frame first.
                if t.ident == ident and t.frames and t.frames[0].func == blocker:
                    return (
                        True,
                        f"the backstop's block (line {block.line_no}) shows loop thread 0x{ident:016x}",
                    )
        return (
            False,
            f"{len(blocks)} faulthandler blocks after block-start, none with "
            f"the loop thread in {blocker}",
        )

    c.check(s, "faulthandler backstop shows the loop thread in the C call", fault)

    def within():
        # The module re-arms every rearm period with timeout stall + margin +
        # rearm, so it fires at most that long after the GIL was taken: inside
        # a GIL hold longer than the bound. Its blocks are the SIGALRM dump's
        # (no Timeout header): faulthandler's own timer is not used.
        kinds = sorted({"signal" if f.timeout is None else f"timer {f.timeout}" for f in report.fault_blocks})
        return (
            bound is not None
            and bound < GIL_SECONDS
            and kinds == ["signal"],
            f"backstop bound {bound}s (stall + margin + re-arm period) for a "
            f"{GIL_SECONDS}s GIL hold; faulthandler blocks: {kinds}",
        )

    c.check(s, "backstop fires within stall + margin + re-arm period, by its kernel timer", within)

    def early():
        gil_end = report.mark("gil-released") or report.mark("block-end")
        dumps = [
            d
            for d in _block_dumps(report)
            if gil_end is None or d.line_no < gil_end.line_no
        ]
        return gil_end is not None and not dumps, (
            f"{len(dumps)} Python dumps while the GIL was held"
        )

    c.check(s, "no Python dump while the GIL was held", early)


def eval_gil(c: Checks, child: Child, p: Params) -> None:
    s, report = child.name, parse(child.stderr())
    check_exit(c, s, child)
    check_armed(c, s, child, report, p.threshold)
    check_gil_backstop(c, s, report, p, "_hold_gil_in_c")

    def no_stale():
        # Once the GIL is free the loop ticks at once; a watcher that was
        # held off must let it, not dump a loop that is recovering.
        end = report.mark("block-end")
        stale = [d.number for d in report.dumps if end and d.line_no > end.line_no]
        stale += [d.number for d in _block_dumps(report)]
        return end is not None and not stale, f"dumps after the GIL hold: {stale}"

    c.check(s, "no dump of the recovering loop after the GIL hold", no_stale)
    check_recovery(c, s, report, child, float(GIL_SECONDS))
    check_secret(c, s, child, p.secret)


def eval_gil_late(c: Checks, child: Child, p: Params) -> None:
    """The GIL held, then the loop blocked with the GIL free: the watcher,
    held off, must say its dump is late."""
    s, report = child.name, parse(child.stderr())
    check_exit(c, s, child)
    check_gil_backstop(c, s, report, p, "_hold_gil_then_wait")

    def late_note():
        released = report.mark("gil-released")
        after = [
            d for d in report.dumps if released and d.line_no > released.line_no
        ]
        if not after:
            return False, "no dump after the GIL was released"
        first = after[0]
        note = [
            line
            for line in report.lines[first.line_no : first.line_no + 3]
            if f"dump {first.number} is late" in line
        ]
        return bool(note), (
            f"dump {first.number} at age {first.age}s: "
            + (note[0] if note else "does not say it is late")
        )

    c.check(s, "the first dump after the GIL hold says it is late", late_note)
    check_dumps_name_blocker(
        c, s, report, "_hold_gil_then_wait", "release.wait(", min_dumps=1
    )
    check_recovery(c, s, report, child)


def check_fork_child(c: Checks, s: str, report: Report) -> None:
    def forked():
        mark = report.mark("fork-child")
        info = json.loads(mark.value) if mark else {}
        return info.get("exit") == 0, f"fork child: {info}"

    c.check(s, "os.fork child exits through interpreter shutdown (no hang)", forked)


def eval_fork(c: Checks, child: Child, p: Params) -> None:
    s, report = child.name, parse(child.stderr())
    check_exit(c, s, child)
    check_armed(c, s, child, report, p.threshold)
    check_fork_child(c, s, report)

    def pool():
        mark = report.mark("pool")
        info = json.loads(mark.value) if mark else {}
        return info.get("values") == [1, 4, 9], f"fork-context pool: {info}"

    c.check(s, "fork-context pool map returns", pool)

    def quiet_children():
        start = report.mark("fork-child-start")
        child_pid = json.loads(start.value)["pid"] if start else None
        foreign = {d.pid for d in report.dumps} | {r.pid for r in report.recoveries}
        foreign.discard(_pid(child))
        noisy = [m for m in report.armed if int(m["pid"]) != _pid(child)]
        return child_pid is not None and not foreign and not noisy, (
            f"fork child pid {child_pid}; stall lines from other pids: {sorted(foreign)}"
        )

    c.check(s, "forked children write no stall output", quiet_children)
    check_dumps_name_blocker(
        c, s, report, "_blocked_in_sleep", "release.wait(", min_dumps=1
    )
    check_recovery(c, s, report, child)


def eval_fork_lock(c: Checks, child: Child, p: Params) -> None:
    s, report = child.name, parse(child.stderr())
    check_exit(c, s, child)
    check_armed(c, s, child, report, p.threshold)
    # The holder kept the fork lock 1.5 s and re-armed before letting go: a
    # before-fork hook that gave up waiting let that timer into the child.
    check_fork_child(c, s, report)


def eval_loops(c: Checks, child: Child, p: Params) -> None:
    s, report = child.name, parse(child.stderr())
    check_exit(c, s, child)

    def value(name: str) -> dict:
        mark = report.mark(name)
        return json.loads(mark.value) if mark else {}

    c.check(
        s,
        "install() again for the watched loop returns its dumper",
        lambda: (value("same-loop").get("same") is True, f"{value('same-loop')}"),
    )

    def refused():
        warned = [l for l in report.not_armed if "another event loop" in l]
        ok = (
            value("other-loop").get("refused") is True
            and len(warned) == 1
            and "Traceback" not in child.stderr()
        )
        return ok, f"{value('other-loop')}; warnings={report.not_armed}"

    c.check(s, "install() for a second live loop refuses it with a warning", refused)
    c.check(
        s,
        "install() after the first loop closed arms a new dumper",
        lambda: (
            value("next-loop") == {"armed": True, "new": True}
            and len(report.armed) == 2,
            f"{value('next-loop')}; {len(report.armed)} armed lines",
        ),
    )


def eval_rearm(c: Checks, child: Child, p: Params) -> None:
    s, report = child.name, parse(child.stderr())
    check_exit(c, s, child)
    mark = report.mark("rearms")
    info = json.loads(mark.value) if mark else {}
    # faulthandler's re-arm joins its previous C thread with the GIL held
    # (~0.1 ms and more); on the loop it was most of every tick's cost.
    c.check(
        s,
        "the loop thread never re-arms the backstop after install()",
        lambda: (info.get("loop_thread") == 0, f"{info}"),
    )
    c.check(
        s,
        "the watcher thread re-arms it",
        lambda: (info.get("watcher", 0) >= 1, f"{info}"),
    )


def eval_stopped(c: Checks, child: Child, p: Params) -> None:
    s, report = child.name, parse(child.stderr())
    check_exit(c, s, child)
    check_armed(c, s, child, report, p.threshold)

    def polls():
        mark = report.mark("watcher-waits")
        waits = json.loads(mark.value)["waits"] if mark else None
        # One wait a heartbeat (1 s), plus slack; a 20 Hz poll makes ~100.
        most = p.block + 4
        return waits is not None and waits <= most, (
            f"{waits} watcher waits in {p.block:g}s stopped, want <= {most:g}"
        )

    c.check(s, "the watcher polls a stopped loop at most once a second", polls)

    def quiet():
        start, end = report.mark("stopped"), report.mark("watcher-waits")
        if start is None or end is None:
            return False, "no stopped/watcher-waits marks"
        lines = [n for n in report.dump_line_nos() if start.line_no < n < end.line_no]
        faults = [f for f in report.fault_blocks if start.line_no < f.line_no]
        return not lines and not faults, (
            f"{len(lines)} dump lines, {len(faults)} faulthandler blocks while stopped"
        )

    c.check(s, "a stopped (not closed) loop is no stall: no dump, no backstop", quiet)


def eval_quiet(
    c: Checks,
    child: Child,
    p: Params,
    bad: Optional[Tuple[str, str]],
    fix: Optional[str] = None,
) -> None:
    """Not armed: nothing runs.  `bad`: the (setting, value) the one warning
    must name; `fix`: text the warning's advice must hold."""
    s, report = child.name, parse(child.stderr())
    check_exit(c, s, child)
    c.check(
        s,
        "install() returned None",
        lambda: (
            report.mark("installed") is not None
            and report.mark("installed").value == "none",
            f"installed={report.mark('installed').value if report.mark('installed') else None}",
        ),
    )

    def threads():
        mark = report.mark("threads")
        names = json.loads(mark.value) if mark else None
        return names is not None and WATCH_THREAD not in names, f"threads={names}"

    c.check(s, f"no '{WATCH_THREAD}' thread", threads)
    c.check(
        s,
        "no dump and no faulthandler block",
        lambda: (
            not report.prefixed
            and not report.fault_blocks
            and report.mark("done") is not None,
            f"{len(report.prefixed)} prefixed lines, {len(report.fault_blocks)} faulthandler "
            f"blocks, done={'yes' if report.mark('done') else 'no'}",
        ),
    )
    c.check(
        s,
        "no 'armed' line",
        lambda: (not report.armed, f"{len(report.armed)} armed lines"),
    )
    if bad is not None:
        env_name, bad_value = bad

        def warning():
            lines = report.not_armed
            ok = (
                len(lines) == 1
                and lines[0].startswith("WARNING")
                and f"{env_name}=" in lines[0]
                and (f"{bad_value!r}" in lines[0] or f"={bad_value}" in lines[0])
                and "Traceback" not in child.stderr()
            )
            return ok, f"warnings={lines}; traceback: {'Traceback' in child.stderr()}"

        c.check(
            s,
            "one 'event-loop stall dump not armed' warning naming the setting",
            warning,
        )
    if fix is not None:

        def advice():
            lines = report.not_armed
            ok = bool(lines) and fix in lines[0] and "or set 0 to disable" not in lines[0]
            return ok, f"want {fix!r} and no 'set 0' advice: {lines}"

        c.check(s, "the warning's advice is a value the setting accepts", advice)


def eval_uvicorn(c: Checks, child: Child, p: Params) -> None:
    s, report = child.name, parse(child.stderr())
    c.check(
        s,
        "graceful SIGTERM shutdown through the lifespan",
        lambda: (
            child.rc in (0, -signal.SIGTERM)
            and not child.timed_out
            and report.mark("lifespan-shutdown") is not None,
            f"rc={child.rc} timed_out={child.timed_out} lifespan-shutdown="
            f"{'yes' if report.mark('lifespan-shutdown') else 'no'} "
            f"error={child.extra.get('error')}",
        ),
    )
    check_armed(c, s, child, report, p.threshold)
    c.check(
        s,
        "POST that blocked the loop was answered",
        lambda: (
            child.extra.get("post", {}).get("status") == 200,
            f"post={child.extra.get('post')}",
        ),
    )
    check_dumps_name_blocker(c, s, report, "chat_completions", "release.wait(")

    def frames():
        dumps = _block_dumps(report)
        files = [
            f.file for d in dumps for f in (d.threads[0].frames if d.threads else [])
        ]
        uv = all(
            any("/uvicorn/" in f.file for f in d.threads[0].frames)
            for d in dumps
            if d.threads
        )
        web = all(
            any(
                "/starlette/" in f.file or "/fastapi/" in f.file
                for f in d.threads[0].frames
            )
            for d in dumps
            if d.threads
        )
        return bool(dumps) and uv and web, (
            f"uvicorn frames={sum('/uvicorn/' in f for f in files)}, starlette/fastapi "
            f"frames={sum('/starlette/' in f or '/fastapi/' in f for f in files)}"
        )

    c.check(s, "loop stack passes through uvicorn and starlette/fastapi frames", frames)
    check_first_dump_not_early(c, s, report, p.threshold)
    check_loop_cpu(c, s, report, busy=False)
    check_no_faulthandler(c, s, report)
    check_recovery(c, s, report, child)

    probes = child.extra.get("probes", [])

    def held():
        start, end = _secs(report, "block-start"), _secs(report, "block-end")
        if start is None or end is None:
            return False, "no block-start/block-end marks"
        # The loop cannot answer while it is blocked: a probe sent after the
        # block started is answered after it ended, and the probe in flight
        # when it ended (the prober never pauses 4 s) waited for that end.
        sent_in = [(a, b) for a, b in probes if start < a < end]
        early = [a for a, b in sent_in if b is None or b < end]
        spanning = [b - end for a, b in probes if a < end and b is not None and b >= end]
        return bool(spanning) and not early, (
            f"{len(sent_in)} probes sent during the block, {len(early)} answered early "
            f"or never; {len(spanning)} answered after its end "
            f"(+{[round(x, 3) for x in spanning][:5]} s)"
        )

    c.check(s, "/health probes in flight during the block wait for its end", held)

    def answered():
        end = _secs(report, "block-end")
        later = [(a, b) for a, b in probes if end is not None and a > end]
        return len(later) >= 5 and all(b is not None for a, b in later), (
            f"{len(later)} probes after the block, "
            f"{sum(b is None for a, b in later)} unanswered"
        )

    c.check(s, "/health answers every probe after the block", answered)
    check_secret(c, s, child, p.secret)


def eval_real_lifespan(c: Checks, child: Child, p: Params) -> None:
    s, report = child.name, parse(child.stderr())
    check_exit(c, s, child)
    mark = report.mark("package-import")
    info = json.loads(mark.value) if mark else {}
    c.check(
        s,
        "http_server imports the module the other children load",
        lambda: (
            bool(info)
            and info.get("imported") is not None
            and info.get("located") == info.get("imported"),
            f"{info}",
        ),
    )

    def armed():
        lines = [l for l in report.lines if "event-loop stall dump armed" in l]
        lifespan = report.mark("lifespan")
        ok = (
            len(report.armed) == 1
            and int(report.armed[0]["pid"]) == _pid(child)
            and lines[0].startswith("INFO glm53_offload.stall_dump:")
            and lifespan is not None
            and lines
            and report.lines.index(lines[0]) < lifespan.line_no
        )
        return ok, f"{lines}; {lifespan.value if lifespan else 'no lifespan mark'}"

    c.check(s, "sglang's lifespan logs the armed line (real module, this pid)", armed)
    check_dumps_name_blocker(
        c, s, report, "_blocked_after_real_lifespan", "release.wait(", min_dumps=1
    )
    check_recovery(c, s, report, child)


def eval_wiring(c: Checks) -> None:
    """Static check of http_server.py's lifespan (importing it needs a server)."""
    s = "http_server-wiring"
    state: Dict[str, object] = {}
    try:
        path = locate(HTTP_SERVER_RELPATH)
        tree = ast.parse(path.read_text(), str(path))
        state["tree"] = tree
    except Exception as exc:
        state["error"] = repr(exc)

    def imports():
        tree = state.get("tree")
        names = (
            [
                (n.module, a.name, a.asname)
                for n in ast.walk(tree)  # type: ignore[arg-type]
                if isinstance(n, ast.ImportFrom)
                for a in n.names
            ]
            if tree
            else []
        )
        hit = [
            x
            for x in names
            if x[0] == "glm53_offload.stall_dump" and x[1] == "install"
        ]
        return (
            bool(hit),
            f"imports from glm53_offload.stall_dump: {hit} {state.get('error', '')}",
        )

    c.check(s, "http_server imports install from glm53_offload.stall_dump", imports)

    def call():
        found = _lifespan_install_call(state.get("tree"))
        return (
            found is not None,
            f"install call in lifespan at line {found and found[0]}",
        )

    c.check(s, "lifespan calls install(asyncio.get_running_loop())", call)

    def order():
        found = _lifespan_install_call(state.get("tree"))
        if found is None:
            return False, "no install call in lifespan"
        line, warmup, yield_line = found
        return (
            warmup is not None
            and yield_line is not None
            and line < warmup < yield_line,
            (
                f"install line {line}, warmup thread line {warmup}, yield line {yield_line}"
            ),
        )

    c.check(s, "install comes before the warmup thread and the yield", order)


def _lifespan_install_call(tree) -> Optional[Tuple[int, Optional[int], Optional[int]]]:
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.AsyncFunctionDef) and node.name == "lifespan":
            install_line = warmup_line = yield_line = None
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call):
                    name = (
                        sub.func.id
                        if isinstance(sub.func, ast.Name)
                        else (
                            sub.func.attr if isinstance(sub.func, ast.Attribute) else ""
                        )
                    )
                    if (
                        name in ("install_stall_dump", "install")
                        and sub.args
                        and ast.unparse(sub.args[0]) == "asyncio.get_running_loop()"
                    ):
                        install_line = install_line or sub.lineno
                    if name == "Thread" and "_wait_and_warmup" in ast.unparse(sub):
                        warmup_line = sub.lineno
                if isinstance(sub, ast.Yield):
                    yield_line = sub.lineno
            if install_line is not None:
                return install_line, warmup_line, yield_line
    return None


EVALUATORS: Dict[str, Callable[[Checks, Child, Params], None]] = {
    "asyncio-sleep": eval_sleep,
    "uvloop-sleep": eval_sleep,
    "asyncio-sleep-timed": eval_sleep_timed,
    "uvloop-spin": eval_spin,
    "uvloop-gil": eval_gil,
    "uvloop-gil-late": eval_gil_late,
    "stopped-loop": eval_stopped,
    "disabled": lambda c, ch, p: eval_quiet(c, ch, p, None),
    "bad-env": lambda c, ch, p: eval_quiet(c, ch, p, (STALL_ENV, "abc")),
    "huge-stall": lambda c, ch, p: eval_quiet(c, ch, p, (STALL_ENV, "1e12")),
    "bad-repeat": lambda c, ch, p: eval_quiet(
        c, ch, p, (REPEAT_ENV, "-1"), fix=f"{STALL_ENV}=0 to disable"
    ),
    "loops": eval_loops,
    "rearm": eval_rearm,
    "asyncio-fork": eval_fork,
    "fork-lock": eval_fork_lock,
    "uvicorn": eval_uvicorn,
    "real-lifespan": eval_real_lifespan,
}
WIRING = "http_server-wiring"  # static, no child: deterministic


# --- main ---------------------------------------------------------------------


def run(params: Params, only: List[str], group: Optional[str]) -> Checks:
    checks = Checks()
    started: List[Child] = []
    background, waves = build_waves(params)

    def chosen(name: str, of_group: str) -> bool:
        return (not only or name in only) and group in (None, of_group)

    background = [ch for ch in background if chosen(ch.name, ch.group)]
    try:
        for ch in background:
            ch.start(params.workdir)
            started.append(ch)
        for wave in waves + [background]:
            wave = [ch for ch in wave if chosen(ch.name, ch.group)]
            for ch in wave:
                if ch.proc is None:
                    ch.start(params.workdir)
                    started.append(ch)
            drivers = [
                threading.Thread(target=drive_uvicorn, args=(ch, params), daemon=True)
                for ch in wave
                if ch.name == "uvicorn"
            ]
            for d in drivers:
                d.start()
            for d in drivers:
                d.join(timeout=90)
            for ch in wave:
                ch.wait()
            for ch in wave:
                ch.kill_group()  # stray grandchildren, if any
                checks.groups[ch.name] = ch.group
                EVALUATORS[ch.name](checks, ch, params)
        if chosen(WIRING, DETERMINISTIC):
            checks.groups[WIRING] = DETERMINISTIC
            eval_wiring(checks)
    finally:
        for ch in started:
            ch.kill_group()
            if ch.proc is not None and ch.proc.poll() is None:
                ch.proc.wait(timeout=10)
    return checks


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        help="run only this scenario (repeatable): "
        + ", ".join(list(EVALUATORS) + [WIRING]),
    )
    parser.add_argument(
        "--group",
        choices=GROUPS,
        help="run only the deterministic scenarios (released by events the "
        "module's own output sets) or only the timing ones (default: both)",
    )
    parser.add_argument(
        "--json", type=Path, help="also write every check's result to this file"
    )
    parser.add_argument(
        "--write-expected",
        action="store_true",
        help=f"rewrite {EXPECTED_CHECKS.name} (group, scenario, check of every "
        "check that ran); run it with neither --only nor --group",
    )
    parser.add_argument(
        "--block",
        type=float,
        default=7.0,
        help="seconds each blocker holds the loop (default 7)",
    )
    parser.add_argument(
        "--after",
        type=float,
        default=3.0,
        help="seconds the loop runs after the block (default 3)",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=2.0,
        help="stall threshold and repeat interval given to the children (default 2)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the temp dir with every child's stdout/stderr",
    )
    args = parser.parse_args()
    unknown = set(args.only) - set(EVALUATORS) - {WIRING}
    if unknown:
        parser.error(
            f"unknown scenario(s) {sorted(unknown)}; choose from {list(EVALUATORS)}"
        )
    # SIGTERM (e.g. from a test runner's timeout) still kills every child.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = Path(tempfile.mkdtemp(prefix="stall-dump-suite-"))
    params = Params(
        args.block,
        args.after,
        args.threshold,
        "stall-secret-" + secrets.token_hex(12),
        workdir,
    )
    t0 = time.monotonic()
    try:
        checks = run(params, args.only, args.group)
    finally:
        if args.keep:
            print(f"child output kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    passed, failed = checks.summary()
    by_scenario: Dict[str, List[bool]] = {}
    for scenario, _, ok, _ in checks.results:
        by_scenario.setdefault(scenario, []).append(ok)
    for scenario, oks in by_scenario.items():
        print(f"  {scenario}: {'ok' if all(oks) else 'FAILED'} ({sum(oks)}/{len(oks)})")
    print(f"suite took {time.monotonic() - t0:.0f}s")
    if args.json:
        args.json.write_text(json.dumps(checks.to_json(), indent=1))
    if args.write_expected:
        if args.only or args.group:
            parser.error("--write-expected needs the whole suite")
        EXPECTED_CHECKS.write_text(
            "".join(
                f"{r['group']}\t{r['scenario']}\t{r['check']}\n"
                for r in checks.to_json()
            )
        )
        print(f"wrote {EXPECTED_CHECKS}")
    print(f"SUMMARY: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
