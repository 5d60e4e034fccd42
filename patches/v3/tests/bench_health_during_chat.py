"""Measures how long /health waits while a large chat request is converted, on any sglang tree.

Drives the real FastAPI app through httpx.ASGITransport: one POST /v1/chat/completions whose
conversion (real chat template + real tokenizer, the toy tokenizer from conftest.py) runs while
/health is probed every --interval seconds. Generation is replaced by returning the token count.
Prints the worst probe delay; on stock 0.5.19 it is the whole conversion time.

  PYTHONPATH=<tree>:<torchvision shim> python bench_health_during_chat.py --megabytes 5

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


def _build_app(megabytes: float):
    # Imported here so --help works without sglang on the path.
    from sglang.srt.entrypoints import http_server
    from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat
    from sglang.srt.managers.tokenizer_manager import ServerStatus, TokenizerManager
    from sglang.srt.parser.template_manager import TemplateManager

    from conftest import _train_tiny_tokenizer

    class CountingChat(OpenAIServingChat):
        async def _handle_non_streaming_request(self, adapted_request, request, raw_request):
            return {"tokens": len(adapted_request.input_ids)}

    tm = object.__new__(TokenizerManager)
    tm.tokenizer = _train_tiny_tokenizer()
    tm.async_dynamic_batch_tokenizer = None
    tm.server_args = SimpleNamespace(
        default_chat_template_kwargs=None,
        revision=None,
        tokenizer_metrics_allowed_custom_labels=None,
        context_length=None,
        allow_auto_truncate=False,
    )
    tm.model_config = SimpleNamespace(
        is_embedding_gemma=False,
        is_multimodal=False,
        model_path="tiny",
        get_default_sampling_params=lambda: {},
        hf_config=SimpleNamespace(
            model_type="llama", architectures=["LlamaForCausalLM"], to_dict=lambda: {}
        ),
    )
    tm.model_path = "tiny"
    tm.config_value = lambda key: None
    tm.request_logger = SimpleNamespace(log_requests=False, log_requests_level=0)
    tm.gracefully_exit = False
    tm.server_status = ServerStatus.Up
    if hasattr(tm, "init_request_preprocessing"):
        tm.init_request_preprocessing()
    http_server._global_state = SimpleNamespace(tokenizer_manager=tm)
    http_server.app.state.openai_serving_chat = CountingChat(tm, TemplateManager())
    content = SENTENCE * int(megabytes * 1e6 / len(SENTENCE))
    return http_server.app, content


async def _measure(app, content: str, interval: float) -> Result:
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
        worst, probes, slow = 0.0, 0, []
        while not chat.done():
            sent = time.monotonic()
            await asyncio.sleep(interval)
            health = await c.get("/health")
            delay = time.monotonic() - sent - interval
            assert health.status_code == 200, health.text
            probes += 1
            worst = max(worst, delay)
            if delay > 0.2:
                slow.append(f"+{sent - start:.2f}s: {delay:.2f}s")
        response = await chat
        response.raise_for_status()
        return Result(
            body_bytes=len(content),
            tokens=response.json()["tokens"],
            seconds=time.monotonic() - start,
            probes=probes,
            worst_delay=worst,
            slow_probes=slow,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=float, default=5.0, help="chat message size")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between probes")
    args = parser.parse_args()
    # /health without the generate round trip: there is no scheduler here.
    os.environ["SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"] = "false"
    app, content = _build_app(args.megabytes)
    result = asyncio.run(_measure(app, content, args.interval))
    print(
        f"{result.body_bytes / 1e6:.1f} MB chat, {result.tokens} tokens, "
        f"{result.seconds:.2f}s; {result.probes} /health probes, "
        f"worst delay {result.worst_delay:.2f}s"
    )
    for line in result.slow_probes:
        print(f"  slow probe at {line}")


if __name__ == "__main__":
    main()
