"""Dump every thread's Python stack when an asyncio event loop stops ticking.

The HTTP server answers /health, /metrics and the OpenAI routes from one event
loop.  When something blocks that loop for minutes, nothing is logged and the
health probe just times out.  This module keeps a one-second heartbeat on the
loop (a ``call_later`` callback that only stores the time and the loop
thread's CPU clock) and a daemon thread, ``event-loop-stall-watch``, that
writes a stack dump of all threads to stderr once the heartbeat has been
silent for SGLANG_EVENT_LOOP_STALL_DUMP_SECS (default 30, 0 disables), and
again every SGLANG_EVENT_LOOP_STALL_DUMP_REPEAT_SECS (default 60) while the
stall lasts.

If the loop thread holds the GIL inside one long C call, no Python thread can
run.  The backstop is a kernel timer (``ITIMER_REAL``) whose SIGALRM
faulthandler handles in C (``faulthandler.register``): the watcher (never the
loop) pushes the timer out every few seconds while it can run, and when it
cannot, faulthandler prints every thread's stack, unprefixed and without the
GIL, between stall + margin and stall + margin + re-arm period after the GIL
was last released.  Re-arming it is one setitimer call; faulthandler's own
``dump_traceback_later`` timer is not used because each re-arm of it joins its
previous C thread with the GIL held (measured up to 20 ms with the CPUs busy),
and every thread, the event loop's too, waits that long.  The signal is
blocked in the loop thread and the threads it starts after install(), and
unblocked in the watcher, so it lands where a blocking call cut short by it
costs nothing (a thread started before install() may take it too).  A process
whose SIGALRM or real-time timer is already in use gets the Python-level dumps
without the backstop, with a warning.

Dumps carry file, line, function and source line only: never local variables,
arguments or request content.  Every line is prefixed, capped in length and
written with a single ``os.write`` so that it stays whole in a shared pipe and
greppable.  The writer avoids ``logging`` because a stalled loop thread may hold
a logging handler's lock.

Only the standard library is used, so importing this module cannot fail.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import faulthandler
import functools
import logging
import math
import os
import signal
import sys
import threading
import time
import traceback
from typing import Callable, Dict, List, Mapping, Optional, Tuple

logger = logging.getLogger(__name__)

STALL_ENV = "SGLANG_EVENT_LOOP_STALL_DUMP_SECS"
REPEAT_ENV = "SGLANG_EVENT_LOOP_STALL_DUMP_REPEAT_SECS"
DEFAULT_STALL_SECONDS = 30.0
DEFAULT_REPEAT_SECONDS = 60.0
MIN_REPEAT_SECONDS = 1.0
LINE_PREFIX = "[event-loop-stall]"
WATCH_THREAD_NAME = "event-loop-stall-watch"

_HEARTBEAT_SECONDS = 1.0
# Below two heartbeats a healthy loop's normal tick gap would count as a stall.
MIN_STALL_SECONDS = 2 * _HEARTBEAT_SECONDS
# A stall longer than a day is never a useful threshold.
MAX_STALL_SECONDS = 86400.0
_MAX_WATCHER_ERRORS = 3
# The backstop fires at least this long after the stall
# threshold, so the Python dump (thread names, source lines) wins when it can.
_BACKSTOP_MARGIN_SECONDS = 3.0
# The watcher re-arms the backstop this often (at most; the stall threshold if
# smaller).  The loop never does: its ticks stay a clock read.
_REARM_SECONDS = 5.0
# A watcher wait that ends this much later than asked means the watcher could
# not run (the GIL was held, or the process was stopped).
_LATE_WAKE_SECONDS = 1.0
# How long after a tick is due the watcher looks for it.
_TICK_SLACK_SECONDS = 0.01
# One os.write() of at most PIPE_BUF (4096) bytes is never interleaved.
_MAX_LINE_BYTES = 2048
_MAX_FRAMES_PER_THREAD = 100
_STDERR_FD = 2


class StallDumpRefused(RuntimeError):
    """install() declines to watch a loop (one dumper per process)."""


@dataclasses.dataclass(frozen=True)
class StallDumpConfig:
    """Thresholds in seconds; stall_seconds == 0 means disabled."""

    stall_seconds: float
    repeat_seconds: float

    @property
    def enabled(self) -> bool:
        return self.stall_seconds > 0

    @property
    def rearm_seconds(self) -> float:
        return min(_REARM_SECONDS, self.stall_seconds)

    @property
    def backstop_seconds(self) -> float:
        """The backstop timer: re-armed every rearm_seconds, it fires
        stall + margin .. stall + margin + rearm after Python last ran."""
        return self.stall_seconds + _BACKSTOP_MARGIN_SECONDS + self.rearm_seconds

    @classmethod
    def resolve(
        cls,
        environ: Mapping[str, str],
        stall_seconds: Optional[float] = None,
        repeat_seconds: Optional[float] = None,
    ) -> "StallDumpConfig":
        """Explicit arguments win over the environment; raises ValueError."""
        stall = _seconds(
            STALL_ENV,
            stall_seconds,
            environ,
            f"unset it for the default ({DEFAULT_STALL_SECONDS:g}) or set 0 to disable",
            maximum=MAX_STALL_SECONDS,
        )
        repeat = _seconds(
            REPEAT_ENV,
            repeat_seconds,
            environ,
            f"unset it for the default ({DEFAULT_REPEAT_SECONDS:g}) or set "
            f"{STALL_ENV}=0 to disable the stall dump",
        )
        stall = DEFAULT_STALL_SECONDS if stall is None else stall
        repeat = DEFAULT_REPEAT_SECONDS if repeat is None else repeat
        if 0 < stall < MIN_STALL_SECONDS:
            raise ValueError(
                f"{STALL_ENV}={stall:g} is below the {MIN_STALL_SECONDS:g} s minimum "
                f"(the heartbeat ticks every {_HEARTBEAT_SECONDS:g} s); set at least "
                f"{MIN_STALL_SECONDS:g}, or 0 to disable"
            )
        if repeat == 0:
            raise ValueError(
                f"{REPEAT_ENV}=0 is not allowed; set a positive number of seconds "
                f"(default {DEFAULT_REPEAT_SECONDS:g}), or set {STALL_ENV}=0 to "
                "disable the stall dump"
            )
        return cls(stall, max(repeat, MIN_REPEAT_SECONDS))


def _seconds(
    name: str,
    explicit: Optional[float],
    environ: Mapping[str, str],
    fix: str,
    maximum: Optional[float] = None,
) -> Optional[float]:
    """The setting as seconds >= 0, or None when unset."""
    raw = explicit if explicit is not None else environ.get(name, "").strip()
    if raw == "":
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}={raw!r} is not a number of seconds >= 0; {fix}")
    if maximum is not None and value > maximum:
        raise ValueError(
            f"{name}={raw!r} is above the {maximum:g} s maximum; set at most "
            f"{maximum:g}, or {fix}"
        )
    return value


def _thread_cpu_reader(ident: int, native_id: int) -> Callable[[], float]:
    """CPU seconds used so far by the given thread, readable from any thread."""
    try:
        clock = time.pthread_getcpuclockid(ident)
        time.clock_gettime(clock)
        # A C-level partial: no Python frame per call.
        return functools.partial(time.clock_gettime, clock)
    except (AttributeError, OSError, OverflowError):
        pass
    stat_path = f"/proc/self/task/{native_id}/stat"
    ticks = os.sysconf("SC_CLK_TCK")

    def from_proc() -> float:
        with open(stat_path, "rb") as f:
            # Fields after the ")" that closes comm; utime and stime are 14, 15.
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks

    from_proc()
    return from_proc


class _LineWriter:
    """Writes prefixed, length-capped lines to fd 2, one os.write per line."""

    def __init__(self, prefix: str, max_bytes: int = _MAX_LINE_BYTES) -> None:
        self._prefix = prefix + " "
        self._max_bytes = max_bytes

    def line(self, text: str) -> None:
        text = text.replace("\r", "\\r").replace("\n", "\\n")
        data = (self._prefix + text).encode("utf-8", "backslashreplace")
        if len(data) + 1 > self._max_bytes:
            marker = b" ...[truncated]"
            data = data[: self._max_bytes - 1 - len(marker)] + marker
        data += b"\n"
        try:
            while data:
                data = data[os.write(_STDERR_FD, data) :]
        except OSError:
            pass  # stderr closed or full: a diagnostic must never raise


class StallDumper:
    """Heartbeat callback on the loop plus a watcher thread; see module docstring."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        config: StallDumpConfig,
        fork_lock: threading.Lock,
    ) -> None:
        self.config = config
        self.pid = os.getpid()
        self.loop_thread_ident = threading.get_ident()
        self.loop = loop
        self._loop_cpu = _thread_cpu_reader(
            self.loop_thread_ident, threading.get_native_id()
        )
        self._call_later = loop.call_later
        self._out = _LineWriter(LINE_PREFIX)
        # Held across os.fork() so no thread can arm the backstop timer
        # between the before-fork cancel and the fork itself.
        self._fork_lock = fork_lock
        self._stall = config.stall_seconds
        self._beat = time.monotonic()  # of the last tick
        self._long_gap: Optional[Tuple[float, float]] = None
        self._wake = threading.Event()
        self._stopped = False
        self._watcher: Optional[threading.Thread] = None
        self._dumps = 0
        self._fork_lock_held = False

    @property
    def stopped(self) -> bool:
        return self._stopped

    def start(self) -> None:
        if _state.backstop:
            # Called on the loop thread: it and the threads it starts from now
            # on (the watcher unblocks it again) never take the SIGALRM.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        self._arm_backstop()
        self._call_later(_HEARTBEAT_SECONDS, self._tick)
        self._watcher = threading.Thread(
            target=self._watch, name=WATCH_THREAD_NAME, daemon=True
        )
        self._watcher.start()

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._wake.set()
        if self._in_owner_process():
            with self._fork_lock:
                _set_backstop(0.0)

    # --- loop side: the whole per-tick cost ------------------------------

    def _tick(self) -> None:
        # Only a clock read and a reschedule: loop CPU is sampled by the
        # watcher, off the loop.
        now = time.monotonic()
        previous = self._beat
        # The watcher reads _long_gap before _beat, so set _beat first.
        self._beat = now
        if now - previous > self._stall:
            self._long_gap = (previous, now)
            self._wake.set()
        if not self._stopped:
            self._call_later(_HEARTBEAT_SECONDS, self._tick)

    # --- the backstop timer and fork hooks ---------------------------------

    def _in_owner_process(self) -> bool:
        return os.getpid() == self.pid

    def _arm_backstop(self) -> None:
        # Non-blocking: a fork in progress holds the lock for a moment only.
        if self._fork_lock.acquire(blocking=False):
            try:
                if not self._stopped and self._in_owner_process():
                    _set_backstop(self.config.backstop_seconds)
            finally:
                self._fork_lock.release()

    def _cancel_backstop(self) -> None:
        if self._fork_lock.acquire(blocking=False):
            try:
                _set_backstop(0.0)
            finally:
                self._fork_lock.release()

    def before_fork(self) -> None:
        if self._in_owner_process() and not self._stopped:
            # No timeout: the lock is only ever held around one setitimer
            # call.  The timer is stopped for the fork and started again
            # after it in the parent; a child does not inherit it.
            self._fork_lock.acquire()
            self._fork_lock_held = True
            _set_backstop(0.0)

    def after_fork_in_parent(self) -> None:
        if self._fork_lock_held:
            self._fork_lock_held = False
            self._fork_lock.release()
        self._arm_backstop()

    def after_fork_in_child(self) -> None:
        # A child starts with no timer; make sure nothing here arms one.
        self._fork_lock_held = False
        self._stopped = True

    # --- watcher thread --------------------------------------------------

    def _watch(self) -> None:
        if _state.backstop:
            # The backstop's SIGALRM comes here (the loop thread and the
            # threads it starts block it): a signal ends a blocking call early
            # in the thread it lands in, and this one only waits.
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
        stall = self.config.stall_seconds
        rearm = self.config.rearm_seconds
        # Wakes are at most a heartbeat apart, so re-arming once this much has
        # passed keeps every re-arm interval within rearm_seconds.
        rearm_after = max(0.0, rearm - _HEARTBEAT_SECONDS)
        last_arm = time.monotonic()
        episode_beat: Optional[float] = None
        episode_dumps = 0
        last_dump_at = 0.0
        reported_gap: Optional[Tuple[float, float]] = None
        # Loop CPU when this thread first saw the latest tick (~10 ms after
        # it on a healthy loop): the base of the dump's "CPU since its last tick".
        seen_beat: Optional[float] = None
        cpu_base: Optional[float] = None
        held_off = 0.0  # how long this thread could not run before a dump
        loop_idle = False  # loop stopped (not closed): backstop cancelled
        due: Optional[float] = None
        errors = 0
        while not self._stopped:
            if sys.is_finalizing():
                return  # interpreter shutdown: nothing left to watch
            try:
                now = time.monotonic()
                late = 0.0 if due is None else now - due
                gap = self._long_gap
                beat_at = self._beat
                if beat_at != seen_beat:
                    seen_beat, cpu_base = beat_at, self._read_loop_cpu()
                if gap is not None and gap is not reported_gap:
                    reported_gap = gap
                    self._out.line(
                        f"pid={self.pid} event loop recovered after "
                        f"{gap[1] - gap[0]:.1f} s ({episode_dumps} "
                        f"dump{'' if episode_dumps == 1 else 's'})"
                    )
                    episode_beat, episode_dumps, held_off = None, 0, 0.0
                if self.loop.is_closed():
                    self.stop()
                    break
                running = self.loop.is_running()
                if not running:
                    # Stopped but not closed: not a stall, and the backstop
                    # must not fire; look again once a heartbeat.
                    if not loop_idle:
                        self._cancel_backstop()
                        loop_idle = True
                    timeout = _HEARTBEAT_SECONDS
                else:
                    if loop_idle or now - last_arm >= rearm_after:
                        # This thread runs, so the GIL is not stuck: push the
                        # C backstop out.
                        self._arm_backstop()
                        last_arm, loop_idle = now, False
                    age = now - beat_at
                    # Wake just after the next tick is due, so the CPU base is
                    # read within milliseconds of it; once it is overdue, look
                    # again by the stall threshold (at most once a heartbeat).
                    next_tick = beat_at + _HEARTBEAT_SECONDS + _TICK_SLACK_SECONDS
                    if next_tick > now:
                        timeout = next_tick - now
                    else:
                        timeout = min(_HEARTBEAT_SECONDS, max(0.05, stall - age))
                    if late > _LATE_WAKE_SECONDS:
                        # Held off (GIL held, process stopped): the loop may be
                        # running again and due to tick; give it one heartbeat
                        # before dumping, and say so if the dump still comes.
                        held_off = max(held_off, late)
                        timeout = _HEARTBEAT_SECONDS
                    elif age > stall:
                        if episode_beat != beat_at:
                            episode_beat, episode_dumps = beat_at, 0
                        if episode_dumps == 0 or now - last_dump_at >= (
                            self.config.repeat_seconds
                        ):
                            self._dump(age, cpu_base, held_off)
                            episode_dumps += 1
                            last_dump_at = now
                            held_off = 0.0
                        timeout = _HEARTBEAT_SECONDS
            except Exception as exc:  # never let the watcher die silently
                errors += 1
                if errors <= _MAX_WATCHER_ERRORS:
                    self._out.line(f"pid={self.pid} watcher error: {exc!r}")
                timeout = _HEARTBEAT_SECONDS
            due = time.monotonic() + timeout
            if self._wake.wait(timeout):
                due = None  # woken early on purpose: not late
            self._wake.clear()

    def _read_loop_cpu(self) -> Optional[float]:
        try:
            return self._loop_cpu()
        except Exception:  # the thread is gone or /proc unreadable
            return None

    def _dump(self, age: float, cpu_base: Optional[float], held_off: float) -> None:
        self._dumps += 1
        number = self._dumps
        cpu_now = self._read_loop_cpu()
        if cpu_now is None or cpu_base is None:
            loop_cpu = "unknown"
        else:
            loop_cpu = f"{cpu_now - cpu_base:.3f}"
        try:
            frames = sys._current_frames()
            names = _thread_names()
            order = sorted(frames, key=lambda t: (t != self.loop_thread_ident, t))
            utc = datetime.datetime.now(datetime.timezone.utc)
            self._out.line(
                f"pid={self.pid} dump {number}: event loop stalled for {age:.1f}s "
                f"(threshold {self.config.stall_seconds:g}s); loop thread used "
                f"{loop_cpu}s CPU since its last tick; {len(order)} threads; "
                f"{utc.isoformat(timespec='milliseconds')}"
            )
            if held_off:
                self._out.line(
                    f"pid={self.pid} dump {number} is late: this watcher could not "
                    f"run for {held_off:.1f}s (the GIL was held or the process "
                    "stopped); the loop may be recovering, so the stacks below may "
                    "be past the stall"
                )
            for ident in order:
                label = " (event loop)" if ident == self.loop_thread_ident else ""
                self._out.line(
                    f"--- thread 0x{ident:016x} {names.get(ident, '<unknown>')!r}"
                    f"{label}, most recent call last:"
                )
                for line in _format_frames(frames[ident]):
                    self._out.line(line)
            del frames
            self._out.line(f"pid={self.pid} end of dump {number}")
        except Exception as exc:
            self._out.line(
                f"pid={self.pid} dump {number} failed ({exc!r}); "
                "faulthandler dump follows"
            )
            try:
                faulthandler.dump_traceback(file=_STDERR_FD, all_threads=True)
            except Exception:
                pass


def _thread_names() -> Dict[int, str]:
    # threading.enumerate() takes a lock a stuck thread might hold; a copy of
    # the registry dict is atomic under the GIL.
    try:
        active = dict(threading._active)  # type: ignore[attr-defined]
    except Exception:
        active = {t.ident: t for t in threading.enumerate()}
    return {ident: t.name for ident, t in active.items()}


def _format_frames(frame) -> List[str]:
    # extract_stack keeps file, line, function and source line; it never
    # captures locals or arguments.
    lines = []
    for entry in traceback.extract_stack(frame, limit=_MAX_FRAMES_PER_THREAD):
        lines.append(f'  File "{entry.filename}", line {entry.lineno}, in {entry.name}')
        if entry.line:
            lines.append(f"    {entry.line}")
    return lines


def _set_backstop(seconds: float) -> None:
    """Start (or push out) the backstop timer; 0 stops it. Nothing when the
    process has no backstop (register_backstop found SIGALRM in use): the
    timer is then someone else's."""
    if _state.backstop:
        signal.setitimer(signal.ITIMER_REAL, seconds)


class _ProcessState:
    """Per-process registry: the backstop timer and fork hooks are
    process-wide, so at most one dumper may own them at a time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fork_lock = threading.Lock()
        self.active: Optional[StallDumper] = None
        self.hooks_registered = False
        # SIGALRM handed to faulthandler (register_backstop found it free).
        self.backstop = False
        self.backstop_checked = False

    def register_backstop(self) -> None:
        """Hand SIGALRM to faulthandler, once per process, if nothing else
        uses it (a handler or a running real-time timer); else warn once."""
        if self.backstop_checked:
            return
        self.backstop_checked = True
        handler = signal.getsignal(signal.SIGALRM)
        in_use = signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0)
        if handler not in (signal.SIG_DFL, None) or in_use:
            logger.warning(
                "event-loop stall dump: no C backstop (SIGALRM or the real-time "
                "timer is in use in this process, handler %r): a loop holding "
                "the GIL in one C call is not dumped",
                handler,
            )
            return
        faulthandler.register(
            signal.SIGALRM, file=_STDERR_FD, all_threads=True, chain=False
        )
        self.backstop = True

    def before_fork(self) -> None:
        dumper = self.active
        if dumper is not None:
            dumper.before_fork()

    def after_fork_in_parent(self) -> None:
        dumper = self.active
        if dumper is not None:
            dumper.after_fork_in_parent()

    def after_fork_in_child(self) -> None:
        dumper = self.active
        if dumper is not None:
            dumper.after_fork_in_child()
        # Locks may have been held by threads that do not exist in the child.
        self.lock = threading.Lock()
        self.fork_lock = threading.Lock()
        self.active = None


_state = _ProcessState()


def install(
    loop: asyncio.AbstractEventLoop,
    stall_seconds: Optional[float] = None,
    repeat_seconds: Optional[float] = None,
) -> Optional[StallDumper]:
    """Arm the stall dump for ``loop``; call it from a coroutine on that loop.

    Returns the dumper, or None when disabled or not armed.  Never raises:
    a configuration error or any other failure is logged as one warning.
    Calling it again for the loop already watched returns that dumper; a
    dumper whose loop is closed is replaced; another live loop is refused
    (one backstop timer per process).
    """
    try:
        config = StallDumpConfig.resolve(os.environ, stall_seconds, repeat_seconds)
        if not config.enabled:
            logger.debug("event-loop stall dump disabled (%s=0)", STALL_ENV)
            return None
        if asyncio.get_running_loop() is not loop:
            raise StallDumpRefused(
                "install() must be called from a coroutine running on the loop "
                "it watches"
            )
        with _state.lock:
            active = _state.active
            if active is not None and not active.stopped:
                if active.loop is loop:
                    return active
                if not active.loop.is_closed():
                    raise StallDumpRefused(
                        f"already watching another event loop (thread "
                        f"0x{active.loop_thread_ident:016x}); one per process, "
                        "so this loop is not watched"
                    )
                active.stop()
            _state.register_backstop()
            if not _state.hooks_registered:
                os.register_at_fork(
                    before=_state.before_fork,
                    after_in_parent=_state.after_fork_in_parent,
                    after_in_child=_state.after_fork_in_child,
                )
                _state.hooks_registered = True
            dumper = StallDumper(loop, config, _state.fork_lock)
            dumper.start()
            _state.active = dumper
        logger.info(
            "event-loop stall dump armed: stall=%gs repeat=%gs (pid %d, loop thread "
            "0x%016x)",
            config.stall_seconds,
            config.repeat_seconds,
            dumper.pid,
            dumper.loop_thread_ident,
        )
        return dumper
    except Exception as exc:
        # A bad setting or a refused loop gets an actionable one-liner;
        # anything else a traceback.
        logger.warning(
            "event-loop stall dump not armed: %s",
            exc,
            exc_info=not isinstance(exc, (ValueError, StallDumpRefused)),
        )
        return None
