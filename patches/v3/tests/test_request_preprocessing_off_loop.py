"""Tests for request-preprocessing-off-loop.diff.

The patch moves request validation, chat-template rendering and tokenization off the event loop
onto two single-thread lanes owned by the TokenizerManager (bulk and small requests), each with
a private copy of the tokenizer; the loop keeps the original. These tests check, without a GPU or
a model: the loop keeps running and `/health` keeps answering while a conversion is held (the held
call waits on an event only a loop task sets, so inline execution fails every time), every
covered entrypoint converts on a worker, no tokenizer object is used by two threads (a
processor-style `padding=True` call on the loop while the worker converts), a tools prompt never
changes because of a tokenizer error, a small request does not wait behind a bulk one, a
cancelled conversion never overlaps the next, a manager without the new method still serves, and
token ids are those the inline code produced.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import logging
import threading
import time
from types import SimpleNamespace
from typing import Any, Dict, Iterator, List, Tuple

import httpx
import pytest

from sglang.srt.entrypoints import http_server
from sglang.srt.entrypoints.anthropic.protocol import (
    AnthropicCountTokensRequest,
    AnthropicMessagesRequest,
)
from sglang.srt.entrypoints.anthropic.serving import AnthropicServing
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, TokenizeRequest
from sglang.srt.entrypoints.openai.serving_base import OpenAIServingBase
from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat
from sglang.srt.entrypoints.openai.serving_tokenize import OpenAIServingTokenize
from sglang.srt.managers.tokenizer_manager import ServerStatus, TokenizerManager
from sglang.srt.parser.template_manager import TemplateManager

from conftest import sglang_version

# 0.5.23's serving classes read the published server arguments when built.
pytestmark = pytest.mark.usefixtures("published_server_args")

WORKER_PREFIX = "sglang-preprocess"
# Above the small-request lane's limit (64 KiB in the patch); the test requests say their size
# through the Content-Length header, as an HTTP request does.
BULK_BYTES = 5_000_000
SMALL_BYTES = 100

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
# Renders the tools as given, so the OpenAI-wrapped and the flat (function-only) form give
# different prompts.
TOOLS_TEMPLATE = (
    "{% if tools %}<|user|>tools: {{ tools | tojson }}</s>{% endif %}"
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


class RawRequest:
    """What handle_request reads of a starlette Request: the headers (the body size)."""

    def __init__(self, size: int) -> None:
        self.headers = {"content-length": str(size)}


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
    """The real chat serving class (real validation, conversion and chat template); generation
    replaced."""

    def __init__(self, tokenizer_manager: Any, *args: Any, **kwargs: Any) -> None:
        with startup(tokenizer_manager):
            super().__init__(tokenizer_manager, *args, **kwargs)

    async def _handle_non_streaming_request(self, adapted_request, request, raw_request):
        return {"status": "ok", "input_ids": list(adapted_request.input_ids)}


class HeldTokenizer:
    """Delegates to a real tokenizer; `apply_chat_template` and `__call__` (and `encode` with
    `hold_encode`) first run `hold`. A deep copy copies the real tokenizer and shares the hold."""

    def __init__(
        self, tokenizer: Any, hold: Any, is_fast: bool = True, hold_encode: bool = False
    ) -> None:
        self._tokenizer = tokenizer
        self._hold = hold
        self.is_fast = is_fast
        self.hold_encode = hold_encode
        self.at_startup = [False]  # shared by deep copies: see startup()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._tokenizer, name)

    def __deepcopy__(self, memo: dict) -> "HeldTokenizer":
        clone = copy.copy(self)  # same class and instrumentation, own real tokenizer
        clone._tokenizer = copy.deepcopy(self._tokenizer, memo)
        return clone

    def _held(self) -> None:
        if not self.at_startup[0]:
            self._hold()

    def apply_chat_template(self, *args: Any, **kwargs: Any) -> Any:
        self._held()
        return self._tokenizer.apply_chat_template(*args, **kwargs)

    def encode(self, *args: Any, **kwargs: Any) -> Any:
        if self.hold_encode:
            self._held()
        return self._tokenizer.encode(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._held()
        return self._tokenizer(*args, **kwargs)


@contextlib.contextmanager
def startup(tokenizer_manager: Any) -> Iterator[None]:
    """A serving object built here is built at server start, not per request: its own probes of
    the tokenizer (0.5.23's OpenAIServingChat renders and encodes a probe chat in __init__) are
    not held."""
    flag = getattr(tokenizer_manager.tokenizer, "at_startup", None)
    if flag is None:
        yield
        return
    flag[0] = True
    try:
        yield
    finally:
        flag[0] = False


class SlowTokenizer:
    """The real tokenizer seen as a slow (non-fast) one: `_tokenize_texts` then calls `encode`
    per text instead of one batch call."""

    is_fast = False

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._tokenizer, name)

    def __deepcopy__(self, memo: dict) -> "SlowTokenizer":
        return SlowTokenizer(copy.deepcopy(self._tokenizer, memo))


def _chat(content: str, **kwargs: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest(
        model="tiny", messages=[{"role": "user", "content": content}], **kwargs
    )


def _assert_off_loop(hold: Any, what: str) -> None:
    assert hold.released_by_loop, (
        f"{what} ran on thread {hold.threads} and was never released by the event loop: it "
        f"held the loop until its {hold.seconds}s limit"
    )
    assert hold.threads and hold.threads[0].startswith(WORKER_PREFIX), hold.threads


# --- the loop keeps running ------------------------------------------------------------------


@pytest.mark.detects_stock_bug
def test_event_loop_runs_while_conversion_is_held(make_tokenizer_manager, hold_factory):
    hold = hold_factory()
    serving = ConvertingServing(make_tokenizer_manager(), lambda request: hold() or "adapted")

    result = asyncio.run(hold.run_released_by_loop(serving.handle_request(object(), None)))

    assert result == {"status": "ok", "adapted": "adapted"}, result
    _assert_off_loop(hold, "_convert_to_internal_request")


@pytest.mark.detects_stock_bug
def test_health_answers_through_asgi_while_chat_conversion_is_held(
    make_tokenizer_manager, hold_factory, glm_tokenizer, monkeypatch
):
    # /health without the generate round trip (no scheduler here): it answers as soon as the
    # loop runs its handler, which is exactly what the fleet's probe measures.
    monkeypatch.setenv("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "false")
    hold = hold_factory()
    tm = make_tokenizer_manager(HeldTokenizer(glm_tokenizer, hold))
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
            health = await client.get("/health")
            # Only reached while the conversion is held if the loop is free.
            hold.released.set()
            return health, await chat

    health, chat = asyncio.run(scenario())

    assert health.status_code == 200, health.text
    assert chat.status_code == 200, chat.text
    assert chat.json()["status"] == "ok", chat.json()
    _assert_off_loop(hold, "the chat conversion (/health answered only after it)")


@pytest.mark.detects_stock_bug
def test_tokenize_texts_runs_off_the_event_loop(
    make_tokenizer_manager, hold_factory, glm_tokenizer
):
    hold = hold_factory()
    tm = make_tokenizer_manager(HeldTokenizer(glm_tokenizer, hold))

    input_ids, token_type_ids = asyncio.run(
        hold.run_released_by_loop(tm._tokenize_texts("hello world"))
    )

    assert input_ids == glm_tokenizer("hello world")["input_ids"]
    assert token_type_ids is None
    _assert_off_loop(hold, "the tokenizer call in _tokenize_texts")


# --- the other request paths -----------------------------------------------------------------


def _anthropic(tm: Any) -> AnthropicServing:
    return AnthropicServing(ChatServing(tm, TemplateManager()))


def _anthropic_messages(**kwargs: Any) -> Dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], **kwargs}


async def _anthropic_messages_call(tm: Any) -> Any:
    request = AnthropicMessagesRequest(**_anthropic_messages(max_tokens=8))
    return await _anthropic(tm).handle_messages(request, RawRequest(SMALL_BYTES))


async def _anthropic_count_tokens_call(tm: Any) -> Any:
    request = AnthropicCountTokensRequest(**_anthropic_messages())
    return await _anthropic(tm).handle_count_tokens(request, RawRequest(SMALL_BYTES))


async def _tokenize_messages_call(tm: Any) -> Any:
    with startup(tm):
        serving = OpenAIServingTokenize(tm, TemplateManager())
    request = TokenizeRequest(messages=[{"role": "user", "content": "hi"}])
    return await serving.handle_request(request, RawRequest(SMALL_BYTES))


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
@pytest.mark.parametrize(
    "call",
    [
        _anthropic_messages_call,
        _anthropic_count_tokens_call,
        _tokenize_messages_call,
    ],
    ids=["anthropic-messages", "anthropic-count-tokens", "tokenize-messages"],
)
def test_other_entrypoints_render_templates_off_the_loop(
    call, make_tokenizer_manager, hold_factory, glm_tokenizer
):
    hold = hold_factory()
    tm = make_tokenizer_manager(HeldTokenizer(glm_tokenizer, hold))

    asyncio.run(hold.run_released_by_loop(call(tm)))

    _assert_off_loop(hold, f"the chat template render of {call.__name__}")


def test_responses_renders_templates_off_the_loop(
    make_tokenizer_manager, hold_factory, glm_tokenizer
):
    """Unmarked: the Responses module needs openai_harmony, which the image does not ship (its
    /v1/responses is disabled there), so this test is skipped in the image."""
    pytest.importorskip("openai_harmony")
    from sglang.srt.entrypoints.openai.protocol import ResponsesRequest
    from sglang.srt.entrypoints.openai.serving_responses import OpenAIServingResponses

    hold = hold_factory()
    tm = make_tokenizer_manager(HeldTokenizer(glm_tokenizer, hold))
    serving = object.__new__(OpenAIServingResponses)
    OpenAIServingChat.__init__(serving, tm, TemplateManager())
    request = ResponsesRequest(model="tiny", input="hi")

    asyncio.run(
        hold.run_released_by_loop(serving._make_request(request, None, tm.tokenizer))
    )

    _assert_off_loop(hold, "the chat template render of Responses")


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_chat_validation_runs_off_the_loop(make_tokenizer_manager, glm_tokenizer, hold_factory):
    """Chat validation checks each tool's JSON schema (jsonschema): seconds for many large
    tools. It runs on the worker, together with the conversion."""
    hold = hold_factory()

    class HeldValidation(ChatServing):
        def _validate_request(self, request):
            hold()
            return super()._validate_request(request)

    serving = HeldValidation(make_tokenizer_manager(glm_tokenizer), TemplateManager())

    result = asyncio.run(
        hold.run_released_by_loop(serving.handle_request(_chat("hi", tools=TOOLS), None))
    )

    assert isinstance(result, dict), result
    _assert_off_loop(hold, "chat request validation")


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_score_tokenizes_off_the_loop(make_tokenizer_manager, glm_tokenizer, hold_factory):
    """Multi-item scoring tokenizes the query and every item itself (single-item scoring sends
    text to generate_request, i.e. through _tokenize_texts)."""
    hold = hold_factory()
    tm = make_tokenizer_manager(HeldTokenizer(glm_tokenizer, hold, hold_encode=True))
    tm.is_generation = True
    tm.server_args.enable_mis = True  # 0.5.19 reads it here
    generated = _stop_at_generation(tm)

    async def scenario():
        with _multi_item_scoring(), pytest.raises(_Stop):
            await tm.score_request(
                query="the query", items=["item one", "item two"], label_token_ids=[1, 2]
            )

    asyncio.run(hold.run_released_by_loop(scenario()))

    assert generated and generated[0].input_ids, generated
    _assert_off_loop(hold, "score's query and item tokenization")


@pytest.mark.detects_stock_bug_on("0.5.23")
@pytest.mark.skipif(sglang_version() == "0.5.19", reason="0.5.19 has no score_extraction_token_id")
def test_setwise_score_extraction_tokenizes_off_the_loop(make_tokenizer_manager, glm_tokenizer, hold_factory):
    """0.5.23's setwise readout (score_extraction_token_id, text query and items, no
    multi-item scoring) encodes query + item once per item itself: on the lane in v4."""
    from sglang.srt.runtime_context import get_context

    query, items = "the query ", ["item one", "the item one"]
    anchor = glm_tokenizer.encode(query + items[0])[-1]
    assert all(anchor in glm_tokenizer.encode(query + item) for item in items)  # the test's own premise
    hold = hold_factory()
    tm = make_tokenizer_manager(HeldTokenizer(glm_tokenizer, hold, hold_encode=True))
    tm.is_generation = True
    generated = _stop_at_generation(tm)

    async def scenario():
        setwise = get_context().override_server_args(
            enable_mis=False, disable_radix_cache=True, chunked_prefill_size=-1, allow_auto_truncate=False)
        with setwise, pytest.raises(_Stop):
            await tm.score_request(
                query=query, items=items, label_token_ids=[1, 2], score_extraction_token_id=anchor
            )

    asyncio.run(hold.run_released_by_loop(scenario()))

    assert generated and generated[0].input_ids, generated
    _assert_off_loop(hold, "score extraction's query + item encodes")


@pytest.mark.detects_stock_bug_on("0.5.23")
@pytest.mark.skipif(sglang_version() == "0.5.19", reason="0.5.19 has no chat encode plan")
def test_the_first_chat_builds_no_tokenizer_plan(make_tokenizer_manager, glm_tokenizer, monkeypatch):
    """0.5.23's chat encode builds a plan per tokenizer object on its first call: the tokenizer's
    whole JSON parsed in one C call, which held the GIL 250 ms on a lane in the lab's mixed traffic
    (v4's worst probe). v4 builds it for the lanes' copies when the manager starts, so a chat
    after start builds none (stock 0.5.23 builds it in the first chat, on the loop)."""
    from sglang.srt.entrypoints.openai import parallel_prompt_encode
    from sglang.srt.runtime_context import get_context

    tm = make_tokenizer_manager(copy.deepcopy(glm_tokenizer))  # a tokenizer with no plan yet
    built: List[str] = []
    real = parallel_prompt_encode._build_plan

    def recording(tokenizer):
        built.append(threading.current_thread().name)
        return real(tokenizer)

    with get_context().override_server_args():
        serving = ChatServing(tm, TemplateManager())
        monkeypatch.setattr(parallel_prompt_encode, "_build_plan", recording)
        # Over 0.5.23's parallel-encode minimum (32 Ki characters), under the tokenizer
        # process's (256 Ki): encoded on the lane, by parallel_prompt_encode.
        result = asyncio.run(serving.handle_request(_chat("a chat after start " * 3000), None))

    assert isinstance(result, dict), f"handle_request returned an error: {result!r}"
    assert result["input_ids"]
    assert built == [], f"the chat built a tokenizer plan on {built}"


class _Stop(Exception):
    pass


def _stop_at_generation(tm: Any) -> List[Any]:
    """Replace tm.generate_request with a stub that records the request it is given and ends
    the call there (_Stop); returns the record."""
    generated: List[Any] = []

    async def no_generation(obj, request=None):
        generated.append(obj)
        raise _Stop()
        yield  # an async generator, like generate_request

    tm.generate_request = no_generation
    return generated


def _multi_item_scoring() -> Any:
    """0.5.23 reads --enable-mis from the runtime context (get_exec().features.enable_mis)."""
    if sglang_version() == "0.5.19":
        return contextlib.nullcontext()
    from sglang.srt.runtime_context import get_context

    return get_context().override_server_args(enable_mis=True)


# --- one tokenizer object per thread ---------------------------------------------------------


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_workers_and_loop_each_own_a_tokenizer(make_tokenizer_manager, glm_tokenizer):
    """Deterministic form of the race: the object a worker tokenizes with is never the one the
    loop (stop strings, logprob decodes, the inline multimodal processor) uses, and the two lanes
    have different ones."""
    tm = make_tokenizer_manager(glm_tokenizer)
    seen: Dict[str, Any] = {}

    def convert_with(lane: str):
        def convert(request):
            seen[lane] = tm.tokenizer
            return "adapted"

        return convert

    async def scenario():
        for lane, size in (("bulk", BULK_BYTES), ("small", SMALL_BYTES)):
            serving = ConvertingServing(tm, convert_with(lane))
            await serving.handle_request(object(), RawRequest(size))
        seen["loop"] = tm.tokenizer

    asyncio.run(scenario())

    assert seen["loop"] is glm_tokenizer
    assert seen["bulk"] is not glm_tokenizer, "the bulk worker tokenizes with the loop's object"
    assert seen["small"] is not glm_tokenizer, "the small worker tokenizes with the loop's object"
    assert seen["bulk"] is not seen["small"], "the two lanes share one tokenizer object"
    text = "hello world " * 10
    assert seen["bulk"].encode(text) == seen["small"].encode(text) == glm_tokenizer.encode(text)


def _padding_load_on_loop(tokenizer: Any, errors: List[str], stop: asyncio.Event):
    """What the inline multimodal processor does on the loop: the tokenizer called with
    padding=True (a mutable borrow inside `tokenizers`), as often as the loop allows."""

    async def run() -> int:
        calls = 0
        while not stop.is_set():
            try:
                tokenizer(["a short prompt", "a longer prompt than that"], padding=True)
            except RuntimeError as error:
                errors.append(f"loop: {error}")
            calls += 1
            await asyncio.sleep(0)
        return calls

    return run()


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_padding_calls_on_the_loop_while_the_worker_converts(
    make_tokenizer_manager, glm_tokenizer
):
    """Real `tokenizers`, no mocks: the loop keeps calling the tokenizer with padding=True while
    the worker encodes a 1 MB prompt; neither side may ever see "Already borrowed"."""
    tokenizer = copy.deepcopy(glm_tokenizer)
    tm = make_tokenizer_manager(tokenizer)
    text = "lorem ipsum dolor sit amet " * 40000
    expected = glm_tokenizer(text)["input_ids"]
    errors: List[str] = []

    async def scenario():
        stop = asyncio.Event()
        load = asyncio.create_task(_padding_load_on_loop(tm.tokenizer, errors, stop))
        results = []
        try:
            for _ in range(3):
                try:
                    results.append(await tm._tokenize_texts(text))
                except RuntimeError as error:
                    errors.append(f"worker: {error}")
        finally:
            stop.set()
        return results, await load

    results, loop_calls = asyncio.run(scenario())

    assert loop_calls > 0
    assert not errors, f"{len(errors)} tokenizer errors, e.g. {errors[:3]}"
    assert all(ids == expected for ids, _ in results), "token ids changed under load"


@pytest.mark.detects_previous_v3
def test_tools_prompt_stays_byte_identical_under_padding_load(
    make_tokenizer_manager, glm_tokenizer
):
    """A tool-calling chat converted while the loop makes processor-style padding calls: the
    prompt must be the one rendered with the request's tools, every time (0.5.19 retries any
    error with the tools flattened, which silently serves a different prompt)."""
    tokenizer = copy.deepcopy(glm_tokenizer)
    tokenizer.chat_template = TOOLS_TEMPLATE
    tm = make_tokenizer_manager(tokenizer)
    serving = ChatServing(tm, TemplateManager())
    content = "what is the weather in paris " * 8000  # ~230 KB: the bulk lane
    # What 0.5.19 serves, converted inline with nothing else running.
    reference = list(serving._convert_to_internal_request(_chat(content, tools=TOOLS), None)[0].input_ids)
    flat_tools = [tool["function"] for tool in TOOLS]
    flat = tokenizer.encode(
        tokenizer.apply_chat_template(
            [{"role": "user", "content": content}],
            tools=flat_tools,
            tokenize=False,
            add_generation_prompt=True,
        )
    )
    assert reference != flat
    errors: List[str] = []

    async def scenario():
        stop = asyncio.Event()
        load = asyncio.create_task(_padding_load_on_loop(tm.tokenizer, errors, stop))
        try:
            return [
                await serving.handle_request(
                    _chat(content, tools=TOOLS), RawRequest(len(content))
                )
                for _ in range(4)
            ]
        finally:
            stop.set()
            await load

    results = asyncio.run(scenario())

    prompts = [r["input_ids"] if isinstance(r, dict) else r for r in results]
    outcomes = [
        "same" if p == reference else "flattened tools" if p == flat else repr(p)[:80]
        for p in prompts
    ]
    assert outcomes == ["same"] * len(prompts), (
        f"tool requests under padding load: {outcomes}; tokenizer errors: {errors[:3]}"
    )
    assert not errors, errors[:3]


class RaisingOnceTokenizer(HeldTokenizer):
    """The real tokenizer whose first `encode` raises the error `tokenizers` raises for a
    concurrent borrow."""

    def __init__(self, tokenizer: Any) -> None:
        super().__init__(tokenizer, lambda: None)
        self._state = {"encodes": 0, "renders": 0}  # shared by deep copies

    def apply_chat_template(self, *args: Any, **kwargs: Any) -> Any:
        self._state["renders"] += 1
        return self._tokenizer.apply_chat_template(*args, **kwargs)

    def encode(self, *args: Any, **kwargs: Any) -> Any:
        self._state["encodes"] += 1
        if self._state["encodes"] == 1:
            raise RuntimeError("Already borrowed")
        return self._tokenizer.encode(*args, **kwargs)


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_tokenizer_error_never_retries_with_flattened_tools(
    make_tokenizer_manager, glm_tokenizer
):
    tokenizer = copy.deepcopy(glm_tokenizer)
    tokenizer.chat_template = TOOLS_TEMPLATE
    wrapped = RaisingOnceTokenizer(tokenizer)
    tm = make_tokenizer_manager(wrapped)
    serving = ChatServing(tm, TemplateManager())
    wrapped._state.update(encodes=0, renders=0)  # the serving's own probe encodes at init

    result = asyncio.run(serving.handle_request(_chat("weather?", tools=TOOLS), None))

    assert not isinstance(result, dict), (
        f"the request succeeded after a RuntimeError from the tokenizer, with the tools "
        f"re-rendered in the flat form ({wrapped._state['renders']} renders): its prompt is "
        f"not the one the client asked for"
    )
    assert result.status_code == 500, result.body
    assert b"Already borrowed" in result.body, result.body
    assert wrapped._state["renders"] == 1, wrapped._state


@pytest.mark.detects_previous_v3
@pytest.mark.parametrize("error", [RuntimeError, NotImplementedError, RecursionError])
def test_a_template_rejecting_wrapped_tools_is_retried_flat_as_0_5_19(
    error, make_tokenizer_manager, glm_tokenizer
):
    """A template that raises for OpenAI-wrapped tools (whatever the exception) gets the flat
    function-only tools, as 0.5.19 retries them; the encode stays outside that retry."""
    tokenizer = copy.deepcopy(glm_tokenizer)
    tokenizer.chat_template = (
        "{% for t in tools or [] %}{% if t.function is defined %}"
        "{{ raise_exception('wrapped') }}{% endif %}{{ t.name }}{% endfor %}"
        "{% for m in messages %}{{ m.content }}{% endfor %}"
    )
    real_render = type(tokenizer).apply_chat_template

    class Rejecting(type(tokenizer)):
        def apply_chat_template(self, *args, **kwargs):
            tools = kwargs.get("tools") or []
            if any("function" in t for t in tools):
                raise error("this template wants flat tools")
            return real_render(self, *args, **kwargs)

    tokenizer.__class__ = Rejecting
    serving = ChatServing(make_tokenizer_manager(tokenizer), TemplateManager())

    result = asyncio.run(serving.handle_request(_chat("weather?", tools=TOOLS), None))

    assert isinstance(result, dict), f"not retried with flat tools: {getattr(result, 'body', result)!r}"
    assert glm_tokenizer.decode(result["input_ids"]).endswith("get_weatherweather?"), (
        glm_tokenizer.decode(result["input_ids"])
    )


@pytest.mark.detects_previous_v3
def test_anthropic_serving_with_a_chat_layer_without_the_new_method(
    make_tokenizer_manager, glm_tokenizer
):
    """A chat serving object built on 0.5.19 (a subclass or a double without _run_preprocessing)
    still serves count_tokens: the Anthropic layer runs the step inline, as 0.5.19."""

    class OldChat:
        def __init__(self, chat):
            self._chat = chat

        def __getattr__(self, name):
            if name == "_run_preprocessing":
                raise AttributeError(name)
            return getattr(self._chat, name)

    tm = make_tokenizer_manager(glm_tokenizer)
    serving = AnthropicServing(OldChat(ChatServing(tm, TemplateManager())))
    request = AnthropicCountTokensRequest(**_anthropic_messages())

    response = asyncio.run(serving.handle_count_tokens(request, RawRequest(SMALL_BYTES)))

    assert response.status_code == 200, response.body


# --- lanes -----------------------------------------------------------------------------------


# 0.5.23 converts chat requests on the default executor (several threads): a small one does not
# wait behind a bulk conversion there.
@pytest.mark.detects_stock_bug_on("0.5.19")
@pytest.mark.detects_previous_v3
def test_small_request_does_not_wait_behind_a_bulk_conversion(
    make_tokenizer_manager, hold_factory
):
    hold = hold_factory()
    tm = make_tokenizer_manager()
    bulk = ConvertingServing(tm, lambda request: hold() or "bulk")
    small = ConvertingServing(tm, lambda request: "small")

    async def scenario():
        bulk_task = asyncio.create_task(bulk.handle_request(object(), RawRequest(BULK_BYTES)))
        await hold.wait_started()
        small_result = await small.handle_request(object(), RawRequest(SMALL_BYTES))
        # Released only once the small request is done: on one shared lane it never is.
        hold.released.set()
        return small_result, await bulk_task

    small_result, bulk_result = asyncio.run(scenario())

    assert small_result["adapted"] == "small" and bulk_result["adapted"] == "bulk"
    assert hold.released_by_loop, (
        f"the small request waited behind the held bulk conversion until its "
        f"{hold.seconds}s limit"
    )


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_each_lane_runs_one_call_at_a_time_in_order(make_tokenizer_manager, glm_tokenizer):
    """Per tokenizer object, never two calls at once; per lane, FIFO."""
    lock = threading.Lock()
    active: Dict[int, int] = {}
    peak: Dict[int, int] = {}
    ran: List[Tuple[str, str]] = []

    class CountingTokenizer(HeldTokenizer):
        def __call__(self, texts, **kwargs):
            key = id(self)
            with lock:
                active[key] = active.get(key, 0) + 1
                peak[key] = max(peak.get(key, 0), active[key])
            time.sleep(0.02)
            with lock:
                active[key] -= 1
                ran.append((threading.current_thread().name, texts[0]))
            return self._tokenizer(texts, **kwargs)

    tm = make_tokenizer_manager(CountingTokenizer(glm_tokenizer, lambda: None))
    small_texts = [f"small {i}" for i in range(4)]
    bulk_texts = [f"bulk {i} " + "x" * 70_000 for i in range(3)]

    async def scenario():
        calls = [tm._tokenize_texts(t) for t in bulk_texts + small_texts]
        return await asyncio.gather(*calls)

    asyncio.run(scenario())

    assert peak and all(v == 1 for v in peak.values()), f"concurrent calls per tokenizer: {peak}"
    by_thread: Dict[str, List[str]] = {}
    for thread, text in ran:
        by_thread.setdefault(thread, []).append(text.split(" ")[0] + " " + text.split(" ")[1])
    orders = sorted(by_thread.values())
    assert [f"bulk {i}" for i in range(3)] in orders, by_thread
    assert [f"small {i}" for i in range(4)] in orders, by_thread


@pytest.mark.detects_stock_bug
def test_cancelled_conversion_never_overlaps_the_next(make_tokenizer_manager, hold_factory):
    hold = hold_factory()
    tm = make_tokenizer_manager()
    spans: Dict[str, List[float]] = {}

    def convert(label: str):
        def run(request):
            spans[label] = [time.monotonic()]
            if label == "first":
                hold()
            spans[label].append(time.monotonic())
            return label

        return run

    first = ConvertingServing(tm, convert("first"))
    second = ConvertingServing(tm, convert("second"))

    async def scenario():
        task = asyncio.create_task(first.handle_request(object(), RawRequest(BULK_BYTES)))
        await hold.wait_started()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        nxt = asyncio.create_task(second.handle_request(object(), RawRequest(BULK_BYTES)))
        await asyncio.sleep(0)
        hold.released.set()
        return task.cancelled(), await nxt

    cancelled, result = asyncio.run(scenario())

    assert cancelled
    assert result["adapted"] == "second"
    assert spans["second"][0] >= spans["first"][1], (
        f"the next conversion started while the cancelled one still ran: {spans}"
    )


# --- compatibility ---------------------------------------------------------------------------


@pytest.mark.detects_previous_v3
def test_manager_without_the_new_method_still_serves_with_one_warning(glm_tokenizer, caplog):
    """A tokenizer manager without run_request_preprocessing (a test double or another frontend):
    requests are converted where that release's stock code converts them, after one warning:
    on the event loop in 0.5.19, on the loop's default executor in 0.5.23 (upstream's own
    test_serving_base_event_loop checks the latter with such a double)."""
    caplog.set_level(logging.WARNING)
    tm = SimpleNamespace(
        tokenizer=glm_tokenizer,
        server_args=SimpleNamespace(tokenizer_metrics_allowed_custom_labels=None),
        request_logger=SimpleNamespace(log_requests=False, log_requests_level=0),
    )
    converted_on = []
    serving = ConvertingServing(
        tm, lambda request: converted_on.append(threading.get_ident()) or "adapted"
    )

    async def scenario():
        return [await serving.handle_request(object(), None) for _ in range(3)]

    results = asyncio.run(scenario())

    assert results == [{"status": "ok", "adapted": "adapted"}] * 3, results
    on_loop = [ident == threading.get_ident() for ident in converted_on]
    assert on_loop == [sglang_version() == "0.5.19"] * 3, on_loop
    if hasattr(TokenizerManager, "run_request_preprocessing"):
        warnings = [r for r in caplog.records if "run_request_preprocessing" in r.getMessage()]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]


# --- behaviour kept --------------------------------------------------------------------------


# 0.5.23's own off-loop conversion (loop.run_in_executor) runs without the caller's context.
@pytest.mark.detects_stock_bug_on("0.5.23")
def test_preprocessing_sees_the_callers_contextvars(make_tokenizer_manager, glm_tokenizer):
    request_tag: contextvars.ContextVar[str] = contextvars.ContextVar("request_tag")
    seen: List[Tuple[str, str]] = []

    class TaggingTokenizer(HeldTokenizer):
        def __init__(self, tokenizer: Any = glm_tokenizer, hold: Any = None, is_fast=True):
            super().__init__(
                tokenizer, lambda: seen.append(("tokenize", request_tag.get("<unset>")))
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


def test_token_ids_match_the_tokenizer(make_tokenizer_manager, glm_tokenizer):
    long_text = " ".join(["lorem ipsum dolor sit amet"] * 40000)  # ~1 MB
    texts = ["hello world", "another prompt", long_text]
    pairs = [["query text", "document text"]]
    fast = make_tokenizer_manager(glm_tokenizer)
    slow = make_tokenizer_manager(SlowTokenizer(glm_tokenizer))

    async def scenario():
        return (
            await fast._tokenize_texts(long_text),
            await fast._tokenize_texts(texts),
            await fast._tokenize_texts(pairs, is_cross_encoder=True),
            await slow._tokenize_texts(texts),
        )

    single, batch, cross, slow_batch = asyncio.run(scenario())

    assert single == (glm_tokenizer(long_text)["input_ids"], None)
    assert batch == (glm_tokenizer(texts)["input_ids"], None)
    expected_pairs = glm_tokenizer(pairs, return_token_type_ids=True)
    assert cross == (expected_pairs["input_ids"][0], expected_pairs["token_type_ids"][0])
    assert slow_batch == ([glm_tokenizer.encode(t) for t in texts], None)


def test_chat_token_ids_match_the_inline_conversion(make_tokenizer_manager, glm_tokenizer):
    content = " ".join(["tell me about the weather"] * 5000)
    serving = ChatServing(make_tokenizer_manager(glm_tokenizer), TemplateManager())

    result = asyncio.run(serving.handle_request(_chat(content), None))
    inline, _ = serving._convert_to_internal_request(_chat(content), None)

    assert isinstance(result, dict), f"handle_request returned an error: {result!r}"
    rendered = glm_tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )
    assert result["input_ids"] == list(inline.input_ids)
    assert result["input_ids"] == glm_tokenizer.encode(rendered)
