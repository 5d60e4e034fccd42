"""Measures the event loop's longest stall while one huge request is finished and dispatched, on
any sglang tree.

The real `_tokenize_one_request` (the prompt given as ids, so no tokenizer encode runs) and
`_send_one_request` send into a real ZMQ PUSH socket (conftest.py's `dispatching_manager`), with
return_prompt_token_ids, while a loop task sleeps 1 ms in a loop; its worst gap is the longest
time the loop could not run. On 0.5.19 and the earlier v3 that gap is `array("q", ids)`, the
request object and the pickling in `send_pyobj`, all on the loop; with dispatch-off-loop.diff
they run on a worker in slices. What the scheduler end reads is checked against the ids. Each
line also gives the longest gap of the same ticker on an idle loop for as long, the host's own
scheduling noise.

  PYTHONPATH=.:<tree>:<torchvision shim> python bench_dispatch_stall.py --ids 3750000

Not collected by pytest (no test_ prefix); its numbers are quoted in README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from typing import Any, List


async def _worst_loop_gap(call: Any) -> tuple:
    gaps: List[float] = []
    done = asyncio.Event()
    start = time.perf_counter()

    async def ticker() -> None:
        # From the start: if the call never yields, the first tick comes after all of it.
        last = start
        while True:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
            if done.is_set():
                return

    task = asyncio.create_task(ticker())
    await call
    total = time.perf_counter() - start
    done.set()
    await task
    return total, max(gaps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ids", type=int, default=3_750_000, help="prompt ids per request")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from glm_tokenizer import build_tokenizer
    from conftest import (
        dispatching_manager,
        new_tokenizer_manager,
        submit_until_dispatch,
    )
    from sglang.srt.managers.io_struct import GenerateReqInput

    rng = random.Random(0)
    # Ids above 256 are not CPython's cached small ints, as in a real vocabulary.
    ids = [rng.randrange(1000, 150_000) for _ in range(args.ids)]
    tm = new_tokenizer_manager(build_tokenizer())
    try:
        with tempfile.TemporaryDirectory() as scratch, dispatching_manager(
            tm, f"ipc://{scratch}/scheduler_input"
        ) as scheduler:
            tm.model_config.vocab_size = 150_000
            for attempt in range(args.repeat):
                obj = GenerateReqInput(
                    input_ids=list(ids),
                    rid=f"huge-{attempt}",
                    sampling_params={"max_new_tokens": 1},
                    return_prompt_token_ids=True,
                )
                obj.normalize_batch_and_arguments()
                total, gap = asyncio.run(_worst_loop_gap(submit_until_dispatch(tm, obj)))
                received = scheduler.receive()
                assert received.rid == obj.rid and list(received.input_ids) == ids
                assert tm.rid_to_state[obj.rid].prompt_token_ids == ids
                # The host's own noise: the same ticker on an idle loop for as long.
                _, idle_gap = asyncio.run(_worst_loop_gap(asyncio.sleep(total)))
                print(
                    f"{args.ids} prompt ids: finished and dispatched in {total * 1e3:.0f} ms, "
                    f"the loop's longest stall {gap * 1e3:.0f} ms (idle loop for as long: "
                    f"{idle_gap * 1e3:.0f} ms)"
                )
    finally:
        shutdown = getattr(tm, "shutdown_request_preprocessing", None)
        if shutdown is not None:
            shutdown()


if __name__ == "__main__":
    main()
