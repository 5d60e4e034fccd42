"""Tests for request-preprocessing-off-loop.diff.

The patch moves `OpenAIServingBase.handle_request`'s `_convert_to_internal_request` (chat template
rendering + tokenization) and `TokenizerManager._tokenize_texts`' regular-tokenizer path onto one
single-worker executor owned by the TokenizerManager. These tests check, without a GPU or a model:
the event loop keeps ticking and `/health` keeps answering while a conversion is blocked,
`_tokenize_texts` runs off the loop, preprocessing never runs twice at once, contextvars follow the
call, and token ids are those the inline code produced.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from types import SimpleNamespace
from typing import Any, List, Tuple

import httpx
import pytest

from sglang.srt.entrypoints import http_server
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
from sglang.srt.entrypoints.openai.serving_base import OpenAIServingBase
from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat
from sglang.srt.managers.tokenizer_manager import ServerStatus
from sglang.srt.parser.template_manager import TemplateManager

WORKER_PREFIX = "sglang-preprocess"
# A free loop ticks about 50 times in a 0.5 s hold (10 ms ticks); a blocked one not at all.
MIN_TICKS = 20


class ConvertingServing(OpenAIServingBase):
    """The real `OpenAIServingBase.handle_request` around a test-supplied conversion; generation
    is replaced by returning what the conversion produced."""

    def __init__(self, tokenizer_manager: Any, convert: Any) -> None:
        super().__init__(tokenizer_manager)
        self._convert = convert

    def _request_id_prefix(self) -> str:
        return "test-"

    def _convert_to_internal_request(self, request: Any, raw_request: Any = None):
        return self._convert(request), request

    async def _handle_non_streaming_request(self, adapted_request, request, raw_request):
        return {"status": "ok", "adapted": adapted_request}


class ChatServing(OpenAIServingChat):
    """The real chat serving class (real conversion and chat template); generation replaced."""

    async def _handle_non_streaming_request(self, adapted_request, request, raw_request):
        return {"status": "ok", "input_ids": list(adapted_request.input_ids)}


class HeldTokenizer:
    """Delegates to a real tokenizer; `apply_chat_template` and `__call__` first run `hold`."""

    def __init__(self, tokenizer: Any, hold: Any, is_fast: bool = True) -> None:
        self._tokenizer = tokenizer
        self._hold = hold
        self.is_fast = is_fast

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)

    def apply_chat_template(self, *args: Any, **kwargs: Any) -> Any:
        self._hold()
        return self._tokenizer.apply_chat_template(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._hold()
        return self._tokenizer(*args, **kwargs)


class SlowTokenizer:
    """The real tokenizer seen as a slow (non-fast) one: `_tokenize_texts` then calls `encode`
    per text instead of one batch call."""

    is_fast = False

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


def _chat(content: str) -> ChatCompletionRequest:
    return ChatCompletionRequest(
        model="tiny", messages=[{"role": "user", "content": content}]
    )


@pytest.mark.detects_stock_bug
def test_event_loop_ticks_while_conversion_is_blocked(
    make_tokenizer_manager, hold_factory, tick_recorder
):
    hold = hold_factory()
    serving = ConvertingServing(make_tokenizer_manager(), lambda request: hold() or "adapted")

    async def scenario():
        tick_recorder.start()
        result = await serving.handle_request(object(), None)
        await tick_recorder.stop()
        return result

    result = asyncio.run(scenario())

    assert result == {"status": "ok", "adapted": "adapted"}, result
    ticks = tick_recorder.between(hold.started_at, hold.ended_at)
    assert ticks >= MIN_TICKS, (
        f"the event loop ticked {ticks} times during a {hold.seconds}s blocked "
        f"_convert_to_internal_request (want >= {MIN_TICKS}); the conversion ran on thread "
        f"{hold.threads}, i.e. on the loop"
    )
    assert hold.threads[0].startswith(WORKER_PREFIX), hold.threads


@pytest.mark.detects_stock_bug
def test_health_answers_through_asgi_while_chat_conversion_is_blocked(
    make_tokenizer_manager, hold_factory, tiny_tokenizer, monkeypatch
):
    # /health without the generate round trip (no scheduler here): it answers as soon as the
    # loop runs its handler, which is exactly what the fleet's probe measures.
    monkeypatch.setenv("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "false")
    hold = hold_factory(seconds=1.0)
    tm = make_tokenizer_manager(HeldTokenizer(tiny_tokenizer, hold))
    tm.gracefully_exit = False
    tm.server_status = ServerStatus.Up
    monkeypatch.setattr(http_server, "_global_state", SimpleNamespace(tokenizer_manager=tm))
    monkeypatch.setattr(
        http_server.app.state,
        "openai_serving_chat",
        ChatServing(tm, TemplateManager()),
        raising=False,
    )

    async def scenario():
        transport = httpx.ASGITransport(app=http_server.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            chat = asyncio.create_task(
                client.post(
                    "/v1/chat/completions",
                    json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}]},
                )
            )
            await hold.wait_started()
            sent = time.monotonic()
            health = await client.get("/health")
            answered = time.monotonic()
            hold.released.set()
            return health, answered - sent, answered, await chat

    health, latency, answered, chat = asyncio.run(scenario())

    assert health.status_code == 200, health.text
    assert chat.status_code == 200, chat.text
    assert chat.json()["status"] == "ok", chat.json()
    assert answered < hold.ended_at, (
        f"/health answered {answered - hold.started_at:.2f}s after the chat conversion "
        f"started, only once it had ended: the conversion held the loop for "
        f"{hold.ended_at - hold.started_at:.2f}s on thread {hold.threads}"
    )
    assert latency < 0.5, f"/health took {latency:.2f}s while a chat conversion was blocked"


@pytest.mark.detects_stock_bug
def test_tokenize_texts_runs_off_the_event_loop(
    make_tokenizer_manager, hold_factory, tick_recorder, tiny_tokenizer
):
    hold = hold_factory()
    tm = make_tokenizer_manager(HeldTokenizer(tiny_tokenizer, hold))

    async def scenario():
        tick_recorder.start()
        result = await tm._tokenize_texts("hello world")
        await tick_recorder.stop()
        return result

    input_ids, token_type_ids = asyncio.run(scenario())

    assert input_ids == tiny_tokenizer("hello world")["input_ids"]
    assert token_type_ids is None
    ticks = tick_recorder.between(hold.started_at, hold.ended_at)
    assert ticks >= MIN_TICKS, (
        f"the event loop ticked {ticks} times during a {hold.seconds}s blocked tokenizer call "
        f"in _tokenize_texts (want >= {MIN_TICKS}); it ran on thread {hold.threads}"
    )
    assert hold.threads[0].startswith(WORKER_PREFIX), hold.threads


def test_preprocessing_never_runs_twice_at_once(make_tokenizer_manager, tiny_tokenizer):
    """Conversions and `_tokenize_texts` share one worker: HF fast tokenizers are not
    thread-safe, so two preprocessing calls must never overlap."""
    lock = threading.Lock()
    active = 0
    peak = 0
    ran: List[str] = []

    def step(label: str) -> None:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.05)
        with lock:
            active -= 1
            ran.append(label)

    class CountingTokenizer(HeldTokenizer):
        def __init__(self) -> None:
            super().__init__(tiny_tokenizer, lambda: step("tokenize"))

    tm = make_tokenizer_manager(CountingTokenizer())
    serving = ConvertingServing(tm, lambda request: step("convert") or "adapted")

    async def scenario():
        calls = [serving.handle_request(object(), None) for _ in range(4)]
        calls += [tm._tokenize_texts(f"text {i}") for i in range(4)]
        return await asyncio.gather(*calls)

    results = asyncio.run(scenario())

    assert results[:4] == [{"status": "ok", "adapted": "adapted"}] * 4, results[:4]
    assert sorted(ran) == ["convert"] * 4 + ["tokenize"] * 4, ran
    assert peak == 1, f"{peak} preprocessing calls ran at the same time"


def test_preprocessing_sees_the_callers_contextvars(make_tokenizer_manager, tiny_tokenizer):
    request_tag: contextvars.ContextVar[str] = contextvars.ContextVar("request_tag")
    seen: List[Tuple[str, str]] = []

    class TaggingTokenizer(HeldTokenizer):
        def __init__(self) -> None:
            super().__init__(
                tiny_tokenizer, lambda: seen.append(("tokenize", request_tag.get("<unset>")))
            )

    tm = make_tokenizer_manager(TaggingTokenizer())
    serving = ConvertingServing(
        tm, lambda request: seen.append(("convert", request_tag.get("<unset>"))) or "adapted"
    )

    async def one_request(tag: str) -> None:
        request_tag.set(tag)
        await serving.handle_request(object(), None)
        await tm._tokenize_texts(f"text for {tag}")

    async def scenario():
        await asyncio.gather(one_request("a"), one_request("b"))

    asyncio.run(scenario())

    assert sorted(seen) == [
        ("convert", "a"),
        ("convert", "b"),
        ("tokenize", "a"),
        ("tokenize", "b"),
    ], seen


def test_token_ids_match_the_tokenizer(make_tokenizer_manager, tiny_tokenizer):
    long_text = " ".join(["lorem ipsum dolor sit amet"] * 40000)  # ~1 MB
    texts = ["hello world", "another prompt", long_text]
    pairs = [["query text", "document text"]]
    fast = make_tokenizer_manager(tiny_tokenizer)
    slow = make_tokenizer_manager(SlowTokenizer(tiny_tokenizer))

    async def scenario():
        return (
            await fast._tokenize_texts(long_text),
            await fast._tokenize_texts(texts),
            await fast._tokenize_texts(pairs, is_cross_encoder=True),
            await slow._tokenize_texts(texts),
        )

    single, batch, cross, slow_batch = asyncio.run(scenario())

    assert single == (tiny_tokenizer(long_text)["input_ids"], None)
    assert batch == (tiny_tokenizer(texts)["input_ids"], None)
    expected_pairs = tiny_tokenizer(pairs, return_token_type_ids=True)
    assert cross == (expected_pairs["input_ids"][0], expected_pairs["token_type_ids"][0])
    assert slow_batch == ([tiny_tokenizer.encode(t) for t in texts], None)


def test_chat_token_ids_match_the_inline_conversion(make_tokenizer_manager, tiny_tokenizer):
    content = " ".join(["tell me about the weather"] * 5000)
    serving = ChatServing(make_tokenizer_manager(tiny_tokenizer), TemplateManager())

    result = asyncio.run(serving.handle_request(_chat(content), None))
    inline, _ = serving._convert_to_internal_request(_chat(content), None)

    assert isinstance(result, dict), f"handle_request returned an error: {result!r}"
    rendered = tiny_tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )
    assert result["input_ids"] == list(inline.input_ids)
    assert result["input_ids"] == tiny_tokenizer.encode(rendered)
