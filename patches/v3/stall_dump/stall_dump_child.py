"""One stall-dump scenario in a child process (started by stall_dump_suite.py).

Each scenario arms the module under test on an event loop, blocks that loop
in a known way and prints ``MARK name utc=... value`` lines to stderr, the
same file the dumps go to, so the suite can order and time them.  The value
of $STALL_TEST_SECRET is held in the blocked frames' locals (and, for the
uvicorn scenario, in the request body); it must never reach a dump.
"""

# No "from __future__ import annotations": FastAPI must see the real
# Request annotation of the handler defined inside uvicorn_main().
import argparse
import asyncio
import contextlib
import ctypes
import datetime
import importlib
import json
import logging
import multiprocessing
import os
import selectors
import signal
import socket
import sys
import threading
import time
import types
from pathlib import Path
from typing import Callable, Dict, Optional

from stall_dump_locate import load_stall_dump_module, locate

SECRET_ENV = "STALL_TEST_SECRET"
WATCHER_NAME = "event-loop-stall-watch"  # the module's watcher thread
LONG_LINE_CHARS = 6000


def mark(name: str, value: str = "") -> None:
    utc = datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="milliseconds"
    )
    os.write(2, f"MARK {name} utc={utc} {value}\n".encode())


# --- blockers: what holds the loop thread --------------------------------
#
# A blocker either holds the loop for a fixed time (timing scenarios) or until
# the watcher has written a given dump (deterministic scenarios): `release` is
# then a DumpTail whose flag only the module under test can raise.


class DumpTail(threading.Event):
    """Set once the stall dump module has written ``end of dump N`` for this
    pid to this process's own stderr file (or after `limit` seconds)."""

    def __init__(self, dumps: int, limit: float) -> None:
        super().__init__()
        self.limit = limit
        self._needle = f"pid={os.getpid()} end of dump {dumps}".encode()
        threading.Thread(target=self._tail, name="dump-tail", daemon=True).start()

    def _tail(self) -> None:
        deadline = time.monotonic() + self.limit
        with open("/proc/self/fd/2", "rb") as f:
            seen = b""
            while time.monotonic() < deadline:
                seen = seen[-len(self._needle) :] + f.read()
                if self._needle in seen:
                    break
                time.sleep(0.02)
        # Past the limit the blocker gives up too, and the checks see why.
        self.set()


def _blocked_in_sleep(release) -> int:
    secret = os.environ[SECRET_ENV]  # a local the dump must not show
    if isinstance(release, DumpTail):
        release.wait()
    else:
        time.sleep(release)
    return len(secret)


def _spin_in_python(release) -> int:
    secret = os.environ[SECRET_ENV]
    end = time.monotonic() + release
    count = 0
    while time.monotonic() < end:
        count += 1
    return count + len(secret)


def _hold_gil_in_c(release) -> int:
    secret = os.environ[SECRET_ENV]
    # ctypes.PyDLL keeps the GIL for the whole foreign call (ctypes.CDLL
    # would release it), so no Python thread can run until sleep() returns.
    ctypes.PyDLL(None).sleep(int(round(release)))
    return len(secret)


def _hold_gil_then_wait(release) -> int:
    """The GIL held for a while, then the loop still blocked with the GIL
    free: the watcher wakes late, into a stall that is still going on."""
    secret = os.environ[SECRET_ENV]
    ctypes.PyDLL(None).sleep(GIL_SECONDS)
    mark("gil-released")
    release.wait()
    return len(secret)


GIL_SECONDS = 9
BLOCKERS: Dict[str, Callable[[object], int]] = {
    "sleep": _blocked_in_sleep,
    "spin": _spin_in_python,
    "gil": _hold_gil_in_c,
    "gil-then-wait": _hold_gil_then_wait,
}


def _release(args: argparse.Namespace):
    """What ends the block: the Nth dump (--until-dump N) or --block seconds."""
    if args.until_dump:
        return DumpTail(args.until_dump, args.block)
    return args.block


def _square(x: int) -> int:
    return x * x


# --- helpers ----------------------------------------------------------------


def _start_long_line_thread(workdir: Path) -> threading.Event:
    """A thread parked on a source line longer than the dump's line cap."""
    module_path = workdir / "stall_long_line_mod.py"
    module_path.write_text(
        "def park_on_a_long_line(event):\n"
        f"    event.wait()  # {'x' * LONG_LINE_CHARS}\n"
    )
    sys.path.append(str(workdir))
    module = importlib.import_module("stall_long_line_mod")
    release = threading.Event()
    threading.Thread(
        target=module.park_on_a_long_line,
        args=(release,),
        name="long-line-parker",
        daemon=True,
    ).start()
    return release


def _run(loop_kind: str, main) -> None:
    if loop_kind == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main)
    else:
        asyncio.run(main)


def _install(module, args: argparse.Namespace, loop) -> Optional[object]:
    if args.explicit:
        return module.install(loop, args.threshold, args.threshold)
    return module.install(loop)


def _thread_names() -> str:
    return json.dumps(sorted(t.name for t in threading.enumerate()))


# --- scenarios ----------------------------------------------------------------


def _raise_priority() -> str:
    """The spin check compares loop CPU with wall time; on a shared machine a
    higher CFS weight keeps other load from starving the spinning thread.
    This child leads its own session, so with sched_autogroup the weight that
    counts against other sessions is the autogroup's nice, not the process's."""
    result = []
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)
        result.append(f"nice {os.getpriority(os.PRIO_PROCESS, 0)}")
    except OSError as exc:
        result.append(f"nice unchanged ({exc.strerror})")
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write("-10")
        with open("/proc/self/autogroup") as f:
            result.append(f.read().strip())
    except OSError as exc:
        result.append(f"autogroup unchanged ({exc.strerror})")
    return ", ".join(result)


async def block_main(args: argparse.Namespace) -> None:
    module = load_stall_dump_module()
    installed_at = time.monotonic()
    dumper = _install(module, args, asyncio.get_running_loop())
    mark("installed", "armed" if dumper is not None else "none")
    parked = _start_long_line_thread(Path(args.workdir)) if args.long_line else None
    if args.blocker == "spin":
        mark("nice", _raise_priority())
    # The stall age counts from the last heartbeat (1 s period, first tick
    # right after install()); starting the block just after the tick at +2 s
    # keeps idle time out of the ages the CPU checks compare against.
    await asyncio.sleep(max(0.0, installed_at + 2.25 - time.monotonic()))
    release = _release(args)
    mark("block-start")
    BLOCKERS[args.blocker](release)
    mark("block-end")
    await asyncio.sleep(args.after)
    mark("threads", _thread_names())
    if parked is not None:
        parked.set()
    mark("done")


async def fork_main(args: argparse.Namespace) -> None:
    module = load_stall_dump_module()
    loop = asyncio.get_running_loop()
    dumper = _install(module, args, loop)
    mark("installed", "armed" if dumper is not None else "none")
    await asyncio.sleep(1.5)
    # A child that leaves through normal interpreter shutdown: SystemExit
    # unwinds asyncio.run, cancels the heartbeat, then Py_Finalize cancels
    # faulthandler's timer -- which hangs forever if the child inherited an
    # armed one.
    pid = os.fork()
    if pid == 0:
        # fork() shares the epoll instance with the parent: closing the loop
        # here would unregister the parent's self-pipe from it and leave the
        # parent deaf to call_soon_threadsafe.  A selector of its own keeps
        # the child's loop teardown local.
        loop._selector = selectors.DefaultSelector()  # type: ignore[attr-defined]
        mark("fork-child-start", json.dumps({"pid": os.getpid()}))
        raise SystemExit(0)
    mark("fork-child", json.dumps(await _wait_child(pid, timeout=5.0)))
    # A fork-context pool, forked from an executor thread while the loop and
    # its heartbeat keep running.
    mark("pool", json.dumps(await loop.run_in_executor(None, _run_fork_pool)))
    await asyncio.sleep(1.5)
    # The dumper still works after the forks.
    release = _release(args)
    mark("block-start")
    BLOCKERS[args.blocker](release)
    mark("block-end")
    await asyncio.sleep(args.after)
    mark("done")


async def _wait_child(pid: int, timeout: float) -> dict:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {
                "pid": pid,
                "exit": os.waitstatus_to_exitcode(status),
                "seconds": round(time.monotonic() - start, 3),
            }
        await asyncio.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return {"pid": pid, "exit": "hang", "seconds": timeout}


def _run_fork_pool() -> dict:
    pool = multiprocessing.get_context("fork").Pool(2)
    try:
        return {"ok": True, "values": pool.map_async(_square, [1, 2, 3]).get(15)}
    except Exception as exc:
        return {"ok": False, "error": repr(exc)}
    finally:
        pool.terminate()
        pool.join()


def uvicorn_main(args: argparse.Namespace) -> None:
    import uvicorn
    from fastapi import FastAPI, Request

    module = load_stall_dump_module()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        # As in sglang's http_server lifespan: armed from the running loop,
        # thresholds from the environment.
        dumper = module.install(asyncio.get_running_loop())
        mark("installed", "armed" if dumper is not None else "none")
        yield
        mark("lifespan-shutdown")

    app = FastAPI(lifespan=lifespan)

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> dict:
        payload = await request.json()
        prompt = payload["messages"][0]["content"]  # holds the secret
        release = _release(args)
        mark("block-start")
        release.wait()  # synchronous wait on the loop: the stall
        mark("block-end")
        return {"object": "chat.completion", "prompt_chars": len(prompt)}

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    mark("port", str(sock.getsockname()[1]))
    config = uvicorn.Config(
        app, loop="uvloop", lifespan="on", log_level="info", access_log=False
    )
    uvicorn.Server(config).run(sockets=[sock])
    mark("done")


def _blocked_after_real_lifespan(release) -> int:
    secret = os.environ[SECRET_ENV]
    release.wait()
    return len(secret)


async def real_lifespan_main(args: argparse.Namespace) -> None:
    """sglang's own http_server.lifespan, imported through the package, arms
    the dumper on the running loop before anything else it does."""
    # A tree without the module (stock) fails here, before the import that
    # costs ~12 s of CPU.
    located = locate()
    http_server = importlib.import_module("sglang.srt.entrypoints.http_server")
    real = sys.modules.get("glm53_offload.stall_dump")
    mark(
        "package-import",
        json.dumps(
            {
                "located": str(located.resolve()),
                "imported": str(Path(real.__file__).resolve()) if real else None,
            }
        ),
    )
    # A stand-in app: enough for lifespan's first lines; without a tokenizer
    # manager or published server config the rest of lifespan raises.
    app = types.SimpleNamespace(
        is_single_tokenizer_mode=True,
        server_args=types.SimpleNamespace(),
        warmup_thread_kwargs={},
    )
    try:
        async with asyncio.timeout(30):
            async with http_server.lifespan(app):
                pass
        outcome = "lifespan ran through"
    except BaseException as exc:  # noqa: B036 - any outcome is fine here
        if not isinstance(exc, Exception):
            raise
        outcome = f"lifespan stopped at {type(exc).__name__}"
    mark("lifespan", outcome)
    mark("threads", _thread_names())
    await asyncio.sleep(1.2)
    release = _release(args)
    mark("block-start")
    _blocked_after_real_lifespan(release)
    mark("block-end")
    await asyncio.sleep(args.after)
    mark("done")


async def fork_lock_main(args: argparse.Namespace) -> None:
    """os.fork() while another thread holds the dumper's fork lock longer
    than a second and re-arms the backstop timer before letting go."""
    module = load_stall_dump_module()
    loop = asyncio.get_running_loop()
    holder_done = threading.Event()
    # Fork hooks run in reverse order of registration: this one runs after
    # the dumper's own before-fork hook and lets the holder finish first.
    os.register_at_fork(before=lambda: holder_done.wait(10))
    dumper = _install(module, args, loop)
    mark("installed", "armed" if dumper is not None else "none")
    await asyncio.sleep(1.2)
    holding = threading.Event()

    def hold() -> None:
        with module._state.fork_lock:
            holding.set()
            time.sleep(1.5)  # longer than the dumper ever waited (1 s)
            # What a re-arm does while it holds the lock.
            signal.setitimer(signal.ITIMER_REAL, 30)
        holder_done.set()

    holder = threading.Thread(target=hold, name="fork-lock-holder")
    holder.start()
    holding.wait()
    pid = os.fork()
    if pid == 0:
        loop._selector = selectors.DefaultSelector()  # type: ignore[attr-defined]
        mark("fork-child-start", json.dumps({"pid": os.getpid()}))
        raise SystemExit(0)
    holder.join()
    mark("fork-child", json.dumps(await _wait_child(pid, timeout=5.0)))
    mark("done")


_FIRST: Dict[str, object] = {}


async def _first_loop(module, args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    first = _install(module, args, loop)
    _FIRST["dumper"] = first
    mark("installed", "armed" if first is not None else "none")
    again = _install(module, args, loop)
    mark("same-loop", json.dumps({"same": again is first}))

    def other_thread() -> dict:
        async def inner() -> bool:
            return _install(module, args, asyncio.get_running_loop()) is None

        return {"refused": asyncio.run(inner())}

    # A second live loop in another thread while the first one is watched.
    mark("other-loop", json.dumps(await loop.run_in_executor(None, other_thread)))


async def _next_loop(module, args: argparse.Namespace) -> None:
    # Right after the first loop closed (its watcher may not have noticed).
    dumper = _install(module, args, asyncio.get_running_loop())
    mark(
        "next-loop",
        json.dumps(
            {
                "armed": dumper is not None,
                "new": dumper is not None and dumper is not _FIRST.get("dumper"),
            }
        ),
    )
    await asyncio.sleep(1.5)


def loops_main(args: argparse.Namespace) -> None:
    module = load_stall_dump_module()
    asyncio.run(_first_loop(module, args))
    asyncio.run(_next_loop(module, args))
    mark("threads", _thread_names())
    mark("done")


class _CountingEvent(threading.Event):
    """The watcher's wake event, counting the watcher's waits."""

    def __init__(self) -> None:
        super().__init__()
        self.waits = 0

    def wait(self, timeout=None):
        self.waits += 1
        return super().wait(timeout)


def stopped_loop_main(args: argparse.Namespace) -> None:
    """The loop stops (run_until_complete returns) but is not closed."""
    module = load_stall_dump_module()
    loop = _new_loop(args.loop)

    async def arm():
        return _install(module, args, asyncio.get_running_loop())

    dumper = loop.run_until_complete(arm())
    mark("installed", "armed" if dumper is not None else "none")
    counter = _CountingEvent()
    if dumper is not None:
        dumper._wake = counter
    loop.run_until_complete(asyncio.sleep(1.2))
    mark("stopped")
    before = counter.waits
    time.sleep(args.block)  # longer than stall + margin + re-arm period
    mark("watcher-waits", json.dumps({"waits": counter.waits - before}))
    loop.run_until_complete(asyncio.sleep(1.5))
    mark("restarted")
    loop.close()
    mark("done")


def _new_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def rearm_main(args: argparse.Namespace) -> None:
    """Which threads arm the backstop timer (signal.setitimer with a timeout):
    the loop thread only once, when install() arms; every re-arm from the
    watcher."""
    module = load_stall_dump_module()
    calls: list = []
    real = signal.setitimer

    def recording(which, seconds, *a):
        if seconds > 0:
            calls.append(threading.current_thread().name)
        return real(which, seconds, *a)

    signal.setitimer = recording

    async def main() -> None:
        dumper = _install(module, args, asyncio.get_running_loop())
        mark("installed", "armed" if dumper is not None else "none")
        at_install = len(calls)
        # Long enough for several ticks and, at a 2 s threshold, the
        # watcher's re-arm (the module re-arms every min(5 s, threshold)).
        await asyncio.sleep(args.block)
        names = calls[at_install:]
        mark(
            "rearms",
            json.dumps(
                {
                    "at_install": at_install,
                    "loop_thread": names.count(threading.current_thread().name),
                    "watcher": names.count(WATCHER_NAME),
                }
            ),
        )

    _run(args.loop, main())
    mark("done")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "scenario",
        choices=[
            "block",
            "fork",
            "fork-lock",
            "loops",
            "stopped-loop",
            "rearm",
            "uvicorn",
            "real-lifespan",
        ],
    )
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    parser.add_argument("--blocker", choices=sorted(BLOCKERS), default="sleep")
    parser.add_argument(
        "--block",
        type=float,
        default=7.0,
        help="seconds blocked (with --until-dump: the most it waits)",
    )
    parser.add_argument(
        "--until-dump",
        type=int,
        default=0,
        help="block until the module wrote dump N of this process",
    )
    parser.add_argument("--after", type=float, default=3.0, help="seconds after")
    parser.add_argument("--threshold", type=float, default=2.0)
    parser.add_argument(
        "--explicit",
        action="store_true",
        help="pass --threshold to install() instead of reading the environment",
    )
    parser.add_argument("--long-line", action="store_true")
    parser.add_argument("--workdir", default=".")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    if args.scenario == "block":
        _run(args.loop, block_main(args))
    elif args.scenario == "fork":
        _run(args.loop, fork_main(args))
    elif args.scenario == "fork-lock":
        _run(args.loop, fork_lock_main(args))
    elif args.scenario == "loops":
        loops_main(args)
    elif args.scenario == "stopped-loop":
        stopped_loop_main(args)
    elif args.scenario == "rearm":
        rearm_main(args)
    elif args.scenario == "uvicorn":
        uvicorn_main(args)
    else:
        # http_server sets uvloop's policy at import, as in production.
        asyncio.run(real_lifespan_main(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
