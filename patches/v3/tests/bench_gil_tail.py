"""Measures the longest stretch one tokenizer call holds the GIL, i.e. what a worker thread can
still take from the event loop.

A ticker thread sleeps 1 ms in a loop while the main thread runs the call; the ticker's worst gap
is the longest time it could not get the GIL back. Calls measured on the toy tokenizer from
conftest.py and a --megabytes prompt: the HF `encode` the conversion uses, the same without
attention mask and token type ids, the backend's own single `encode`, and `array("q", ids)` as
`_create_tokenized_object` builds it.

  PYTHONPATH=.:<tree>:<torchvision shim> python bench_gil_tail.py --megabytes 2

Not collected by pytest (no test_ prefix); its numbers are quoted in README.md.
"""

from __future__ import annotations

import argparse
import threading
import time
from array import array
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

    from conftest import _train_tiny_tokenizer

    tokenizer = _train_tiny_tokenizer()
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
    _, total, gap = worst_gil_gap(lambda: array("q", ids))
    print(f'array("q", ids): {total * 1e3:.0f} ms, GIL held up to {gap * 1e3:.0f} ms')


if __name__ == "__main__":
    main()
