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
LONG_LINE_CHARS = 6000


def mark(name: str, value: str = "") -> None:
    utc = datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="milliseconds"
    )
    os.write(2, f"MARK {name} utc={utc} {value}\n".encode())


# --- blockers: what holds the loop thread --------------------------------


def _blocked_in_sleep(seconds: float) -> int:
    secret = os.environ[SECRET_ENV]  # a local the dump must not show
    time.sleep(seconds)
    return len(secret)


def _spin_in_python(seconds: float) -> int:
    secret = os.environ[SECRET_ENV]
    end = time.monotonic() + seconds
    count = 0
    while time.monotonic() < end:
        count += 1
    return count + len(secret)


def _hold_gil_in_c(seconds: float) -> int:
    secret = os.environ[SECRET_ENV]
    # ctypes.PyDLL keeps the GIL for the whole foreign call (ctypes.CDLL
    # would release it), so no Python thread can run until sleep() returns.
    ctypes.PyDLL(None).sleep(int(round(seconds)))
    return len(secret)


BLOCKERS: Dict[str, Callable[[float], int]] = {
    "sleep": _blocked_in_sleep,
    "spin": _spin_in_python,
    "gil": _hold_gil_in_c,
}


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
    release = _start_long_line_thread(Path(args.workdir)) if args.long_line else None
    if args.blocker == "spin":
        mark("nice", _raise_priority())
    # The stall age counts from the last heartbeat (1 s period, first tick
    # right after install()); starting the block just after the tick at +2 s
    # keeps idle time out of the ages the CPU checks compare against.
    await asyncio.sleep(max(0.0, installed_at + 2.25 - time.monotonic()))
    mark("block-start")
    BLOCKERS[args.blocker](args.block)
    mark("block-end")
    await asyncio.sleep(args.after)
    mark("threads", _thread_names())
    if release is not None:
        release.set()
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
    mark("block-start")
    BLOCKERS[args.blocker](args.block)
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
        mark("block-start")
        time.sleep(args.block)  # synchronous work on the loop: the stall
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


def _blocked_after_real_lifespan(seconds: float) -> int:
    secret = os.environ[SECRET_ENV]
    time.sleep(seconds)
    return len(secret)


async def real_lifespan_main(args: argparse.Namespace) -> None:
    """sglang's own http_server.lifespan, imported through the package, arms
    the dumper on the running loop before anything else it does."""
    http_server = importlib.import_module("sglang.srt.entrypoints.http_server")
    real = sys.modules.get("sglang.srt.utils.event_loop_stall_dump")
    mark(
        "package-import",
        json.dumps(
            {
                "located": str(locate().resolve()),
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
    mark("block-start")
    _blocked_after_real_lifespan(args.block)
    mark("block-end")
    await asyncio.sleep(args.after)
    mark("done")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "scenario", choices=["block", "fork", "uvicorn", "real-lifespan"]
    )
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    parser.add_argument("--blocker", choices=sorted(BLOCKERS), default="sleep")
    parser.add_argument("--block", type=float, default=7.0, help="seconds blocked")
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
    elif args.scenario == "uvicorn":
        uvicorn_main(args)
    else:
        # http_server sets uvloop's policy at import, as in production.
        asyncio.run(real_lifespan_main(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
