"""Measures the longest stretch one call of the request path holds the GIL, i.e. what a worker
thread can still take from the event loop.

A ticker thread sleeps 1 ms in a loop while the main thread runs the call; the ticker's worst gap
is the longest time it could not get the GIL back. Calls measured on the toy tokenizer from
conftest.py and a --megabytes prompt: the HF `encode` the conversion uses, the same without
attention mask and token type ids, the backend's own single `encode`, `array("q", ids)` as
0.5.19's `_create_tokenized_object` builds it, the same built in slices as
dispatch-off-loop.diff's `_ids_in_slices` does, the encode through offload-process.diff's
`TokenizerProcess` (the calling thread waits on a pipe; the list is built in slices), pickling
the prompt's text and ids array (the bulk of what `send_pyobj` serializes) as 0.5.19 does and
as the patch's sliced `sock_encode` does (the sliced forms only when the tree under test has
them), and `orjson.loads` of a chat body of the same size and of a body of 64 base64 images
(what `ORJSONRequest.json` runs on the loop), with offload-process.diff's `JsonProcess.loads` of
the same bodies.

  PYTHONPATH=.:<tree>:<torchvision shim> python bench_gil_tail.py --megabytes 2

Not collected by pytest (no test_ prefix); its numbers are quoted in README.md.
"""

from __future__ import annotations

import argparse
import pickle
import threading
import time
from array import array
from functools import partial
from typing import Any, Callable, List


def worst_gil_gap(call: Callable[[], Any]) -> tuple:
    gaps: List[float] = []
    stop = threading.Event()

    def ticker() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    thread = threading.Thread(target=ticker)
    thread.start()
    start = time.perf_counter()
    result = call()
    total = time.perf_counter() - start
    stop.set()
    thread.join()
    return result, total, max(gaps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=float, default=2.0)
    args = parser.parse_args()

    from glm_tokenizer import build_tokenizer

    tokenizer = build_tokenizer()
    sentence = "the quick brown fox jumps over the lazy dog "
    text = sentence * int(args.megabytes * 1e6 / len(sentence))
    calls = {
        "HF encode (what the conversion calls)": lambda: tokenizer.encode(text),
        "HF encode, no attention mask / type ids": lambda: tokenizer.encode(
            text, return_attention_mask=False, return_token_type_ids=False
        ),
        "backend Tokenizer.encode(...).ids": lambda: tokenizer._tokenizer.encode(text).ids,
    }
    ids = None
    for label, call in calls.items():
        ids, total, gap = worst_gil_gap(call)
        print(f"{label}: {len(ids)} tokens, {total * 1e3:.0f} ms, GIL held up to {gap * 1e3:.0f} ms")
    import orjson

    from sglang.srt.managers import tokenizer_manager

    ids_arr, total, gap = worst_gil_gap(lambda: array("q", ids))
    print(f'array("q", ids): {total * 1e3:.0f} ms, GIL held up to {gap * 1e3:.0f} ms')
    _, total, gap = worst_gil_gap(
        lambda: pickle.dumps((text, ids_arr), protocol=pickle.HIGHEST_PROTOCOL)
    )
    print(f"pickle text + ids array: {total * 1e3:.0f} ms, GIL held up to {gap * 1e3:.0f} ms")
    in_slices = getattr(tokenizer_manager, "_ids_in_slices", None)
    if in_slices is not None:  # a tree with dispatch-off-loop.diff
        from glm53_offload.sliced_pickle import sock_encode

        for label, call in {
            'array("q", ids) in slices': lambda: in_slices(ids, partial(array, "q")),
            "list(array) in slices": lambda: in_slices(ids_arr, list),
            "pickle text + ids array, sliced": lambda: sock_encode((text, ids_arr), sliced=True),
        }.items():
            _, total, gap = worst_gil_gap(call)
            print(f"{label}: {total * 1e3:.0f} ms, GIL held up to {gap * 1e3:.0f} ms")
    try:  # a tree with offload-process.diff
        from glm53_offload.offload_process import TokenizerProcess
    except ImportError:
        TokenizerProcess = None
    if TokenizerProcess is not None:
        process = TokenizerProcess(tokenizer)
        process.check_against(tokenizer)  # started and checked before it is timed
        try:
            got, total, gap = worst_gil_gap(
                lambda: in_slices(process.encode(text), list)
            )
        finally:
            process.close()
        assert got == ids, "the tokenizer process encoded differently"
        print(
            f"tokenizer process encode + list in slices: {len(got)} tokens, "
            f"{total * 1e3:.0f} ms, GIL held up to {gap * 1e3:.0f} ms"
        )
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": text}]})
    images = orjson.dumps(
        {"model": "m", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "iVBORw0KGgo" * 300_000 + str(i)}}
            for i in range(64)
        ]}]}
    )
    for label, document in ((f"a {len(body) / 1e6:.1f} MB chat body", body),
                            (f"a {len(images) / 1e6:.0f} MB body of 64 base64 images", images)):
        _, total, gap = worst_gil_gap(lambda: orjson.loads(document))
        print(f"orjson.loads of {label}: {total * 1e3:.0f} ms, GIL held up to {gap * 1e3:.0f} ms")
        if TokenizerProcess is not None:
            from glm53_offload.offload_process import JsonProcess

            json_process = JsonProcess()
            try:
                json_process.loads(b"{}")  # started before it is timed
                parsed, total, gap = worst_gil_gap(lambda: json_process.loads(document))
            finally:
                json_process.close()
            assert parsed == orjson.loads(document), "the JSON process parsed differently"
            print(f"JSON process loads of {label}: {total * 1e3:.0f} ms, GIL held up to {gap * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
