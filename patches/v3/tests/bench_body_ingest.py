"""Body ingest: throughput and the event loop's worst stall while large request bodies are parsed
by the server's body reader (`ORJSONRequest.json()`, every route's), against the same bodies
parsed in-process on the loop (0.5.19's reader; what stock does).

Two loads: `--concurrent` (default 8) image bodies of `--body-mb` (default 6.3) MB at once, and
one body of `--big-mb` (default 221) MB (64 base64 images). A loop task ticks every 1 ms; its worst
gap is the longest the loop could not run (a /health probe waits at least that long).

  PYTHONPATH=.:<tree>:<torchvision shim> python bench_body_ingest.py [--repeat 3]

Not collected by pytest (no test_ prefix); its numbers are quoted in README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any, List

import orjson


def image_body(megabytes: float, images: int, salt: int) -> bytes:
    per_image = int(megabytes * 1e6 / images)
    parts = [{"type": "text", "text": f"describe image set {salt}"}] + [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + chr(65 + (i + salt) % 26) * per_image}}
        for i in range(images)
    ]
    return orjson.dumps({"model": "glm", "messages": [{"role": "user", "content": parts}],
                         "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
                         "max_tokens": 16})


# What uvicorn hands the app per receive() (h11 reads the socket 64 KiB at a time).
CHUNK_BYTES = 64 * 1024


def _request(body: bytes) -> Any:
    from sglang.srt.entrypoints.http_server import ORJSONRequest

    chunks = iter(range(0, len(body), CHUNK_BYTES))
    view = memoryview(body)

    async def receive():
        await asyncio.sleep(0)  # the network: the loop runs other tasks between chunks
        start = next(chunks, None)
        if start is None:
            return {"type": "http.request", "body": b"", "more_body": False}
        end = start + CHUNK_BYTES
        return {"type": "http.request", "body": bytes(view[start:end]), "more_body": end < len(body)}

    # Content-Length declared, as an HTTP client sends a body it holds whole.
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    return ORJSONRequest({"type": "http", "method": "POST", "path": "/v1/chat/completions",
                          "headers": headers, "query_string": b""}, receive)


async def _stock_json(body: bytes) -> Any:
    # 0.5.19's ORJSONRequest.json: starlette's body() (chunks joined), orjson.loads, on the loop.
    from starlette.requests import Request

    return orjson.loads(await Request.body(_request(body)))


async def measure(bodies: List[bytes], arm: str) -> tuple:
    gaps: List[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    start = time.perf_counter()
    parse = (lambda b: _request(b).json()) if arm == "v3" else _stock_json
    await asyncio.gather(*(parse(b) for b in bodies))
    elapsed = time.perf_counter() - start
    done.set()
    await tick
    return elapsed, max(gaps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrent", type=int, default=8)
    parser.add_argument("--body-mb", type=float, default=6.3)
    parser.add_argument("--big-mb", type=float, default=221.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from conftest import large_body_parser

    loads = {
        f"{args.concurrent} x {args.body_mb} MB": [image_body(args.body_mb, 2, i) for i in range(args.concurrent)],
        f"1 x {args.big_mb:.0f} MB": [image_body(args.big_mb, 64, 0)],
    }
    parser_ = large_body_parser()
    print(f"body parser: {type(parser_).__name__ if parser_ else 'none (stock)'}, "
          f"workers {getattr(parser_, 'workers', '-')}")
    for name, bodies in loads.items():
        total_mb = sum(map(len, bodies)) / 1e6
        for arm in ("stock", "v3"):
            asyncio.run(measure(bodies, arm))  # warm-up: children started, pages touched
            runs = [asyncio.run(measure(bodies, arm)) for _ in range(args.repeat)]
            elapsed = statistics.median(r[0] for r in runs)
            worst = max(r[1] for r in runs)
            print(f"{name:>14} {arm:>5}: {elapsed * 1000:7.0f} ms median ({total_mb / elapsed:6.0f} MB/s), "
                  f"worst loop gap {worst * 1000:6.1f} ms over {args.repeat} runs")
    if parser_ is not None:
        parser_.close()


if __name__ == "__main__":
    main()
