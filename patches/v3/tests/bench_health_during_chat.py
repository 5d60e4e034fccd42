"""Measures how long /health waits while a large chat request is converted, on any sglang tree.

Drives the real FastAPI app through httpx.ASGITransport: one POST /v1/chat/completions whose
conversion (real chat template + real tokenizer, the toy tokenizer from conftest.py) runs while
/health is probed every --interval seconds (default 10 ms) and, with --small-chats N, N small
chats (~1 KB) are sent one after another. Generation is replaced by returning the token count,
so a small chat's response time is its conversion plus dispatch delay. Prints the worst probe
delay and the worst small-chat delay; on stock 0.5.19 both are the whole conversion time.

  PYTHONPATH=<tree>:<torchvision shim> python bench_health_during_chat.py --megabytes 5 \
      --small-chats 20

Not collected by pytest (no test_ prefix); the numbers it printed are quoted in the patch header.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import List

SENTENCE = "the quick brown fox jumps over the lazy dog "


@dataclass
class Result:
    body_bytes: int
    tokens: int
    seconds: float
    probes: int
    worst_delay: float
    slow_probes: List[str]
    small_chat_delays: List[float]


def _build_app(megabytes: float):
    # Imported here so --help works without sglang on the path.
    from sglang.srt.entrypoints import http_server
    from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat
    from sglang.srt.managers.tokenizer_manager import ServerStatus
    from sglang.srt.parser.template_manager import TemplateManager

    from conftest import new_tokenizer_manager
    from glm_tokenizer import build_tokenizer

    class CountingChat(OpenAIServingChat):
        async def _handle_non_streaming_request(self, adapted_request, request, raw_request):
            return {"tokens": len(adapted_request.input_ids)}

    tm = new_tokenizer_manager(build_tokenizer())
    tm.model_config.context_len = 1 << 30
    tm.gracefully_exit = False
    tm.server_status = ServerStatus.Up
    http_server._global_state = SimpleNamespace(tokenizer_manager=tm)
    http_server.app.state.openai_serving_chat = CountingChat(tm, TemplateManager())
    content = SENTENCE * int(megabytes * 1e6 / len(SENTENCE))
    return http_server.app, content


async def _small_chats(client, count: int, big_chat, start_after: float) -> List[float]:
    """Small chats sent one after another while the big one converts; each one's delay."""
    delays: List[float] = []
    await asyncio.sleep(start_after)  # the big conversion goes first
    content = SENTENCE * 20  # ~0.9 KB
    for _ in range(count):
        if big_chat.done():
            break
        sent = time.monotonic()
        response = await client.post(
            "/v1/chat/completions",
            json={"model": "tiny", "messages": [{"role": "user", "content": content}]},
        )
        response.raise_for_status()
        delays.append(time.monotonic() - sent)
    return delays


async def _measure(app, content: str, interval: float, small_chats: int) -> Result:
    import httpx

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench", timeout=600) as c:
        start = time.monotonic()
        chat = asyncio.create_task(
            c.post(
                "/v1/chat/completions",
                json={"model": "tiny", "messages": [{"role": "user", "content": content}]},
            )
        )
        smalls = asyncio.create_task(_small_chats(c, small_chats, chat, interval))
        worst, probes, slow = 0.0, 0, []
        while not chat.done():
            sent = time.monotonic()
            await asyncio.sleep(interval)
            health = await c.get("/health")
            delay = time.monotonic() - sent - interval
            assert health.status_code == 200, health.text
            probes += 1
            worst = max(worst, delay)
            if delay > 0.02:
                slow.append(f"+{sent - start:.2f}s: {delay * 1e3:.0f} ms")
        response = await chat
        response.raise_for_status()
        return Result(
            body_bytes=len(content),
            tokens=response.json()["tokens"],
            seconds=time.monotonic() - start,
            probes=probes,
            worst_delay=worst,
            slow_probes=slow,
            small_chat_delays=await smalls,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=float, default=5.0, help="chat message size")
    parser.add_argument("--interval", type=float, default=0.01, help="seconds between probes")
    parser.add_argument(
        "--small-chats", type=int, default=0, help="small chats to send during the big one"
    )
    args = parser.parse_args()
    # /health without the generate round trip: there is no scheduler here.
    os.environ["SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"] = "false"
    app, content = _build_app(args.megabytes)
    result = asyncio.run(_measure(app, content, args.interval, args.small_chats))
    print(
        f"{result.body_bytes / 1e6:.1f} MB chat, {result.tokens} tokens, "
        f"{result.seconds:.2f}s; {result.probes} /health probes every "
        f"{args.interval * 1e3:.0f} ms, worst delay {result.worst_delay * 1e3:.0f} ms"
    )
    if result.small_chat_delays:
        delays = sorted(result.small_chat_delays)
        print(
            f"{len(delays)} small chats during it: median delay "
            f"{delays[len(delays) // 2] * 1e3:.0f} ms, worst {delays[-1] * 1e3:.0f} ms"
        )
    print(f"{len(result.slow_probes)} probes over 20 ms")
    for line in result.slow_probes[:20]:
        print(f"  slow probe at {line}")


if __name__ == "__main__":
    main()
