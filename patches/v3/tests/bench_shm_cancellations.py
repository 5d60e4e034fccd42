"""Counts what cancelled multimodal requests cost in /dev/shm, on any sglang tree.

Sends --requests multimodal requests (each --items feature tensors of --item-mib MiB) through the
real `TokenizerManager._send_one_request` with real `ShmPointerMMData` segments, cancelling every
one, in three equal groups:
  mid-copy  cancelled as soon as its first segment exists;
  queued    cancelled while its copy waits behind another request's copy (the blocker is
            dispatched normally and its segments unlinked, as the scheduler would);
  failing   its copy raises after the first item.
Then it waits for the shm worker to finish its queue and prints, per group, the segments this
process left in /dev/shm and the bytes copied for the cancelled requests.

  PYTHONPATH=<tree>:<torchvision shim> python bench_shm_cancellations.py --requests 100

Not collected by pytest (no test_ prefix); its numbers are quoted in README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import inspect
import os
import threading
from types import SimpleNamespace

SHM_DIR = "/dev/shm"


def own_segments() -> set:
    marker = f"_mm_{os.getpid()}_"
    return {name for name in os.listdir(SHM_DIR) if marker in name}


async def send(tm, obj) -> None:
    result = tm._send_one_request(obj)
    if inspect.isawaitable(result):
        await result


async def until(predicate, what: str, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise TimeoutError(f"waiting for {what}")
        await asyncio.sleep(0.001)


async def drain(tm) -> None:
    executor = getattr(tm, "mm_shm_executor", None)
    if executor is not None:
        await asyncio.wrap_future(executor.submit(lambda: None))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--items", type=int, default=4)
    parser.add_argument("--item-mib", type=int, default=32)
    args = parser.parse_args()

    import torch

    from sglang.srt.managers import mm_utils
    # The shm worker looks wrap_shm_features up in the package module the mixin comes from.
    from glm53_offload import tokenizer_manager_hooks as tm_module

    from conftest import new_tokenizer_manager
    from test_shm_off_loop import make_request

    # A single-node server with a tokenizer: the shm path.
    mm_utils._is_default_tensor_transport = False
    mm_utils.get_serving = lambda: SimpleNamespace(skip_tokenizer_init=False)

    copied = collections.Counter()  # rid -> bytes copied into segments
    current = threading.local()
    failing = set()
    real_wrap_one, real_wrap = mm_utils._wrap_shm_or_inline, tm_module.wrap_shm_features

    def wrap_one(tensor, *a, **k):
        if current.rid in failing and copied[current.rid]:
            raise RuntimeError("copy failed")
        result = real_wrap_one(tensor, *a, **k)
        if isinstance(result, mm_utils.ShmPointerMMData):
            copied[current.rid] += tensor.numel() * tensor.element_size()
        return result

    def wrap(obj):
        current.rid = obj.rid
        return real_wrap(obj)

    mm_utils._wrap_shm_or_inline = wrap_one
    tm_module.wrap_shm_features = wrap

    feature = torch.rand(args.item_mib << 18)  # float32: item_mib MiB
    tm = new_tokenizer_manager()
    before = own_segments()
    groups = ("mid-copy", "queued", "failing")
    per_group = args.requests // len(groups)

    def dispatched_cleanup():
        # What the scheduler does with a dispatched request's segments.
        for obj in tm.dispatched:
            mm_utils.discard_shm_features(obj)
        tm.dispatched.clear()

    async def run():
        outcomes = collections.Counter()
        for group in groups:
            for i in range(per_group):
                rid = f"{group}-{i}"
                obj = make_request(rid, [feature] * args.items)
                if group == "failing":
                    failing.add(rid)
                    try:
                        await send(tm, obj)
                    except RuntimeError:
                        outcomes[group, "copy error"] += 1
                    continue
                blocker_task = None
                if group == "queued":
                    blocker = make_request(f"blocker-{i}", [feature] * args.items)
                    blocker_task = asyncio.create_task(send(tm, blocker))
                    await asyncio.sleep(0)
                task = asyncio.create_task(send(tm, obj))
                if group == "mid-copy":
                    await until(lambda: copied[rid] or task.done(), "the first segment")
                else:
                    await asyncio.sleep(0)
                task.cancel()
                result = (await asyncio.gather(task, return_exceptions=True))[0]
                outcomes[group, type(result).__name__ if result else "dispatched"] += 1
                if blocker_task is not None:
                    await blocker_task
                dispatched_cleanup()
            await drain(tm)
            dispatched_cleanup()
            left = own_segments() - before
            cancelled_bytes = sum(v for k, v in copied.items() if k.startswith(group))
            print(
                f"{group:9s}: {per_group} requests ({args.items} x {args.item_mib} MiB), "
                f"outcomes {dict((k[1], n) for k, n in outcomes.items() if k[0] == group)}; "
                f"segments left {len(left)}; "
                f"bytes copied for the cancelled requests {cancelled_bytes / 2**20:.0f} MiB"
            )
            for name in left:  # keep /dev/shm clean for the next group
                os.unlink(os.path.join(SHM_DIR, name))

    asyncio.run(run())
    shutdown = getattr(tm, "shutdown_request_preprocessing", None)
    if shutdown is not None:
        shutdown()


if __name__ == "__main__":
    main()
