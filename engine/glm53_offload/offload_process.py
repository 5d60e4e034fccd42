"""Child processes for the request-preprocessing steps that are one long native
call: encoding a multi-MB prompt and parsing a multi-MB JSON body.

Why: a thread does not help with a single native call that holds the GIL. The
HF fast tokenizer encodes with the GIL released, but then builds the ids list
of the encoding in one call that holds it (60-600 ms for a few million ids);
orjson parses a 5 MB body in one call (5-50 ms). On any thread of the HTTP
server process the event loop waits that long. In a child process the call
holds only the child's GIL; the calling thread writes and reads a pipe with
its GIL released, a bounded chunk per step.

The child runs this file as a script (`python -P offload_process.py ROLE`) and
imports only what its role needs (`tokenizers`, or `orjson` and `pickle`): no
sglang, no torch, so it starts in a fraction of a second.

Every call has a deadline derived from its payload size (deadline_for); past
it, or on any failure of the child, the child is killed and the caller does the
work in its own thread. Nothing here fails a request. Every use, fallback,
deadline kill, restart and start failure is counted in STATS (exported on
/metrics when metrics are enabled) and each fallback cause is logged once.

Wire format (native byte order: both ends are on one host):
  parent -> child, once: the role's setup frames
  child -> parent, once: b"R" when ready
  per request, parent -> child: one flag byte, the payload as frames, then an
      empty frame
  child -> parent: b"+" then the result as frames and an empty frame, or b"-"
      then frame(error JSON)
  frame = uint64 length + bytes. EOF on stdin ends the child.
Roles:
  tokenizer: setup = backend JSON (`Tokenizer.to_str()`), settings JSON; flag
      1 = add special tokens; payload = UTF-8 text; result = int64 ids.
  json: no setup; payload = a JSON document; result = its orjson.loads,
      pickled with every string over 64 K characters taken out as a
      persistent id: frame(pickle), frame(int64 count, then start, end
      pairs), then
      frame(UTF-8) per string copied. A big string literal of printable
      ASCII with no escape (a base64 image) is its own bytes in the body:
      the child sends only where it is (id -1 - i for pair i), and the
      parent decodes it from its own copy of the body. Any other big string
      (escapes, non-ASCII text) is copied back (id j for string frame j).
      The parent decodes those one at a time (a copy, not a parse), then
      unpickles the small rest. An error orjson raises comes back as its
      message and position, so the parent raises orjson's own error without
      parsing the body again.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import fcntl
import io
import json
import logging
import mmap
import os
import pickle
import re
import secrets
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from array import array
from typing import Any, BinaryIO, Dict, Iterable, Iterator, List, Optional, Tuple

logger = logging.getLogger(__name__)

# Characters per frame of a prompt sent to the child, and bytes per frame of a
# body or per read of a result: each step is one short native call, so another
# thread (the event loop) takes the GIL between steps.
_TEXT_SLICE_CHARS = 256 * 1024
_SLICE_BYTES = 1 << 20
# A string longer than this travels outside the pickle of a parsed body, so
# the parent builds it in its own short step (bodies of 64 images are
# hundreds of MB of base64 strings: one unpickle of it holds the GIL that long).
_BIG_STRING_CHARS = 64 * 1024
# The pipe buffer asked for (Linux F_SETPIPE_SZ): with the 64 KiB default a
# 200 MB body costs thousands of wakeups of both processes.
_PIPE_BYTES = 1 << 20
_F_SETPIPE_SZ = 1031

_LENGTH = struct.Struct("=Q")
# How long a child whose pipe broke is waited for, to learn how it ended.
_EXIT_STATUS_WAIT_S = 1.0


def env_number(name: str, default, minimum=None, maximum=None):
    """The environment variable `name` as a number of default's type (int or
    float), or `default` when unset or empty; a clear error naming the setting
    when it is not such a number or lies outside [minimum, maximum]."""
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    kind = "an integer" if isinstance(default, int) else "a number"
    if minimum is not None and maximum is not None:
        kind += f" in {minimum}-{maximum}"
    elif minimum is not None:
        kind += f" >= {minimum}"
    elif maximum is not None:
        kind += f" <= {maximum}"
    try:
        number = type(default)(value)
    except ValueError:
        number = None
    if (
        number is None
        or (minimum is not None and number < minimum)
        or (maximum is not None and number > maximum)
    ):
        raise ValueError(
            f"{name}={value!r}: expected {kind} (default {default}); fix or unset it"
        )
    return number


# Child processes serve the HTTP server (launch_server calls serve_http); a
# program that embeds sglang.Engine starts none unless its environment asks
# (SGLANG_TOKENIZER_PROCESSES, SGLANG_MM_PROCESSES). An environment variable,
# not a module flag, so the server's tokenizer worker processes inherit it.
_HTTP_SERVER_ENV = "SGLANG_OFFLOAD_IN_HTTP_SERVER"


def serve_http() -> None:
    """Mark this process, and those it starts, as the HTTP server, once this
    SGLang is one the package supports (sglang_support.check raises if not).
    launch_server calls it, never a program embedding sglang.Engine.

    It also shortens the GIL switch interval to
    SGLANG_HTTP_SERVER_SWITCH_INTERVAL_SECS (default 1 ms; 0 keeps CPython's
    5 ms): the preprocessing lanes run Python between short native steps
    while the loop serves, and the loop gives up the GIL in every socket call
    and may wait a whole interval to get it back, several times per /health
    answer."""
    from glm53_offload import sglang_support

    sglang_support.check()
    os.environ[_HTTP_SERVER_ENV] = "1"
    interval = env_number("SGLANG_HTTP_SERVER_SWITCH_INTERVAL_SECS", 0.001)
    if 0 < interval < sys.getswitchinterval():
        sys.setswitchinterval(interval)


def child_processes(name: str, server_default: int, maximum=None) -> int:
    """The number of children the setting `name` asks for; 0 keeps the work
    in this process. Unset: `server_default` in the HTTP server, else 0."""
    default = server_default if os.environ.get(_HTTP_SERVER_ENV) == "1" else 0
    return int(env_number(name, int(default), minimum=0, maximum=maximum))


# A call's deadline: a fixed part plus a part per MiB of payload (a 5 MB
# prompt of a 151 K-token tokenizer encodes in about 1-2 s on a loaded core;
# parsing runs at hundreds of MB/s). Read at call time, so tests and operators
# can change them (SGLANG_OFFLOAD_DEADLINE_SECS, ..._SECS_PER_MB).
DEADLINE_BASE_S = env_number("SGLANG_OFFLOAD_DEADLINE_SECS", 10.0)
DEADLINE_S_PER_MB = env_number("SGLANG_OFFLOAD_DEADLINE_SECS_PER_MB", 2.0)
# From start to ready: the interpreter starts and loads the tokenizer's JSON.
START_DEADLINE_S = env_number("SGLANG_OFFLOAD_START_DEADLINE_SECS", 60.0)
# A child whose resident memory after a call exceeds its size when ready by
# more than this is replaced (TokenizerProcess.grown): the tokenizers crate
# leaves a multi-MB prompt's encoding fragmented in the heap (a GLM-class
# child: 131 MiB ready, 367 MiB idle after a 4.8 MB prompt, malloc_trim or not).
CHILD_GROWTH_LIMIT_MB = env_number("SGLANG_OFFLOAD_CHILD_GROWTH_LIMIT_MB", 64)
# A JSON child leaves up to this much freed memory in its heap for the next
# body (glibc: buffers under it come from the heap, and that much free heap is
# not trimmed): a body's buffers are then reused instead of faulted in, zeroed
# and unmapped again each time, which was most of a child's cost per body
# (6.3 MB through one child: 9.5 -> 4.5 ms a call). Larger buffers are mapped apart and returned
# when freed. 0: all of a body's memory is returned after it. At most 32
# (glibc's largest mmap threshold on 64-bit).
JSON_KEEP_HEAP_MB = env_number("SGLANG_JSON_PARSE_KEEP_MB", 16, minimum=0, maximum=32)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
# Children run this much nicer than the server (os.nice in _main): a child
# decoding images competes for the cores with the HTTP process, and a server
# thread taken off the CPU while it holds the GIL stalls the event loop until
# it runs again; a nicer child leaves the server's threads the larger share.
# 0-19: a negative value needs CAP_SYS_NICE, which a replica may not have.
CHILD_NICE = env_number("SGLANG_OFFLOAD_CHILD_NICE", 10, minimum=0, maximum=19)


def deadline_for(payload_bytes: int) -> float:
    """Seconds one call with a payload of this size may take."""
    return DEADLINE_BASE_S + DEADLINE_S_PER_MB * payload_bytes / (1 << 20)


class OffloadProcessError(RuntimeError):
    """The child failed, died or answered out of protocol."""


class ChildStartError(OffloadProcessError):
    """The child exited before it was ready: it will not start next time either."""


class ChildDeadlineError(OffloadProcessError):
    """The child did not answer within the call's deadline: it was killed."""


class ChildKilledError(OffloadProcessError):
    """The child was ended by a signal mid-call: the kernel's OOM killer or an
    operator (a deadline kill is ChildDeadlineError)."""

    def __init__(self, message: str, signal_number: int) -> None:
        super().__init__(message)
        self.signal_number = signal_number


class ChildReportedError(OffloadProcessError):
    """The child ran the request and its call raised (the message says what);
    the child is still in step and stays in use."""

    def __init__(self, kind: str, message: str, details: Optional[dict] = None):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.details = details or {}


class TokenizerProcessMismatch(OffloadProcessError):
    """The child's ids differ from the tokenizer it was made from."""


class OffloadStats:
    """Counters of every offload path, kept in this process and, once
    enable_prometheus ran (metrics enabled), exported as
    sglang:offload_events_total{path, event} and
    sglang:offload_queue_depth{path}. Paths: tokenizer_process, json_process,
    mm_process, preprocessing_lane_bulk, preprocessing_lane_small, segments,
    body_release (http_body: a large body's pages handed back off the loop);
    events: uses (requests; a lane's "steps" are its tasks, several per
    request), fallbacks, deadline_kills, killed (a child ended by a signal
    mid-call), refused (a request ended because its child was killed),
    restarts, recycles (a child replaced because it grew), start_failures,
    rejected, swept (segments of dead servers unlinked), and for mm_process
    images_one_at_a_time / images_in_one_call (how a request of several
    images was processed) and strings_zero_copy / strings_encoded (how its
    large strings were written to the child: from the str's own bytes, or
    encoded to UTF-8 as not ASCII)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: collections.Counter = collections.Counter()
        self._depth: Dict[str, int] = {}
        self._logged: set = set()
        self._events = None
        self._queue_depth = None
        self._labels: Dict[str, str] = {}

    def enable_prometheus(self, labels: Dict[str, str]) -> None:
        # Imported here: prometheus_client must be imported after
        # PROMETHEUS_MULTIPROC_DIR is set (metrics_collector does the same).
        from prometheus_client import Counter, Gauge

        with self._lock:
            if self._events is not None:
                return
            self._labels = dict(labels)
            names = [*self._labels, "path", "event"]
            self._events = Counter(
                name="sglang:offload_events",
                documentation="Request preprocessing offload events (uses, "
                "fallbacks, deadline kills, restarts, recycles, start failures, "
                "rejected) per path.",
                labelnames=names,
            )
            self._queue_depth = Gauge(
                name="sglang:offload_queue_depth",
                documentation="Requests queued or running on an offload path.",
                labelnames=[*self._labels, "path"],
                multiprocess_mode="livesum",
            )
            for (path, event), n in self._counts.items():
                self._events.labels(**self._labels, path=path, event=event).inc(n)
            for path, depth in self._depth.items():
                self._queue_depth.labels(**self._labels, path=path).set(depth)

    def count(self, path: str, event: str, n: int = 1) -> None:
        with self._lock:
            self._counts[(path, event)] += n
            if self._events is not None:
                self._events.labels(**self._labels, path=path, event=event).inc(n)

    def add_depth(self, path: str, delta: int) -> int:
        with self._lock:
            depth = self._depth.get(path, 0) + delta
            self._depth[path] = depth
            if self._queue_depth is not None:
                self._queue_depth.labels(**self._labels, path=path).set(depth)
            return depth

    def fallback(self, path: str, cause: str, error: Optional[BaseException]) -> None:
        """Count a fallback of `path` and log it, once per (path, cause)."""
        self.count(path, "fallbacks")
        with self._lock:
            first = (path, cause) not in self._logged
            self._logged.add((path, cause))
        if first:
            logger.warning(
                "%s fell back to in-process work (%s): %r. Counted as "
                "sglang:offload_events_total{path=%r,event='fallbacks'}; "
                "logged once per cause.",
                path,
                cause,
                error,
                path,
            )

    def slow_path(self, path: str, event: str, reason: str) -> None:
        """Count `event` of `path` (a path that still ran, less well) and log
        it, once per (path, event, reason)."""
        self.count(path, event)
        with self._lock:
            first = (path, event, reason) not in self._logged
            self._logged.add((path, event, reason))
        if first:
            logger.warning(
                "%s: %s (%s). Counted as sglang:offload_events_total{path=%r,"
                "event=%r}; logged once per reason.",
                path,
                event,
                reason,
                path,
                event,
            )

    def depth(self, path: str) -> int:
        with self._lock:
            return self._depth.get(path, 0)

    def snapshot(self) -> Dict[str, int]:
        with self._lock:
            return {f"{p}.{e}": n for (p, e), n in sorted(self._counts.items())}


STATS = OffloadStats()


def whole_pages(start: int, end: int) -> Tuple[int, int]:
    """(first, length) of the whole pages inside [start, end): what can be
    handed back without touching the bytes around the range. length <= 0 when
    the range holds no whole page."""
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    return first, end // mmap.PAGESIZE * mmap.PAGESIZE - first


def _write_all(stream: BinaryIO, data) -> None:
    # An unbuffered pipe may take part of a large write.
    view = memoryview(data).cast("B")
    while view:
        view = view[stream.write(view) :]


def _write_frame(stream: BinaryIO, data) -> None:
    _write_all(stream, _LENGTH.pack(len(data)))
    _write_all(stream, data)


class _Deadline(Exception):
    pass


class _Channel:
    """The parent's ends of a child's pipes, non-blocking, every wait bounded
    by a deadline (time.monotonic()). Reads and writes go a slice at a time
    (os.read/os.write release the GIL)."""

    def __init__(self, process: subprocess.Popen) -> None:
        self._to_child = process.stdin.fileno()
        self._from_child = process.stdout.fileno()
        for fd in (self._to_child, self._from_child):
            os.set_blocking(fd, False)
            try:
                fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_BYTES)
            except OSError:
                pass  # capped by /proc/sys/fs/pipe-max-size: the default works too
        self.deadline = float("inf")

    def _wait(self, fd: int, events: int) -> None:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise _Deadline()
        poller = select.poll()
        poller.register(fd, events | select.POLLERR | select.POLLHUP)
        timeout_ms = None if remaining == float("inf") else max(1, int(remaining * 1000))
        if not poller.poll(timeout_ms):
            raise _Deadline()

    def write(self, data) -> None:
        view = memoryview(data).cast("B")
        while view:
            try:
                view = view[os.write(self._to_child, view[:_SLICE_BYTES]) :]
            except BlockingIOError:
                self._wait(self._to_child, select.POLLOUT)

    def write_frame(self, data) -> None:
        self.write(_LENGTH.pack(len(data)))
        self.write(data)

    def read_exact(self, size: int):
        # A large result goes into an anonymous mapping: its pages are zeroed
        # by the kernel as the reads fill them (GIL released), where
        # bytearray(size) would memset hundreds of MB in one call holding it.
        data = mmap.mmap(-1, size) if size >= _SLICE_BYTES else bytearray(size)
        view = memoryview(data)
        done = 0
        while done < size:
            try:
                got = os.readv(self._from_child, [view[done : done + _SLICE_BYTES]])
            except BlockingIOError:
                self._wait(self._from_child, select.POLLIN)
                continue
            if not got:
                raise EOFError(f"stream ended after {done} of {size} bytes")
            done += got
        return data

    def read_frame(self):
        (size,) = _LENGTH.unpack(self.read_exact(_LENGTH.size))
        return self.read_exact(size)

    def read_frames(self) -> Iterable:
        while True:
            frame = self.read_frame()
            if not len(frame):
                return
            yield frame


class _Child:
    """One child process of a role. Not thread-safe: one caller thread at a
    time (a preprocessing lane, or a body-parse thread, owns it)."""

    def __init__(
        self,
        role: str,
        *setup: bytes,
        start_deadline_s: Optional[float] = None,
        owner_token: str = "-",
    ) -> None:
        # -P (3.11+): this file's directory does not go first on the child's
        # sys.path, where sglang's modules could shadow what the child imports.
        isolate = ["-P"] if sys.version_info >= (3, 11) else []
        self.role = role
        try:
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    *isolate,
                    os.path.abspath(__file__),
                    role,
                    str(os.getpid()),
                    owner_token,
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,
            )
        except OSError as error:  # no runnable interpreter at sys.executable
            raise ChildStartError(f"cannot start the {role} process: {error}") from error
        self._channel = _Channel(self._process)
        self._ready = False
        self._ready_rss: Optional[int] = None
        if start_deadline_s is None:  # read now, not when the class was defined
            start_deadline_s = START_DEADLINE_S
        self.start_deadline_s = start_deadline_s
        self._channel.deadline = time.monotonic() + start_deadline_s
        try:
            for frame in setup:
                self._channel.write_frame(frame)
        except OSError as error:
            self.kill()
            raise ChildStartError(f"cannot start the {role} process: {error!r}") from error
        except _Deadline:
            self.kill()
            raise ChildStartError(
                f"the {role} process (pid {self._process.pid}) did not read its setup "
                f"within {start_deadline_s:.0f} s"
            ) from None

    @property
    def pid(self) -> int:
        return self._process.pid

    def rss_bytes(self) -> int:
        """The child's resident memory (0 once it is gone)."""
        try:
            with open(f"/proc/{self._process.pid}/statm") as statm:
                return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return 0

    def grown(self) -> bool:
        """Whether the child holds more than CHILD_GROWTH_LIMIT_MB above its
        size when it was ready: memory an idle child should not keep."""
        if self._ready_rss is None:
            return False
        return self.rss_bytes() - self._ready_rss > CHILD_GROWTH_LIMIT_MB << 20

    @property
    def closed(self) -> bool:
        return self._process.stdin.closed

    def _call(
        self,
        flag: bytes,
        frames: Iterable,
        payload_bytes: int,
        convert=None,
        extra_s: float = 0.0,
    ) -> List:
        """Send one request (flag byte, payload frames) and return the result
        frames, each passed through convert(index, frame) as it is read (so a
        caller keeps one raw frame at a time). Past deadline_for(payload_bytes)
        the child is killed and
        ChildDeadlineError raised. A payload generator that raises (text that
        is not valid Unicode) ends the payload early: the child answers what
        it got, the answer is dropped, the child stays in step and the
        generator's error is raised."""
        process = self._process
        in_step = False
        seconds = deadline_for(payload_bytes) + extra_s
        try:
            self._wait_ready()
            self._channel.deadline = time.monotonic() + seconds
            payload_error, status, result = self._exchange(flag, frames, convert)
            in_step = True
        except _Deadline:
            self.kill()
            raise ChildDeadlineError(
                f"the {self.role} process (pid {process.pid}) did not answer within "
                f"{seconds:.1f} s: killed"
            ) from None
        except ChildStartError:
            self.kill()
            raise
        except (OSError, EOFError, struct.error, ValueError) as error:
            status = self._exit_status()
            self.kill()
            if status is not None and status < 0:
                name = signal.Signals(-status).name
                raise ChildKilledError(
                    f"the {self.role} process (pid {process.pid}) was killed by "
                    f"{name} mid-call (SIGKILL with no deadline passed: the "
                    "kernel's OOM killer or an operator)",
                    -status,
                ) from error
            raise OffloadProcessError(
                f"the {self.role} process (pid {process.pid}) stopped: {error!r}"
            ) from error
        finally:
            if not in_step and not self.closed:
                # Interrupted half-way (e.g. KeyboardInterrupt): out of step.
                self.kill()
        if payload_error is not None:
            raise payload_error
        if status == b"-":
            report = json.loads(bytes(result))
            raise ChildReportedError(report["kind"], report["message"], report.get("details"))
        return result

    def _exit_status(self) -> Optional[int]:
        """The exit status of a child whose pipe broke (negative: the signal
        that ended it), or None if it still runs. EOF on the pipe comes with
        the child's exit, and its status a moment later: waited for briefly."""
        try:
            return self._process.wait(_EXIT_STATUS_WAIT_S)
        except subprocess.TimeoutExpired:
            return None

    def _wait_ready(self) -> None:
        if self._ready:
            return
        try:
            ready = self._channel.read_exact(1) == b"R"
        except (OSError, EOFError):
            ready = False
        except _Deadline:
            raise ChildStartError(
                f"the {self.role} process (pid {self._process.pid}) was not ready "
                f"within {self.start_deadline_s:.0f} s"
            ) from None
        if not ready:
            raise ChildStartError(
                f"the {self.role} process (pid {self._process.pid}) exited before "
                f"it was ready (exit status {self._process.poll()})"
            )
        self._ready = True
        self._ready_rss = self.rss_bytes()

    def _exchange(self, flag: bytes, frames: Iterable, convert):
        """(payload generator's error or None, status byte, result frames or
        the error report)."""
        channel = self._channel
        channel.write(flag)
        payload_error = None
        iterator = iter(frames)
        while True:
            try:
                frame = next(iterator)
            except StopIteration:
                break
            except (UnicodeError, ValueError) as error:
                payload_error = error
                break
            channel.write_frame(frame)
        channel.write_frame(b"")
        status = bytes(channel.read_exact(1))
        if status == b"-":
            return payload_error, status, channel.read_frame()
        if status != b"+":
            raise ValueError(f"unexpected status byte {status!r}")
        if convert is None:
            return payload_error, status, list(channel.read_frames())
        return payload_error, status, [
            convert(index, frame) for index, frame in enumerate(channel.read_frames())
        ]

    def kill(self) -> None:
        """SIGKILL (a stopped child ignores everything else) and reap."""
        try:
            self._process.send_signal(signal.SIGKILL)
        except OSError:
            pass
        self.close()

    def close(self, timeout: float = 5.0) -> None:
        """End the child (EOF on its stdin) and reap it; killed if it does
        not exit within `timeout`. Idempotent."""
        process = self._process
        for stream in (process.stdin, process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def plain_fast_tokenizer(tokenizer) -> bool:
    """Whether `tokenizer.encode(text, add_special_tokens=...)` is exactly its
    `tokenizers` backend's encode: a transformers fast tokenizer whose class
    overrides none of the encoding methods (a remote-code tokenizer that
    post-processes its ids is not)."""
    try:
        from tokenizers import Tokenizer
        from transformers import PreTrainedTokenizerFast
    except ImportError:
        return False
    if not isinstance(getattr(tokenizer, "_tokenizer", None), Tokenizer):
        return False
    cls = type(tokenizer)
    return all(
        getattr(cls, name, None) is getattr(PreTrainedTokenizerFast, name, None)
        for name in ("encode", "__call__", "_encode_plus", "_call_one")
    )


def backend_setup(tokenizer) -> tuple:
    """The tokenizer role's setup frames for `tokenizer`: its backend JSON
    (to_str() of a 151 K-token tokenizer holds the GIL for ~100-300 ms, so a
    caller makes this once and passes it to every TokenizerProcess) and the
    settings the JSON does not carry."""
    settings = {
        # transformers sets this on the backend per call from the
        # tokenizer's split_special_tokens; the JSON does not carry it.
        "encode_special_tokens": bool(getattr(tokenizer, "split_special_tokens", False)),
    }
    return (tokenizer._tokenizer.to_str().encode("utf-8"), json.dumps(settings).encode())


class TokenizerProcess(_Child):
    """A child holding a copy of a fast tokenizer's backend."""

    PATH = "tokenizer_process"  # its name in STATS

    def __init__(self, tokenizer, setup: Optional[tuple] = None) -> None:
        super().__init__("tokenizer", *(setup or backend_setup(tokenizer)))

    def encode(self, text: str, add_special_tokens: bool = True) -> array:
        """The ids of `text`, as an array("q"). Raises OffloadProcessError if
        the child fails (the caller then encodes in its own thread) and
        UnicodeEncodeError for text that is not valid Unicode (the child
        stays in step)."""
        frames = (
            text[start : start + _TEXT_SLICE_CHARS].encode("utf-8")
            for start in range(0, len(text), _TEXT_SLICE_CHARS)
        )
        result = self._call(
            b"\x01" if add_special_tokens else b"\x00", frames, len(text)
        )
        ids = array("q")
        for part in result:
            view = memoryview(part)
            for start in range(0, len(view), _SLICE_BYTES):
                ids.frombytes(view[start : start + _SLICE_BYTES])
        return ids

    def check_against(self, tokenizer) -> None:
        """Raise TokenizerProcessMismatch unless the child encodes a probe
        (text, special tokens, non-ASCII) as `tokenizer.encode` does."""
        specials = " ".join(getattr(tokenizer, "all_special_tokens", []) or [])
        probe = f"Hello world! {specials} naïve café 東京 🙂\n\n  tabs\tand   spaces"
        for add_special_tokens in (True, False):
            expected = tokenizer.encode(probe, add_special_tokens=add_special_tokens)
            got = self.encode(probe, add_special_tokens).tolist()
            if got != list(expected):
                self.close()
                raise TokenizerProcessMismatch(
                    "the tokenizer process encodes differently from the tokenizer "
                    f"(add_special_tokens={add_special_tokens}): {got[:16]} vs "
                    f"{list(expected)[:16]}"
                )


def orjson_error(report: ChildReportedError, document) -> Exception:
    """orjson's own JSONDecodeError for what the child reported (message,
    position), built without parsing `document` again."""
    import orjson

    details = report.details
    error = orjson.JSONDecodeError.__new__(orjson.JSONDecodeError)
    ValueError.__init__(error, details["str"])
    error.msg = details["msg"]
    error.doc = document
    error.pos = details["pos"]
    error.lineno = details["lineno"]
    error.colno = details["colno"]
    return error


class JsonProcess(_Child):
    """A child that parses JSON documents with orjson."""

    def __init__(self) -> None:
        super().__init__("json")

    def loads(self, document: bytes) -> Any:
        """orjson.loads(document), parsed by the child. orjson's own
        JSONDecodeError for a document orjson rejects (the child's message
        and position, no second parse), OffloadProcessError if the child
        fails."""
        view = memoryview(document).cast("B")
        frames = (
            view[start : start + _SLICE_BYTES]
            for start in range(0, len(view), _SLICE_BYTES)
        )
        def convert(index: int, frame):
            if index < 2:
                return bytes(frame)  # the pickle of the rest; the spans
            if index > 2:
                time.sleep(0)  # releases the GIL: a waiting loop thread runs now
            return str(frame, "utf-8", "surrogatepass")

        try:
            result = self._call(b"\x00", frames, len(view), convert)
        except ChildReportedError as report:
            if report.kind == "JSONDecodeError":
                raise orjson_error(report, document) from None
            raise
        spans = array("q")
        spans.frombytes(result[1])
        in_place = []
        for index in range(1, len(spans), 2):
            if index > 1:
                time.sleep(0)
            in_place.append(ascii_text(view, spans[index], spans[index + 1]))
        # Per big string: read from the body here, or copied back (escapes,
        # non-ASCII text) through the pipe.
        STATS.count(JsonBodyParser.PATH, "strings_in_place", len(in_place))
        STATS.count(JsonBodyParser.PATH, "strings_copied", len(result) - 2)
        return _PersistentStrings(io.BytesIO(result[0]), result[2:], in_place=in_place).load()


def _sliced_ascii_builder():
    """(new, data_offset) to build a str by copying into it a slice at a
    time: CPython's PyUnicode_New(n, 127) makes an ASCII str whose n bytes
    follow the object header (sys.getsizeof("") - 1 bytes, checked here on a
    small string); None where that does not hold (not CPython)."""
    try:
        new = ctypes.pythonapi.PyUnicode_New
    except AttributeError:
        return None
    new.argtypes, new.restype = [ctypes.c_ssize_t, ctypes.c_uint32], ctypes.py_object
    offset = sys.getsizeof("") - 1
    probe = b"sliced ascii probe"
    text = new(len(probe), 127)
    ctypes.memmove(id(text) + offset, probe, len(probe))
    if text != probe.decode("ascii"):
        return None
    return new, offset


_SLICED_ASCII = _sliced_ascii_builder()


def ascii_bytes(text: str) -> Optional[memoryview]:
    """A read-only view of an ASCII str's own bytes, with no copy (the str must outlive it), or
    None for a str that is not ASCII (or no compact ASCII layout). text.encode() of a 48 MP
    image's base64 copies tens of MB in one call holding the GIL; written from this view, the
    pipe's os.write steps copy it with the GIL released."""
    if _SLICED_ASCII is None or not text.isascii():
        return None
    return memoryview(
        (ctypes.c_ubyte * len(text)).from_address(id(text) + _SLICED_ASCII[1])
    ).toreadonly()


def ascii_text(view: memoryview, start: int, end: int) -> str:
    """str(view[start:end], "ascii") for a span a child named in the
    server's own body, built _SLICE_BYTES at a time: each slice is copied by
    ctypes.memmove, a foreign call that releases the GIL. One str() of a
    48 MP image's base64 (tens of MB, its fresh pages faulted in as they are
    written) held the GIL 25 ms in the lab. The span and its bytes are
    checked here: a child decodes untrusted input, so what it sends back is
    not trusted to be in the body or ASCII."""
    import numpy

    if not 0 <= start <= end <= len(view):
        raise OffloadProcessError(
            f"a json child named bytes {start}-{end} of a {len(view)}-byte body"
        )
    body = numpy.frombuffer(view, numpy.uint8)
    if _SLICED_ASCII is None:
        STATS.slow_path(
            JsonBodyParser.PATH,
            "strings_in_place_whole",
            "this Python has no PyUnicode_New with a compact ASCII layout",
        )
        return str(view[start:end], "ascii")
    new, offset = _SLICED_ASCII
    text = new(end - start, 127)
    target, source = id(text) + offset, body.ctypes.data
    for at in range(start, end, _SLICE_BYTES):
        stop = min(at + _SLICE_BYTES, end)
        if body[at:stop].max(initial=0) >= 0x80:
            raise OffloadProcessError(
                f"a json child named bytes {start}-{end} of the body as ASCII "
                f"text, but byte {at + int(numpy.argmax(body[at:stop] >= 0x80))} is not"
            )
        _memmove(target + at - start, source + at, stop - at)
    STATS.count(JsonBodyParser.PATH, "strings_in_place_sliced")
    return text


# ctypes.memmove is a CFUNCTYPE foreign function: the GIL is released for
# the copy (a test checks the flag; module-level so a test can count calls).
_memmove = ctypes.memmove


class _PersistentStrings(pickle.Unpickler):
    """Unpickles a child's answer: big strings by persistent id, and only the
    globals in `allowed` ((module, name) -> object; none for a parsed body).
    A child decodes untrusted bytes (JSON, images): an exploit there must not
    become code execution here through the pickle it sends back."""

    def __init__(
        self,
        file,
        strings: List[str],
        allowed: Optional[Dict[Tuple[str, str], Any]] = None,
        in_place: Optional[List[str]] = None,
    ) -> None:
        super().__init__(file)
        self._strings = strings
        self._allowed = allowed or {}
        self._in_place = in_place or []

    def persistent_load(self, pid: int) -> str:
        # -1 - i: string i of those read from the body in place.
        return self._strings[pid] if pid >= 0 else self._in_place[-1 - pid]

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self._allowed[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"a child's answer refers to {module}.{name}, which is not an "
                "allowed type (offload_process._mm_answer_types)"
            ) from None


class _ServerRequest(_PersistentStrings):
    """Unpickles what the server sends a child: trusted, any global."""

    def find_class(self, module: str, name: str) -> Any:
        return pickle.Unpickler.find_class(self, module, name)


class _BigStringsOut(pickle.Pickler):
    """Pickles with every string over _BIG_STRING_CHARS replaced by its index
    in `strings` (the strings themselves, encoded by the caller)."""

    def __init__(self, file) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.strings: List[str] = []

    def persistent_id(self, obj):
        if type(obj) is str and len(obj) > _BIG_STRING_CHARS:
            self.strings.append(obj)
            return len(self.strings) - 1
        return None


class _InPlaceStringsOut(_BigStringsOut):
    """_BigStringsOut for a body parsed with its in-place literals replaced by
    `marker` + index (_in_place_literals): each such placeholder pickles as
    persistent id -1 - index."""

    def __init__(self, file, marker: str) -> None:
        super().__init__(file)
        self._marker = marker

    def persistent_id(self, obj):
        if type(obj) is str and obj.startswith(self._marker):
            return -1 - int(obj[len(self._marker) :])
        return super().persistent_id(obj)


# The rest of a string literal with an escape in it, to its closing quote.
_ESCAPED_STRING_REST = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*"', re.S)


def _in_place_literals(document) -> List[Tuple[int, int]]:
    """(start, end) of the content of every string literal of `document` over
    _BIG_STRING_CHARS bytes that is printable ASCII with no escape, in order.
    Such a literal's value is its bytes; its content can be swapped for any
    other valid content without changing how the rest parses. A document that
    is not JSON gives spans orjson's own parse then rejects anyway (the spans
    follow JSON's lexing: a string ends at its first unescaped quote)."""
    import numpy

    spans = []
    find = document.find
    position = 0
    while True:
        start = find(b'"', position)
        end = find(b'"', start + 1) if start >= 0 else -1
        if end < 0:
            return spans
        if find(b"\\", start + 1, end) >= 0:
            rest = _ESCAPED_STRING_REST.match(document, start + 1)
            if rest is None:
                return spans
            position = rest.end()
            continue
        if end - start - 1 > _BIG_STRING_CHARS:
            content = numpy.frombuffer(document, numpy.uint8, end - start - 1, start + 1)
            if content.min() >= 0x20 and content.max() < 0x80:
                spans.append((start + 1, end))
        position = end + 1


def _parse_with_literals_in_place(document) -> Tuple[Any, List[Tuple[int, int]], str]:
    """orjson.loads(document) with each _in_place_literals span's value
    replaced by the placeholder `marker` + its index: (parsed, spans, marker).
    The marker holds 128 random bits, so no text of the body can forge one."""
    import orjson

    spans = _in_place_literals(document)
    if not spans:
        return orjson.loads(document), spans, ""
    marker = "\x00" + secrets.token_hex(16) + ":"
    escaped = b"\\u0000" + marker[1:].encode()
    view = memoryview(document)
    pieces, previous = [], 0
    for index, (start, end) in enumerate(spans):
        pieces += (view[previous:start], escaped + str(index).encode())
        previous = end
    pieces.append(view[previous:])
    return orjson.loads(b"".join(pieces)), spans, marker


class OffloadQueueFull(RuntimeError):
    """Every child of a pool is busy and its queue is at its bound (the
    server answers 503)."""


class ChildPool:
    """A pool of `workers` threads, each owning a child of one role (started
    on first use, replaced when it fails), so calls run in parallel off the
    event loop. At most `max_queued` calls wait for a thread; one more raises
    OffloadQueueFull. A call whose child fails, dies or misses its deadline is
    done in this process instead (counted, logged once per cause); a child
    that cannot start on this host is not tried again. Subclasses set PATH
    (the name in STATS) and _new_child."""

    PATH = ""
    THREAD_PREFIX = ""
    SETTINGS = ""  # the environment variables of its size and queue bound

    def __init__(
        self, workers: int, max_queued: int, max_queued_bytes: int = 0
    ) -> None:
        self.workers = max(1, int(workers))
        self.max_queued = int(max_queued)
        # 0: no bound in bytes. Otherwise a call is refused while the calls
        # queued or running hold more than this many payload bytes together
        # (one call alone always gets in: its size is bounded elsewhere).
        self.max_queued_bytes = int(max_queued_bytes)
        self._queued_bytes = 0
        self._queued_bytes_lock = threading.Lock()
        self._executor = None
        self._local = threading.local()
        self._processes: List[_Child] = []
        self._processes_lock = threading.Lock()
        self._disabled = False  # the child cannot start here
        self._closed = False

    def _new_child(self) -> _Child:
        raise NotImplementedError

    def _submit(self, function, *args, counted: bool = True, size: int = 0):
        """function(*args) on a pool thread, as a concurrent Future; a
        counted call raises OffloadQueueFull when the queue is at its bound
        in calls, or in bytes with this call's `size`."""
        from concurrent.futures import ThreadPoolExecutor

        if self._executor is None:
            self._closed = False
            self._executor = ThreadPoolExecutor(
                max_workers=self.workers, thread_name_prefix=self.THREAD_PREFIX
            )
        if not counted:
            return self._executor.submit(function, *args)
        if STATS.depth(self.PATH) >= self.workers + self.max_queued:
            STATS.count(self.PATH, "rejected")
            raise OffloadQueueFull(
                f"{self.workers} {self.PATH} workers busy and {self.max_queued} "
                f"calls queued ({self.SETTINGS})"
            )
        with self._queued_bytes_lock:
            held = self._queued_bytes
            if self.max_queued_bytes and held and held + size > self.max_queued_bytes:
                STATS.count(self.PATH, "rejected")
                raise OffloadQueueFull(
                    f"{held} bytes of {self.PATH} calls queued or running, and "
                    f"{size} more would pass {self.max_queued_bytes} "
                    f"({self.SETTINGS})"
                )
            self._queued_bytes += size
        STATS.add_depth(self.PATH, 1)
        future = self._executor.submit(function, *args)
        future.add_done_callback(lambda _: self._done(size))
        return future

    def _done(self, size: int) -> None:
        STATS.add_depth(self.PATH, -1)
        with self._queued_bytes_lock:
            self._queued_bytes -= size

    def _child(self) -> Optional[_Child]:
        """This thread's child, started (or replaced) if needed; None when
        children are disabled or the pool is closed."""
        if self._closed:
            return None
        process = getattr(self._local, "process", None)
        if process is not None and not process.closed:
            return process
        if self._disabled:
            return None
        if process is not None:
            STATS.count(self.PATH, "restarts")
        process = self._new_child()  # no lock held: a slow start blocks only this thread
        with self._processes_lock:
            self._processes = [p for p in self._processes if not p.closed]
            self._processes.append(process)
        self._local.process = process
        return process

    def _recycle_if_grown(self, process: _Child) -> None:
        """Replace a child that kept more memory than an idle one should."""
        if process.grown():
            process.close()
            self._local.process = None
            STATS.count(self.PATH, "recycles")

    def _fallback(self, error: BaseException) -> None:
        """Count and log why a call is done in this process."""
        if isinstance(error, ChildStartError):
            STATS.count(self.PATH, "start_failures")
            self._disabled = True
            cause = "cannot start"
        elif isinstance(error, ChildDeadlineError):
            STATS.count(self.PATH, "deadline_kills")
            cause = "deadline"
        elif isinstance(error, ChildReportedError):  # still in step: the child stays
            cause = "child error"
        else:  # the child failed, or its answer did not read back
            cause = "child failed"
            process = getattr(self._local, "process", None)
            if process is not None:
                process.kill()
        STATS.fallback(self.PATH, cause, error)

    def close(self) -> None:
        """End the children and the threads (the next call starts them
        again, and tries a child again)."""
        self._closed = True
        self._disabled = False
        self._kill_children()  # a running call fails at once and falls back
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        self._kill_children()  # any started while the threads finished
        self._local = threading.local()

    def _kill_children(self) -> None:
        with self._processes_lock:
            processes, self._processes = self._processes, []
        for process in processes:
            process.kill()


# The JSON pool's name stays what the 503 handler and the tests catch.
BodyQueueFull = OffloadQueueFull


class JsonBodyParser(ChildPool):
    """orjson.loads for large documents, off the event loop, in a pool of
    JsonProcess children (SGLANG_JSON_PARSE_PROCESSES,
    SGLANG_JSON_PARSE_MAX_QUEUED)."""

    PATH = "json_process"
    THREAD_PREFIX = "sglang-body-parse"
    SETTINGS = (
        "SGLANG_JSON_PARSE_PROCESSES, SGLANG_JSON_PARSE_MAX_QUEUED, "
        "SGLANG_JSON_PARSE_MAX_QUEUED_BYTES"
    )

    def __init__(
        self,
        workers: Optional[int] = None,
        max_queued: Optional[int] = None,
        max_queued_bytes: Optional[int] = None,
    ) -> None:
        super().__init__(
            workers
            or env_number("SGLANG_JSON_PARSE_PROCESSES", min(4, os.cpu_count() or 1)),
            max_queued
            if max_queued is not None
            else env_number("SGLANG_JSON_PARSE_MAX_QUEUED", 64),
            # Bodies wait whole in memory: 64 queued 1 GiB bodies would be
            # 64 GiB. 2 GiB by default, two bodies at the 1 GiB body limit.
            max_queued_bytes
            if max_queued_bytes is not None
            else env_number("SGLANG_JSON_PARSE_MAX_QUEUED_BYTES", 2 << 30, minimum=0),
        )

    @classmethod
    def from_env(cls) -> Optional["JsonBodyParser"]:
        """The HTTP server's parser, or None when SGLANG_JSON_PARSE_PROCESSES
        is 0 (bodies are parsed in this process, as 0.5.19 does)."""
        workers = int(
            env_number(
                "SGLANG_JSON_PARSE_PROCESSES", min(4, os.cpu_count() or 1), minimum=0
            )
        )
        return cls(workers) if workers else None

    def _new_child(self) -> JsonProcess:
        return JsonProcess()

    async def loads(self, document: bytes) -> Any:
        import asyncio

        return await asyncio.wrap_future(
            self._submit(self._loads, document, size=len(document))
        )

    def _loads(self, document: bytes) -> Any:
        import orjson

        try:
            process = self._child()
            if process is not None:
                parsed = process.loads(document)
                STATS.count(self.PATH, "uses")
                return parsed
            STATS.fallback(self.PATH, "disabled", None)
        except orjson.JSONDecodeError:
            STATS.count(self.PATH, "uses")
            raise  # orjson's own error, from the child's parse
        except Exception as error:
            self._fallback(error)
        # Through a view: orjson takes bytes and bytearray by exact type, and
        # http_body's LargeBody is a bytearray subclass.
        return orjson.loads(memoryview(document))


# ---- multimodal processing in child processes -----------------------------

MM_DEADLINE_S_PER_ITEM = env_number("SGLANG_MM_PROCESS_DEADLINE_SECS_PER_ITEM", 10.0)
# Importing torch, transformers and the model's processor module takes
# 10-45 s on a small host (the tokenizer and JSON children import neither).
MM_START_DEADLINE_S = env_number("SGLANG_MM_PROCESS_START_DEADLINE_SECS", 300.0)
_SHM_DIR = "/dev/shm"
_SEGMENT_PREFIX = "sgl_shm_"
_OWNER_PREFIX = "sgl_shm_owner_"
_STAGING_SUFFIX = ".new"


class SegmentOwner:
    """This process's claim on the /dev/shm segments it and its multimodal
    children make. Each such segment is named sgl_shm_<kind>_<token>_<n>, and
    the owner holds a lock (flock) on /dev/shm/sgl_shm_owner_<token> for its
    whole life. The kernel drops the lock when the process ends, however it
    ends (SIGKILL, the OOM killer, `docker kill`), so sweep_dead_owners tells
    a dead owner's segments from a live one's without trusting pids: with
    `ipc: host`, replicas in other pid namespaces share this /dev/shm."""

    def __init__(self, shm_dir: str = _SHM_DIR) -> None:
        self.pid = os.getpid()
        for _ in range(3):
            self.token = secrets.token_hex(6)
            self.path = os.path.join(shm_dir, _OWNER_PREFIX + self.token)
            # Locked under a staging name, then renamed: a sweep never finds
            # an owner file that is not locked yet.
            staging = self.path + _STAGING_SUFFIX
            fd = os.open(
                staging, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o600
            )
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)
                os.rename(staging, self.path)
            except FileNotFoundError:  # a sweep took the staging file first
                os.close(fd)
                continue
            self._fd = fd  # open, and so locked, until this process ends
            return
        raise OSError(f"could not claim an owner file in {shm_dir}")

    def prefix(self, kind: str) -> str:
        return f"{_SEGMENT_PREFIX}{kind}_{self.token}_"


def sweep_dead_owners(shm_dir: str = _SHM_DIR) -> Tuple[int, int]:
    """Unlink every segment of every owner that is gone (its owner file's lock
    is free), then the owner file; (segments, bytes) unlinked."""
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return 0, 0
    segments = size = 0
    for name in names:
        if not name.startswith(_OWNER_PREFIX):
            continue
        path = os.path.join(shm_dir, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # its owner lives
            os.close(fd)
            continue
        try:
            token = name[len(_OWNER_PREFIX) :]
            if token.endswith(_STAGING_SUFFIX):
                token = token[: -len(_STAGING_SUFFIX)]
            marker = f"_{token}_"
            for segment in names:
                if (
                    segment.startswith(_SEGMENT_PREFIX)
                    and not segment.startswith(_OWNER_PREFIX)
                    and marker in segment
                ):
                    segment_path = os.path.join(shm_dir, segment)
                    try:
                        segment_size = os.stat(segment_path).st_size
                        os.unlink(segment_path)
                    except FileNotFoundError:  # unlinked by its reader meanwhile
                        continue
                    segments += 1
                    size += segment_size
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        finally:
            os.close(fd)
    return segments, size


_owner: Optional[SegmentOwner] = None
_owner_lock = threading.Lock()


def segment_owner() -> Optional[SegmentOwner]:
    """This process's SegmentOwner, made on first use after a sweep of the
    dead owners' segments (so a server start reclaims what a killed one
    left); None, logged, where /dev/shm cannot hold an owner file."""
    global _owner
    with _owner_lock:
        if _owner is not None and _owner.pid == os.getpid():
            return _owner
        segments, size = sweep_dead_owners()
        if segments:
            STATS.count("segments", "swept", segments)
            logger.warning(
                "Unlinked %d shared memory segment(s) (%.1f MiB) that servers "
                "which died left in %s.",
                segments,
                size / (1 << 20),
                _SHM_DIR,
            )
        try:
            _owner = SegmentOwner()
        except OSError as error:
            STATS.fallback("segments", "no owner file", error)
            _owner = None
        return _owner


# The segment names a caller chose for the segments the calling thread creates
# (segment_names); unset: owned_segment_name makes them.
_chosen_names = threading.local()


@contextlib.contextmanager
def segment_names(names: Iterator[str]) -> Iterator[None]:
    """Within it, owned_segment_name on this thread returns next(names): a
    multimodal child names its segments with the prefix its call was given,
    so the server can find and unlink them by name if the call fails."""
    _chosen_names.names = names
    try:
        yield
    finally:
        _chosen_names.names = None


def owned_segment_name(kind: str) -> str:
    """A new segment name (SGLang's ShmPointerMMData calls it for every
    segment): the caller's choice within segment_names, else one that carries
    this process's owner token (the stock pid-stamped name where no owner file
    can be made)."""
    chosen = getattr(_chosen_names, "names", None)
    if chosen is not None:
        return next(chosen)
    owner = segment_owner()
    if owner is None:
        from sglang.srt.utils.stale_shm_cleanup import make_shm_name

        return make_shm_name(kind)
    return owner.prefix(kind) + secrets.token_hex(4)


def unlink_segments(prefix: str) -> int:
    """Unlink every shared memory segment whose name starts with `prefix`
    (what a multimodal child created for one call); the number unlinked."""
    try:
        names = [n for n in os.listdir(_SHM_DIR) if n.startswith(prefix)]
    except OSError:
        return 0
    done = 0
    for name in names:
        try:
            os.unlink(os.path.join(_SHM_DIR, name))
            done += 1
        except FileNotFoundError:
            pass
        except OSError:
            logger.warning("could not unlink /dev/shm/%s", name, exc_info=True)
    return done


class MultimodalRefused(OffloadProcessError):
    """A multimodal request whose child was killed mid-call: refused (the
    tokenizer manager answers 503 with this message), never redone in the
    server."""


class MultimodalProcess(_Child):
    """A child holding its own copy of the server's multimodal processor
    (media decoding and the HF processor run there); it writes the features
    into shared memory segments itself and answers with their descriptors."""

    def __init__(self, setup: bytes) -> None:
        owner = segment_owner()
        super().__init__(
            "mm",
            setup,
            start_deadline_s=MM_START_DEADLINE_S,
            owner_token=owner.token if owner is not None else "-",
        )

    def process(self, kwargs: dict, items: int, segment_prefix: str):
        """process_mm_data_async(**kwargs) in the child. Large strings (base64
        images) go as frames of their own, one copy each. Raises ValueError
        for a client error the processor raised (a corrupt or oversized
        image), OffloadProcessError for anything else."""
        skeleton = io.BytesIO()
        pickler = _BigStringsOut(skeleton)
        pickler.dump({"kwargs": kwargs, "segment_prefix": segment_prefix})
        pickler.clear_memo()
        strings = pickler.strings
        payload_bytes = len(skeleton.getbuffer()) + sum(len(t) for t in strings)

        def frames():
            yield skeleton.getvalue()
            for text in strings:
                view = ascii_bytes(text)
                if view is not None:
                    STATS.count("mm_process", "strings_zero_copy")
                    yield view
                else:
                    # Non-ASCII text (a long prompt): one UTF-8 copy, holding the GIL.
                    STATS.count("mm_process", "strings_encoded")
                    yield text.encode("utf-8", "surrogatepass")

        try:
            result = self._call(
                b"\x00",
                frames(),
                payload_bytes,
                extra_s=items * MM_DEADLINE_S_PER_ITEM,
            )
        except ChildReportedError as report:
            if report.kind == "ValueError":
                raise ValueError(report.message) from None
            raise
        answer = _PersistentStrings(
            io.BytesIO(b"".join(result)), [], _mm_answer_types()
        ).load()
        if not (isinstance(answer, tuple) and len(answer) == 2):
            raise OffloadProcessError(f"an mm child answered a {type(answer).__name__}")
        output, how = answer
        if how == "staged":
            STATS.count("mm_process", "images_one_at_a_time")
        elif how is not None:
            STATS.slow_path("mm_process", "images_in_one_call", how)
        return output


class MultimodalProcessPool(ChildPool):
    """The multimodal processor in a pool of MultimodalProcess children
    (SGLANG_MM_PROCESSES, SGLANG_MM_PROCESS_MAX_QUEUED). The segments a call
    creates belong to it until it returns (then to the request, which the
    scheduler or the tokenizer manager unlinks): a call that fails, misses
    its deadline or whose caller is cancelled unlinks them by their name
    prefix. A call whose child was killed (a signal, or its deadline) raises
    MultimodalRefused; one that failed otherwise (the child could not start,
    reported an error, or answered with a type that is not allowed) is done
    in-process once (`in_process`), counted as a fallback."""

    PATH = "mm_process"
    THREAD_PREFIX = "sglang-mm-process"
    SETTINGS = "SGLANG_MM_PROCESSES, SGLANG_MM_PROCESS_MAX_QUEUED"

    def __init__(self, setup: bytes, workers: int, max_queued: int) -> None:
        super().__init__(workers, max_queued)
        self._setup = setup
        self._sequence = iter(range(1 << 62))
        self._sequence_lock = threading.Lock()

    def _new_child(self) -> MultimodalProcess:
        return MultimodalProcess(self._setup)

    def prestart(self) -> None:
        """Start every child now (in the pool's threads), not on the first
        image request."""
        for _ in range(self.workers):
            self._submit(self._start_one, counted=False)

    def _start_one(self) -> None:
        try:
            process = self._child()
            if process is not None:
                process._wait_ready()
        except Exception as error:
            self._fallback(error)

    def _segment_prefix(self) -> str:
        # sgl_shm_mmproc<n>_<owner token>_<k>: a sweep finds them by the
        # token once this (the owning) process is gone.
        with self._sequence_lock:
            call = next(self._sequence)
        owner = segment_owner()
        if owner is None:
            return f"sgl_shm_mmproc{call}_{os.getpid()}_"
        return owner.prefix(f"mmproc{call}")

    async def process(self, kwargs: dict, items: int, in_process):
        import asyncio

        prefix = self._segment_prefix()
        future = self._submit(self._process, kwargs, items, prefix)
        try:
            done, result = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            # A call still queued never runs; a running one ends in the
            # child, and what it wrote is unlinked then.
            future.add_done_callback(lambda _: unlink_segments(prefix))
            raise
        if done:
            return result
        return await in_process()

    def _process(self, kwargs: dict, items: int, prefix: str):
        try:
            process = self._child()
            if process is None:
                STATS.fallback(self.PATH, "disabled", None)
                return False, None
            result = process.process(kwargs, items, prefix)
            STATS.count(self.PATH, "uses")
            self._recycle_if_grown(process)
            return True, result
        except ValueError:
            STATS.count(self.PATH, "uses")
            unlink_segments(prefix)
            raise  # the client's error, as the processor raised it
        except (ChildKilledError, ChildDeadlineError) as error:
            # A child killed mid-call (by the kernel for memory, by an
            # operator, or at its deadline) is not retried here: the same
            # work would reach the same peak, or run as long, in the server.
            unlink_segments(prefix)
            STATS.count(
                self.PATH,
                "killed" if isinstance(error, ChildKilledError) else "deadline_kills",
            )
            STATS.count(self.PATH, "refused")
            raise MultimodalRefused(
                f"image processing failed and is not retried in the server: {error}"
            ) from None
        except Exception as error:
            unlink_segments(prefix)
            self._fallback(error)
            return False, None


# ---- the child side ------------------------------------------------------


def _child_read_exact(stream: BinaryIO, size: int) -> bytearray:
    data = bytearray(size)
    view = memoryview(data)
    done = 0
    while done < size:
        got = stream.readinto(view[done : done + _SLICE_BYTES])
        if not got:
            raise EOFError(f"stream ended after {done} of {size} bytes")
        done += got
    return data


def _child_read_frame(stream: BinaryIO) -> bytearray:
    (size,) = _LENGTH.unpack(_child_read_exact(stream, _LENGTH.size))
    return _child_read_exact(stream, size)


def _child_read_payload(stream: BinaryIO) -> bytearray:
    # Frames appended to one buffer (grown in place by mremap), not joined at
    # the end: a join would hold the payload twice at its peak.
    payload = bytearray()
    while True:
        frame = _child_read_frame(stream)
        if not frame:
            return payload
        payload += frame


def _keep_heap(megabytes: float) -> bool:
    """Have glibc keep up to `megabytes` of freed heap (JSON_KEEP_HEAP_MB);
    False when 0 or where mallopt refuses (not glibc)."""
    size = int(megabytes * (1 << 20))
    if size <= 0:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, size)) and bool(
            libc.mallopt(_M_TRIM_THRESHOLD, size)
        )
    except (OSError, AttributeError):
        return False


def _release_memory() -> None:
    # Freed payloads stay in glibc's heap otherwise: an idle child would keep
    # the RSS of its largest request.
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _answer(out: BinaryIO, call) -> None:
    """Write call()'s result frames (an iterable of buffers), or report the
    error it raised (kind, message, details)."""
    try:
        frames = call()
    except Exception as error:  # reported to the caller, which falls back
        details = getattr(error, "offload_details", None)
        report = {"kind": type(error).__name__, "message": str(error), "details": details}
        out.write(b"-")
        _write_frame(out, json.dumps(report).encode("utf-8"))
        out.flush()
        return
    out.write(b"+")
    for frame in frames:
        _write_frame(out, frame)
    _write_frame(out, b"")
    out.flush()


def _serve_tokenizer(inp: BinaryIO, out: BinaryIO) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(str(_child_read_frame(inp), "utf-8"))
    settings = json.loads(_child_read_frame(inp))
    # transformers encodes with padding and truncation off unless a call asks.
    tokenizer.no_padding()
    tokenizer.no_truncation()
    tokenizer.encode_special_tokens = settings["encode_special_tokens"]
    # The size when ready is the baseline of grown(): without the setup's
    # freed buffers (the backend JSON), or a child would look smaller after
    # its first request than when it started.
    _release_memory()
    out.write(b"R")
    out.flush()
    while flag := inp.read(1):
        text = str(_child_read_payload(inp), "utf-8")

        def encode():
            ids = tokenizer.encode(text, add_special_tokens=flag == b"\x01").ids
            return [memoryview(array("q", ids)).cast("B")]

        _answer(out, encode)
        big = len(text) > _BIG_STRING_CHARS
        del text, encode
        if big:
            _release_memory()


def _serve_json(inp: BinaryIO, out: BinaryIO) -> None:
    import orjson

    # Pickling recurses per nesting level; orjson accepts 1024 levels.
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
    # With a kept heap, what a body freed stays for the next one (bounded);
    # without, it is returned after every body.
    release = (lambda: None) if _keep_heap(JSON_KEEP_HEAP_MB) else _release_memory
    out.write(b"R")
    out.flush()
    while inp.read(1):
        document = _child_read_payload(inp)

        def parse():
            nonlocal document
            try:
                try:
                    parsed, spans, marker = _parse_with_literals_in_place(document)
                except orjson.JSONDecodeError:
                    # Positions in the error are the whole document's.
                    parsed, spans, marker = orjson.loads(document), [], ""
            except orjson.JSONDecodeError as error:
                error.offload_details = {
                    "str": str(error),
                    "msg": error.msg,
                    "pos": error.pos,
                    "lineno": error.lineno,
                    "colno": error.colno,
                }
                raise
            document = None  # the body is not needed past the parse
            skeleton = io.BytesIO()
            pickler = _InPlaceStringsOut(skeleton, marker) if marker else _BigStringsOut(skeleton)
            pickler.dump(parsed)
            # The memo references every container of the parsed body (and so
            # every string in it): cleared, only pickler.strings keeps them.
            pickler.clear_memo()
            del parsed

            def frames():
                yield skeleton.getvalue()
                # Led by the count: an empty frame would end the answer.
                yield array("q", [len(spans)] + [offset for span in spans for offset in span]).tobytes()
                strings = pickler.strings
                for index in range(len(strings)):
                    # One UTF-8 copy at a time: the child's peak is the parsed
                    # body plus one string, not two copies of every string.
                    encoded = strings[index].encode("utf-8", "surrogatepass")
                    strings[index] = None
                    yield encoded
                    del encoded
                # Before the end frame, so the parent reads the answer only
                # once this child holds nothing of the body.
                release()

            return frames()

        _answer(out, parse)
        if document is not None:  # rejected: the body is still here
            document = None
            release()
        del parse


def mm_setup(mm_processor, server_args, hf_config, hf_processor, transport_mode) -> bytes:
    """The mm role's setup frame: what the child needs to build the same
    processor (its class, by reference; the HF processor, pickled)."""
    return pickle.dumps(
        {
            "processor_cls": type(mm_processor),
            "server_args": server_args,
            "hf_config": hf_config,
            "hf_processor": hf_processor,
            "transport_mode": transport_mode,
        },
        protocol=pickle.HIGHEST_PROTOCOL,
    )


def _adopt_segment(shm_name, shape, dtype, precomputed_hash):
    """A child's segment as SGLang's pointer (the scheduler unpickles that
    class), owned here but not mapped: this process only forwards it to the
    scheduler or unlinks it."""
    from sglang.srt.managers.mm_utils import ShmPointerMMData

    pointer = ShmPointerMMData.__new__(ShmPointerMMData)
    pointer.shm_name, pointer.shape, pointer.dtype = shm_name, shape, dtype
    pointer.precomputed_hash = precomputed_hash
    pointer._shm_handle = pointer.tensor = pointer._materialization_error = None
    # Owned until handed to the scheduler (hand_off_shm_features): its
    # __del__ unlinks a segment of a request dropped on any other path.
    pointer._owned = True
    return pointer


def uses_shm_features() -> bool:
    """Whether dispatch hands multimodal features to the scheduler as shared
    memory segments (single node, tokenizer in this server): SGLang's own
    test in wrap_shm_features."""
    from sglang.srt.managers.mm_utils import _get_is_default_transport
    from sglang.srt.runtime_context import get_serving

    return not (_get_is_default_transport() or get_serving().skip_tokenizer_init)


def item_shm_pointers(item):
    """The ShmPointerMMData of a multimodal item's feature and precomputed
    embeddings (each a pointer, or a list holding some)."""
    from sglang.srt.managers.mm_utils import ShmPointerMMData

    for value in (item.feature, item.precomputed_embeddings):
        if isinstance(value, ShmPointerMMData):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (t for t in value if isinstance(t, ShmPointerMMData))


def hand_off_shm_features(obj) -> None:
    """After dispatch: the scheduler owns (and unlinks) every segment of the
    request, including those a multimodal child created."""
    if obj.mm_inputs:
        for item in obj.mm_inputs.mm_items:
            for pointer in item_shm_pointers(item):
                pointer._owned = False


def _tensor_from_bytes(data: bytes, dtype: str, shape: Tuple[int, ...]):
    """A tensor a child sent as its raw bytes (_SegmentsOut)."""
    import torch

    kind = getattr(torch, dtype, None)
    if not isinstance(kind, torch.dtype):
        raise pickle.UnpicklingError(f"not a torch dtype: {dtype!r}")
    if not data:
        return torch.empty(shape, dtype=kind)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(kind).reshape(shape)


def _enum_member(cls, name: str):
    import enum

    if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
        raise pickle.UnpicklingError(f"not an enum: {cls!r}")
    return cls[name]


def _rebuild_struct(cls, fields: dict):
    """msgspec's rebuild of a Struct (MultimodalDataItem), for a class the
    unpickler already allowed."""
    from msgspec._utils import rebuild

    return rebuild(cls, fields)


_mm_types: Optional[Dict[Tuple[str, str], Any]] = None


def _mm_answer_types() -> Dict[Tuple[str, str], Any]:
    """Every global a multimodal child's answer may name: the processor
    output's classes, torch's dtypes and Size, and this module's rebuilders
    (under both names: the child runs this file as __main__). Built on first
    use (it imports torch and sglang; the child side needs neither here)."""
    global _mm_types
    if _mm_types is None:
        import torch

        from sglang.srt.managers import schedule_batch

        allowed: Dict[Tuple[str, str], Any] = {
            ("collections", "OrderedDict"): collections.OrderedDict,
            ("torch", "Size"): torch.Size,
        }
        for name in dir(torch):
            if isinstance(getattr(torch, name, None), torch.dtype):
                allowed[("torch", name)] = getattr(torch, name)
        for cls in (
            schedule_batch.MultimodalProcessorOutput,
            schedule_batch.MultimodalDataItem,
            schedule_batch.Modality,
            schedule_batch.MultimodalInputFormat,
        ):
            allowed[(cls.__module__, cls.__qualname__)] = cls
        allowed[("msgspec._utils", "rebuild")] = _rebuild_struct
        for function in (_adopt_segment, _tensor_from_bytes, _enum_member):
            for module in ("__main__", __name__):
                allowed[(module, function.__name__)] = function
        _mm_types = allowed
    return _mm_types


class _SegmentsOut(pickle.Pickler):
    """Pickles a processor output in the terms the parent's unpickler allows
    (_mm_answer_types): each shared memory pointer as its descriptor only
    (_adopt_segment: the parent never maps it), any other tensor as its raw
    bytes, an enum member by name."""

    def reducer_override(self, obj):
        import enum

        import torch

        from sglang.srt.managers.mm_utils import ShmPointerMMData

        if type(obj) is ShmPointerMMData:
            return _adopt_segment, (
                obj.shm_name,
                obj.shape,
                obj.dtype,
                obj.precomputed_hash,
            )
        if isinstance(obj, torch.Tensor):
            flat = obj.detach().cpu().contiguous().reshape(-1)
            return _tensor_from_bytes, (
                flat.view(torch.uint8).numpy().tobytes(),
                str(obj.dtype).removeprefix("torch."),
                tuple(obj.shape),
            )
        if isinstance(obj, enum.Enum):
            return _enum_member, (type(obj), obj.name)
        return NotImplemented


class _Unstageable(Exception):
    """The image processor's output for one image is not a plain
    (pixel_values, image_grid_thw) pair: the request's images go in one
    call instead."""


class _StagedPixels:
    """An anonymous memory file (memfd: freed with the process, no name to
    leak) the pixel values of a request's images are appended to, one image
    at a time, and then mapped as the batch's pixel_values tensor. After an
    item is copied into its segment, release() gives its pages back
    (MADV_REMOVE), so the features exist about once, not twice."""

    def __init__(self) -> None:
        self._fd = os.memfd_create("sgl_mm_staging", os.MFD_CLOEXEC)
        self._size = 0
        self._map: Optional[mmap.mmap] = None
        self._base = 0

    def append(self, tensor) -> None:
        import torch

        data = tensor.contiguous().reshape(-1).view(torch.uint8).numpy()
        view = memoryview(data)
        while view:
            written = os.pwrite(self._fd, view, self._size)
            self._size += written
            view = view[written:]

    def tensor(self, dtype, width: int):
        import torch

        self._map = mmap.mmap(self._fd, self._size)
        flat = torch.frombuffer(self._map, dtype=torch.uint8)
        self._base = flat.data_ptr()
        return flat.view(dtype).reshape(-1, width)

    def release(self, tensor) -> None:
        """Free the whole pages behind `tensor` if it is a view of this file."""
        if self._map is None:
            return
        start = tensor.data_ptr() - self._base
        end = start + tensor.numel() * tensor.element_size()
        if start < 0 or end > self._size:
            return
        first, length = whole_pages(start, end)
        if length > 0:
            self._map.madvise(mmap.MADV_REMOVE, first, length)

    def close(self) -> None:
        # The mapping stays until the last tensor on it is gone.
        os.close(self._fd)


class _ImagesOneAtATime:
    """Stands in for an mm child's HF image processor: a call with several
    images runs the processor on one image at a time and appends each
    image's pixel values to a _StagedPixels file as soon as they exist. In
    one call (0.5.19) the processor's per-image arrays, their stacking and
    the copy into segments held 2.6-3.1x the features at once (64 x 9 MP:
    21.8 GB). The processor works on each image alone (its own resize and
    patches), so the staged batch is the one-call batch, byte for byte."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.staged: Optional[_StagedPixels] = None
        self.unstaged: Optional[str] = None

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def __call__(self, images, **kwargs):
        if not isinstance(images, list) or len(images) < 2:
            return self._inner(images, **kwargs)
        try:
            return self._one_at_a_time(images, kwargs)
        except _Unstageable as reason:
            self.done()
            self.unstaged = str(reason)
            return self._inner(images, **kwargs)

    def _one_at_a_time(self, images: list, kwargs: dict):
        import torch
        from transformers import BatchFeature

        self.staged = staged = _StagedPixels()
        grids = []
        layout = None
        for image in images:
            part = self._inner([image], **kwargs)
            if set(part.keys()) != {"pixel_values", "image_grid_thw"}:
                raise _Unstageable(f"the image processor returned {sorted(part.keys())}")
            pixels = torch.as_tensor(part["pixel_values"])
            if pixels.dim() != 2 or layout not in (None, (pixels.dtype, pixels.shape[1])):
                raise _Unstageable(
                    f"pixel values of shape {tuple(pixels.shape)} and {pixels.dtype}"
                )
            layout = (pixels.dtype, pixels.shape[1])
            staged.append(pixels)
            grids.append(torch.as_tensor(part["image_grid_thw"]))
            del part, pixels
        return BatchFeature(
            {
                "pixel_values": staged.tensor(*layout),
                "image_grid_thw": torch.cat(grids),
            }
        )

    def done(self) -> None:
        if self.staged is not None:
            self.staged.close()
            self.staged = None


def _images_one_at_a_time(processor) -> Optional[_ImagesOneAtATime]:
    """Install _ImagesOneAtATime on the sglang processor's HF processor."""
    hf_processor = getattr(processor, "_processor", None)
    inner = getattr(hf_processor, "image_processor", None)
    if inner is None or not callable(inner):
        return None
    images = _ImagesOneAtATime(inner)
    hf_processor.image_processor = images
    return images


def _serve_mm(inp: BinaryIO, out: BinaryIO) -> None:
    import asyncio
    import itertools
    from types import SimpleNamespace

    from sglang.srt.environ import envs
    from multiprocessing import resource_tracker

    from sglang.srt.managers.mm_utils import wrap_shm_features
    from sglang.srt.runtime_context import publish

    # SGLang's ShmPointerMMData names segments through the package module
    # (this file imported as glm53_offload.offload_process), not through this
    # script's __main__: the names are chosen there.
    from glm53_offload.offload_process import segment_names

    spec = pickle.loads(_child_read_frame(inp))
    publish(spec["server_args"], role="tokenizer")
    # skip_mm_pool: no processor threads here; this process is the worker.
    processor = spec["processor_cls"](
        spec["hf_config"],
        spec["server_args"],
        spec["hf_processor"],
        spec["transport_mode"],
        skip_mm_pool=True,
    )
    shm = uses_shm_features()
    images = _images_one_at_a_time(processor)
    loop = asyncio.new_event_loop()
    out.write(b"R")
    out.flush()
    while inp.read(1):
        skeleton = _child_read_frame(inp)
        strings = []
        while frame := _child_read_frame(inp):
            strings.append(str(frame, "utf-8", "surrogatepass"))
        request = _ServerRequest(io.BytesIO(skeleton), strings).load()
        del skeleton, strings

        def process():
            # How this request's images were processed, for the parent's
            # counters: None (fewer than two), "staged", or why not.
            if images is not None:
                images.unstaged = None
            output = loop.run_until_complete(
                processor.process_mm_data_async(**request["kwargs"])
            )
            staged = images.staged if images is not None else None
            how = None
            if len(request["kwargs"].get("image_data") or ()) > 1:
                if images is None:
                    how = "the processor has no separate image processor"
                elif staged is not None:
                    how = "staged"
                else:
                    how = images.unstaged or "its image processor was not called"
            if output is not None and output.mm_items:
                names = (f"{request['segment_prefix']}{n}" for n in itertools.count())
                # Item by item: hash, copy into its segment, give its staged
                # pages back; never all features twice.
                for item in output.mm_items:
                    sources = (item.feature, item.precomputed_embeddings)
                    if envs.SGLANG_MM_PRECOMPUTE_HASH.get():
                        item.set_pad_value()
                    if not shm:
                        continue
                    with segment_names(names):
                        wrap_shm_features(
                            SimpleNamespace(mm_inputs=SimpleNamespace(mm_items=[item]))
                        )
                    if staged is not None:
                        for source in sources:
                            if hasattr(source, "data_ptr"):
                                staged.release(source)
                    del sources
                    # This process's resource tracker would unlink them when
                    # it exits; they belong to the server and the scheduler.
                    for pointer in item_shm_pointers(item):
                        resource_tracker.unregister(
                            "/" + pointer.shm_name, "shared_memory"
                        )
            buffer = io.BytesIO()
            _SegmentsOut(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(
                (output, how)
            )
            view = buffer.getbuffer()
            return [view[i : i + _SLICE_BYTES] for i in range(0, len(view), _SLICE_BYTES)]

        try:
            _answer(out, process)
        finally:
            if images is not None:
                images.done()
        del request, process
        _release_memory()


_ROLES = {"tokenizer": _serve_tokenizer, "json": _serve_json, "mm": _serve_mm}
_PR_SET_PDEATHSIG = 1
# How long an mm child whose server died waits for the server's owner lock to
# be released: the death signal comes when the thread that started the child
# ends, and the lock only when the server's last thread has closed its files.
_OWNER_RELEASE_WAIT_S = 5.0


def _sweep_after_owner(token: str) -> None:
    """Unlink the dead owner `token`'s segments once its lock is free."""
    path = os.path.join(_SHM_DIR, _OWNER_PREFIX + token)
    end = time.monotonic() + _OWNER_RELEASE_WAIT_S
    while True:
        sweep_dead_owners()
        if not os.path.exists(path) or time.monotonic() > end:
            return
        time.sleep(0.01)


def _die_with_parent(role: str, parent_pid: int, owner_token: str) -> None:
    """End this child when the thread that started it ends, however it ends
    (PR_SET_PDEATHSIG). An mm child first unlinks what its dead server owned
    (the segments it was writing, and those the server held), so a SIGKILLed
    server leaves nothing in /dev/shm; the others have nothing to clean and
    are SIGKILLed."""
    import ctypes

    if role == "mm":

        def on_parent_death(signum, frame):
            if owner_token != "-":
                _sweep_after_owner(owner_token)
            os._exit(0)

        signal.signal(signal.SIGTERM, on_parent_death)
        death_signal = signal.SIGTERM
    else:
        death_signal = signal.SIGKILL
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(death_signal), 0, 0, 0) != 0:
        return  # not Linux: the parent's close() still ends its children
    if os.getppid() != parent_pid:  # the parent died before prctl
        os.kill(os.getpid(), death_signal)


def _main() -> None:
    if len(sys.argv) > 3:
        _die_with_parent(sys.argv[1], int(sys.argv[2]), sys.argv[3])
    os.nice(CHILD_NICE)
    # The protocol owns fd 1; anything a library prints goes to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    _ROLES[sys.argv[1]](sys.stdin.buffer, out)


if __name__ == "__main__":
    _main()
