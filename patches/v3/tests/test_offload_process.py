"""Tests for offload-process.diff: a prompt of more than TOKENIZER_PROCESS_MIN_CHARS is encoded
by its preprocessing lane's tokenizer process, and a body of more than LARGE_BODY_MIN_BYTES is
parsed by a JSON process, so no thread of the server process holds the GIL while `tokenizers`
turns millions of ids into a list or orjson parses megabytes.

Real tokenizer and real orjson throughout (the GLM-class BPE of glm_tokenizer.py, 151,552
tokens and a 7 MB backend JSON, as GLM-5.3's; the children run the same libraries). What is observed is where the work ran: `encode_calls` records every call of
transformers' fast `_encode_plus` in this process and `parse_calls` every `orjson.loads`
(pass-through spies on the real functions), so a large prompt or body handled in this process
shows up there, and one handled by a child does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import ctypes
import inspect
import logging
import mmap
import os
import signal
import sys
import threading
from types import SimpleNamespace
from typing import Any, Callable, Dict, Iterator, List, Tuple

import orjson
import pytest
from conftest import (
    large_body_parser,
    patch_tokenizer_manager_global,
    sglang_version,
    tokenizer_manager_global,
)
from test_dispatch_off_loop import _request, dispatching  # noqa: F401 (a fixture)
from test_request_preprocessing_off_loop import (
    TOOLS,
    TOOLS_TEMPLATE,
    ChatServing,
    RawRequest,
    _chat,
)

from sglang.srt.parser.template_manager import TemplateManager

# 0.5.23's serving classes (ChatServing here) read the published server arguments when built.
pytestmark = pytest.mark.usefixtures("published_server_args")

LARGE_CHARS = tokenizer_manager_global("TOKENIZER_PROCESS_MIN_CHARS", 256 * 1024) + 4096
SENTENCE = "the quick brown fox jumps over the lazy dog, naïve café 東京 "
LARGE_TEXT = (SENTENCE * (LARGE_CHARS // len(SENTENCE) + 1))[:LARGE_CHARS]


def _chars(text: Any) -> int:
    if isinstance(text, str):
        return len(text)
    return sum(_chars(t) for t in text)


@pytest.fixture(autouse=True)
def log_each_fallback_cause_again() -> None:
    """The offload paths log a fallback once per cause and process: each test sees its own."""
    try:
        from glm53_offload import offload_process
    except ImportError:  # stock: no offload paths
        return
    stats = getattr(offload_process, "STATS", None)
    if stats is not None:
        stats._logged.clear()


@pytest.fixture
def encode_calls(monkeypatch) -> List[Tuple[str, int]]:
    """(thread name, characters) of every fast-tokenizer encode in this process."""
    from transformers import PreTrainedTokenizerFast

    real = PreTrainedTokenizerFast._encode_plus
    calls: List[Tuple[str, int]] = []

    def recording(self, text, *args, **kwargs):
        calls.append((threading.current_thread().name, _chars(text)))
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(PreTrainedTokenizerFast, "_encode_plus", recording)
    return calls


def _large_encodes(calls: List[Tuple[str, int]]) -> List[Tuple[str, int]]:
    return [call for call in calls if call[1] >= LARGE_CHARS]


def _counts() -> Dict[str, int]:
    """The offload counters (what /metrics exports); {} on a tree without them."""
    from glm53_offload import offload_process

    stats = getattr(offload_process, "STATS", None)
    return stats.snapshot() if stats is not None else {}


def _delta(before: Dict[str, int], path: str = "") -> Dict[str, int]:
    """The counters of `path` (every path: "") that changed since `before`."""
    after = _counts()
    return {key: n - before.get(key, 0) for key, n in after.items()
            if key.startswith(path) and n != before.get(key, 0)}


def _one_worker(parser: Any) -> None:
    """A body parser with one thread (and so one child), for tests that follow one child."""
    parser.close()
    if hasattr(parser, "workers"):
        parser.workers = 1


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_large_generate_prompt_is_encoded_in_another_process(
    make_tokenizer_manager, glm_tokenizer, encode_calls
):
    tm = make_tokenizer_manager(glm_tokenizer)

    input_ids, token_type_ids = asyncio.run(tm._tokenize_texts(LARGE_TEXT))

    in_process = _large_encodes(encode_calls)
    assert in_process == [], f"the {LARGE_CHARS}-character prompt was encoded in this process: {in_process}"
    assert input_ids == glm_tokenizer.encode(LARGE_TEXT)
    assert token_type_ids is None


@pytest.mark.detects_stock_bug
def test_a_large_prompts_ids_list_is_out_of_the_cycle_collectors_view(
    make_tokenizer_manager, glm_tokenizer
):
    """Every collection of a generation holding a tracked list walks all its items with the GIL
    held, on whichever thread allocates next, often the loop (11.5 ms in gen0 for the lab's
    1.5 M-id chat prompt). The lane's ids list is untracked, and is still the tokenizer's ids."""
    import gc

    tm = make_tokenizer_manager(glm_tokenizer)
    text = LARGE_TEXT * 4
    before = _counts()

    input_ids, _ = asyncio.run(tm._tokenize_texts(text))

    assert len(input_ids) > tokenizer_manager_global("IDS_SLICE")
    assert type(input_ids) is list and not gc.is_tracked(input_ids)
    assert input_ids == glm_tokenizer.encode(text)
    assert _delta(before, "ids_lists") == {"ids_lists.untracked": 1}


@pytest.mark.detects_stock_bug
def test_a_prompts_text_is_decoded_by_the_rust_backend_with_the_gil_released(
    make_tokenizer_manager, glm_tokenizer
):
    """transformers' decode holds the GIL for the whole Rust call (76,726 ids: 27 ms in the v4
    image); decode_prompt calls the backend's decode_batch, which releases it, for the same text.
    A tokenizer that decodes in its own way keeps its decode, counted."""
    tm = make_tokenizer_manager(glm_tokenizer)
    ids = glm_tokenizer.encode(LARGE_TEXT[:200_000])
    before = _counts()

    assert tm.decode_prompt(ids) == glm_tokenizer.decode(ids)
    assert _delta(before, "prompt_decode") == {"prompt_decode.gil_free": 1}

    class OwnDecode:
        _tokenizer = glm_tokenizer._tokenizer

        def decode(self, ids):
            return "own"

    tm.tokenizer = OwnDecode()
    before = _counts()
    assert tm.decode_prompt(ids) == "own"
    assert _delta(before, "prompt_decode") == {"prompt_decode.gil_held": 1}


@pytest.mark.detects_stock_bug_on("0.5.23")
@pytest.mark.skipif(sglang_version() == "0.5.19", reason="0.5.19's chat path caches no decoded prompt")
def test_a_multimodal_chats_cached_prompt_text_is_decoded_with_the_gil_released(
    make_tokenizer_manager, glm_tokenizer
):
    """0.5.23 caches a multimodal chat's prompt with its decoded text, decoded on the lane: in
    the lab's mixed traffic that decode held the GIL while the loop waited (v4's worst probe,
    231 ms). v4 decodes it through decode_prompt."""
    tm = make_tokenizer_manager(glm_tokenizer)
    serving = ChatServing(tm, TemplateManager())
    before = _counts()

    prompt_ids, decoded = serving._render_and_encode_chat_template(
        [{"role": "user", "content": LARGE_TEXT[:50_000]}],
        tools=None, template_kwargs={}, encode_kwargs={}, use_cache=True)

    assert decoded == glm_tokenizer.decode(prompt_ids)
    assert _delta(before, "prompt_decode") == {"prompt_decode.gil_free": 1}


@pytest.mark.detects_stock_bug_on("0.5.19")
@pytest.mark.skipif(sglang_version() != "0.5.19", reason="0.5.23 decodes in its template cache (the test above)")
def test_a_multimodal_chats_prompt_text_is_decoded_with_the_gil_released(
    make_tokenizer_manager, glm_tokenizer
):
    """0.5.19 decodes every chat of a multimodal model back to text (the prompt the multimodal
    processor reads), on the lane: transformers' decode holds the GIL for its whole Rust call. In
    the lab's mixed traffic a slow probe followed each 200 KB tool chat on the vision server.
    v3 decodes it through decode_prompt."""
    tm = make_tokenizer_manager(glm_tokenizer)
    serving = ChatServing(tm, TemplateManager())
    before = _counts()

    result = serving._apply_jinja_template(_chat(LARGE_TEXT[:50_000]), tools=None, is_multimodal=True)

    assert result.prompt == glm_tokenizer.decode(result.prompt_ids)
    assert _delta(before, "prompt_decode") == {"prompt_decode.gil_free": 1}


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_large_tools_chat_prompt_is_identical_and_encoded_in_another_process(
    make_tokenizer_manager, glm_tokenizer, encode_calls
):
    tokenizer = copy.deepcopy(glm_tokenizer)
    tokenizer.chat_template = TOOLS_TEMPLATE
    serving = ChatServing(make_tokenizer_manager(tokenizer), TemplateManager())

    result = asyncio.run(
        serving.handle_request(_chat(LARGE_TEXT, tools=TOOLS), RawRequest(LARGE_CHARS))
    )
    in_process = _large_encodes(encode_calls)
    # What 0.5.19 serves: the same conversion inline, encoded in this thread.
    inline, _ = serving._convert_to_internal_request(_chat(LARGE_TEXT, tools=TOOLS), None)

    assert isinstance(result, dict), f"handle_request returned an error: {result!r}"
    assert in_process == [], f"the chat prompt was encoded in this process: {in_process}"
    assert result["input_ids"] == list(inline.input_ids)


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_killed_tokenizer_process_costs_no_request_and_is_replaced(
    make_tokenizer_manager, glm_tokenizer, encode_calls, caplog
):
    tm = make_tokenizer_manager(glm_tokenizer)
    expected = glm_tokenizer.encode(LARGE_TEXT)
    encode_calls.clear()
    assert asyncio.run(tm._tokenize_texts(LARGE_TEXT))[0] == expected
    (first,) = tm._tokenizer_processes
    os.kill(first.pid, signal.SIGKILL)
    first._process.wait()

    before = _counts()
    with caplog.at_level(logging.WARNING):
        after_kill = asyncio.run(tm._tokenize_texts(LARGE_TEXT))[0]
    fallback = _large_encodes(encode_calls)
    replaced = asyncio.run(tm._tokenize_texts(LARGE_TEXT))[0]

    assert after_kill == expected  # encoded on the lane's thread instead
    assert len(fallback) == 1 and fallback[0][0].startswith("sglang-preprocess"), fallback
    assert any("fell back" in r.getMessage() for r in caplog.records)
    assert replaced == expected
    (second,) = tm._tokenizer_processes  # the dead one is pruned
    assert second.pid != first.pid
    assert _large_encodes(encode_calls) == fallback  # the new process encoded the third
    assert _delta(before, "tokenizer_process") == {
        "tokenizer_process.fallbacks": 1, "tokenizer_process.restarts": 1, "tokenizer_process.uses": 1}


def test_a_tokenizer_with_its_own_encode_keeps_it(make_tokenizer_manager, glm_tokenizer, monkeypatch):
    """A remote-code tokenizer that post-processes its ids is never replaced by its backend."""
    # 0.5.23's own parallel_prompt_encode (on by default) encodes a long chat prompt with the
    # backend in chunks, bypassing such an encode in stock 0.5.23 too; off here, so the test
    # is about the offload only (no such variable in 0.5.19).
    monkeypatch.setenv("SGLANG_PARALLEL_PROMPT_ENCODE", "0")

    class MarkingTokenizer(glm_tokenizer.__class__):
        def encode(self, text, *args, **kwargs):
            return super().encode(text, *args, **kwargs) + [0]

        def apply_chat_template(self, *args, **kwargs):
            # Marked alike: 0.5.23's serving probe compares encode(render) with these ids and,
            # where they differ, encodes every chat through apply_chat_template instead.
            result = super().apply_chat_template(*args, **kwargs)
            return result + [0] if kwargs.get("tokenize") and isinstance(result, list) else result

    tokenizer = MarkingTokenizer(tokenizer_object=glm_tokenizer.backend_tokenizer)
    tokenizer.chat_template = glm_tokenizer.chat_template
    serving = ChatServing(make_tokenizer_manager(tokenizer), TemplateManager())

    result = asyncio.run(serving.handle_request(_chat(LARGE_TEXT), None))

    assert isinstance(result, dict), f"handle_request returned an error: {result!r}"
    assert result["input_ids"][-1] == 0


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_shutdown_ends_the_tokenizer_processes(make_tokenizer_manager, glm_tokenizer):
    tm = make_tokenizer_manager(glm_tokenizer)
    asyncio.run(tm._tokenize_texts(LARGE_TEXT))
    (process,) = tm._tokenizer_processes

    tm.shutdown_request_preprocessing()

    assert process._process.returncode is not None, f"pid {process.pid} still runs"
    assert tm._tokenizer_processes == []


# --- the JSON body parse ---------------------------------------------------------------------

LARGE_BODY_BYTES = 2 * 1024 * 1024


@pytest.fixture
def parse_calls(monkeypatch) -> Iterator[List[int]]:
    """The size of every document orjson.loads parses in this process; afterwards the server's
    JSON process (if the tree has one) is ended."""
    real = orjson.loads
    calls: List[int] = []

    def recording(document, *args, **kwargs):
        calls.append(len(document))
        return real(document, *args, **kwargs)

    monkeypatch.setattr(orjson, "loads", recording)
    yield calls
    parser = large_body_parser()
    if parser is not None:
        parser.close()


def _large_chat_body() -> bytes:
    """A multimodal tool chat over LARGE_BODY_BYTES: a non-ASCII text part, base64 images (long
    ASCII strings), short strings and numbers beside them."""
    content = (SENTENCE * (LARGE_BODY_BYTES // len(SENTENCE) + 1))[:LARGE_BODY_BYTES]
    image = "data:image/png;base64," + "iVBORw0KGgo" * 20_000
    parts = [{"type": "text", "text": content}] + [
        {"type": "image_url", "image_url": {"url": image[: len(image) - i]}} for i in range(3)
    ]
    return orjson.dumps(
        {
            "model": "tiny",
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": parts}],
            "tools": TOOLS,
            "temperature": 0.1,
            "max_tokens": 2**40,
        }
    )


def _parse_as_the_server_does(body: bytes) -> Any:
    """ORJSONRequest.json(), the body reader of every sglang route, on a one-chunk body."""
    from sglang.srt.entrypoints.http_server import ORJSONRequest

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions",
             "headers": [(b"content-type", b"application/json")], "query_string": b""}
    return asyncio.run(ORJSONRequest(scope, receive).json())


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_large_body_is_parsed_in_another_process(parse_calls):
    body = _large_chat_body()
    expected = orjson.loads(body)
    parse_calls.clear()

    parsed = _parse_as_the_server_does(body)

    assert [n for n in parse_calls if n >= LARGE_BODY_BYTES] == [], "parsed in this process"
    assert parsed == expected
    assert type(parsed["temperature"]) is float and parsed["max_tokens"] == 2**40


def _image_literals_body(images: int = 8, image_bytes: int = 300_000) -> tuple:
    """A chat body whose big strings take every path back from the JSON child: base64 images (read
    in place), plus a big string with escapes, a big non-ASCII text and a big dict key (copied),
    and short strings that look like the child's placeholders."""
    urls = ["data:image/png;base64," + chr(65 + i) * image_bytes for i in range(images)]
    escaped = 'say "hi"\n' * 20_000
    body = orjson.dumps({
        "model": "glm",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "\u0000" + "0" * 32 + ":0"}]
                      + [{"type": "image_url", "image_url": {"url": url}} for url in urls]},
                     {"role": "assistant", "content": escaped}],
        "metadata": {"B" * 70_000: LARGE_TEXT[:100_000], "n": 1},
        "tools": TOOLS,
    })
    return body, images + 1, 2  # in place: the images and the key; copied: escaped, non-ASCII


@pytest.mark.detects_stock_bug
def test_a_large_image_body_reads_its_images_in_place(parse_calls):
    """The JSON child sends back where each base64 image is in the body, not the image: the
    server decodes it from its own copy (one copy, not the child's encode, two pipe copies and a
    decode). The parse equals orjson's for every kind of big string, counted per path."""
    body, in_place, copied = _image_literals_body()
    expected = orjson.loads(body)
    parse_calls.clear()
    before = _counts()

    parsed = _parse_as_the_server_does(body)

    assert parsed == expected and [n for n in parse_calls if n >= LARGE_BODY_BYTES] == []
    delta = _delta(before, "json_process.strings")
    assert delta == {"json_process.strings_in_place": in_place,
                     "json_process.strings_in_place_sliced": in_place,
                     "json_process.strings_copied": copied}, delta


@pytest.mark.detects_stock_bug
def test_a_big_image_is_built_from_the_body_a_slice_at_a_time(parse_calls, monkeypatch):
    """A 48 MP image's base64 is tens of MB: one str() of it held the GIL 25 ms in the lab (the
    body-parse thread, the loop waiting). It is built by copies of at most one slice each, with
    the GIL released for each copy."""
    from glm53_offload import offload_process

    copies = []

    def memmove(target, source, size):
        copies.append(size)
        return ctypes.memmove(target, source, size)

    monkeypatch.setattr(offload_process, "_memmove", memmove)
    body, in_place, _ = _image_literals_body(images=2, image_bytes=3_500_000)
    expected = orjson.loads(body)
    before = _counts()

    parsed = _parse_as_the_server_does(body)

    assert parsed == expected
    assert copies and max(copies) <= offload_process._SLICE_BYTES and sum(copies) > 7_000_000, copies
    assert _delta(before, "json_process.strings_in_place")[
        "json_process.strings_in_place_sliced"] == in_place


@pytest.mark.detects_stock_bug
def test_a_large_body_with_no_image_is_parsed_by_the_child_too(parse_calls):
    """A big text body (non-ASCII, no string read in place) goes the same way, with no fallback."""
    body = orjson.dumps({"model": "glm", "messages": [{"role": "user", "content": LARGE_TEXT * 8}]})
    assert len(body) > LARGE_BODY_BYTES
    expected = orjson.loads(body)
    parse_calls.clear()
    before = _counts()

    parsed = _parse_as_the_server_does(body)

    assert parsed == expected and [n for n in parse_calls if n >= LARGE_BODY_BYTES] == []
    assert _delta(before, "json_process") == {"json_process.uses": 1,
                                              "json_process.strings_copied": 1}


@pytest.mark.parametrize("bad", [b"\x01", b"\xff", b"\xed\xa0\x80"])
def test_a_bad_byte_in_a_big_literal_raises_orjsons_own_error(parse_calls, bad):
    """A control character or invalid UTF-8 inside a big string: orjson refuses the body, and so
    does the server, with orjson's own message and position (not the rewritten document's)."""
    body = orjson.dumps({"model": "glm", "pad": "x" * 10, "image": "A" * (LARGE_BODY_BYTES // 2)})
    cut = body.index(b"AAAA") + 100_000
    body = body[:cut] + bad + body[cut + 1:]
    with pytest.raises(orjson.JSONDecodeError) as expected:
        orjson.loads(body)

    with pytest.raises(orjson.JSONDecodeError) as got:
        _parse_as_the_server_does(body)

    assert (str(got.value), got.value.pos) == (str(expected.value), expected.value.pos)


def test_a_large_invalid_body_raises_orjsons_own_error(parse_calls):
    body = _large_chat_body()[:-1]  # truncated: not JSON
    with pytest.raises(orjson.JSONDecodeError) as expected:
        orjson.loads(body)

    with pytest.raises(orjson.JSONDecodeError) as got:
        _parse_as_the_server_does(body)

    assert str(got.value) == str(expected.value)


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_killed_json_process_costs_no_request(parse_calls, caplog):
    body = _large_chat_body()
    expected = orjson.loads(body)
    parser = large_body_parser()
    _one_worker(parser)
    assert _parse_as_the_server_does(body) == expected
    (first,) = parser._processes
    os.kill(first.pid, signal.SIGKILL)
    first._process.wait()
    parse_calls.clear()
    before = _counts()

    with caplog.at_level(logging.WARNING):
        after_kill = _parse_as_the_server_does(body)
    fallback = list(parse_calls)
    replaced = _parse_as_the_server_does(body)

    assert after_kill == expected and fallback == [len(body)]  # parsed here, once
    assert any("fell back" in r.getMessage() for r in caplog.records)
    assert replaced == expected and parse_calls == fallback  # a new child parsed the third
    (second,) = parser._processes
    assert second.pid != first.pid
    assert _delta(before, "json_process.") == {
        "json_process.fallbacks": 1, "json_process.restarts": 1, "json_process.uses": 1,
        "json_process.strings_in_place": 3, "json_process.strings_in_place_sliced": 3,
        "json_process.strings_copied": 1}


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
@pytest.mark.parametrize("failure", ["no-interpreter", "exits-at-once"])
def test_a_child_that_cannot_start_is_tried_once(
    failure, monkeypatch, tmp_path, make_tokenizer_manager, glm_tokenizer, parse_calls, caplog
):
    """A child that cannot start (no interpreter at sys.executable, or a child that exits before
    it is ready) is not started again for every large request: one attempt per lane and per
    parser, one warning each, and every request still served in-process."""
    from glm53_offload import offload_process

    if failure == "no-interpreter":
        monkeypatch.setattr(offload_process.sys, "executable", str(tmp_path / "no-python"))
    else:
        script = tmp_path / "exits.py"
        script.write_text("import sys\nsys.exit(3)\n")
        monkeypatch.setattr(offload_process, "__file__", str(script))
    body = _large_chat_body()
    expected_body = orjson.loads(body)
    expected_ids = glm_tokenizer.encode(LARGE_TEXT)
    parse_calls.clear()
    _one_worker(large_body_parser())

    with caplog.at_level(logging.WARNING):
        tm = make_tokenizer_manager(glm_tokenizer)
        ids = [asyncio.run(tm._tokenize_texts(LARGE_TEXT))[0] for _ in range(2)]
        bodies = [_parse_as_the_server_does(body) for _ in range(2)]

    assert ids == [expected_ids] * 2 and bodies == [expected_body] * 2
    started = tm._tokenizer_processes
    assert len(started) <= 1, f"a new tokenizer process for every prompt: {len(started)}"
    assert [n for n in parse_calls if n == len(body)] == [len(body)] * 2
    warnings = [r.getMessage() for r in caplog.records if "cannot start" in r.getMessage()]
    assert len(warnings) == 2, warnings  # one for the lane, one for the parser


# --- production scale: a GLM-size backend, deadlines, counters --------------------------------


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_glm_size_tokenizer_process_starts_and_encodes(
    make_tokenizer_manager, glm_tokenizer, encode_calls
):
    """The backend JSON of a GLM-class tokenizer is several MB; the previous v3 read it into an
    mmap and its child died at `.decode` (every large prompt then encoded in-process, silently)."""
    backend_bytes = len(glm_tokenizer.backend_tokenizer.to_str().encode())
    assert len(glm_tokenizer) >= 151_552 and backend_bytes > 4 << 20, (len(glm_tokenizer), backend_bytes)
    expected = glm_tokenizer.encode(LARGE_TEXT)
    tm = make_tokenizer_manager(glm_tokenizer)
    encode_calls.clear()
    before = _counts()

    ids = [asyncio.run(tm._tokenize_texts(LARGE_TEXT))[0] for _ in range(2)]

    assert ids == [expected] * 2
    assert _large_encodes(encode_calls) == [], "a large prompt was encoded in this process"
    assert _delta(before) == {"tokenizer_process.uses": 2, "preprocessing_lane_bulk.uses": 2,
                              "preprocessing_lane_bulk.steps": 2, "ids_lists.untracked": 2}


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_lane_counts_each_request_once_and_each_of_its_steps(make_tokenizer_manager, glm_tokenizer):
    """A /v1/messages request takes two lane steps (validation, conversion): the previous v3
    counted 2 "uses" per request. Now "uses" counts requests and "steps" their steps."""
    from test_request_preprocessing_off_loop import _anthropic_messages_call

    tm = make_tokenizer_manager(glm_tokenizer)
    before = _counts()

    for _ in range(3):
        asyncio.run(_anthropic_messages_call(tm))

    assert _delta(before, "preprocessing_lane_small") == {
        "preprocessing_lane_small.uses": 3, "preprocessing_lane_small.steps": 6}


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_the_backend_is_serialized_once(make_tokenizer_manager, glm_tokenizer, monkeypatch):
    """Every lane's process (and a replacement) starts from one serialization of the backend:
    to_str() of a 151 K-token tokenizer holds the GIL for hundreds of milliseconds. (0.5.23's
    chat encode plan serializes each lane's copy once more, at start-up: SGLang's own, not
    counted here; test_the_first_chat_builds_no_tokenizer_plan covers when.)"""
    from tokenizers import Tokenizer

    calls: List[str] = []
    real = Tokenizer.to_str

    def counting(self, *args, **kwargs):
        if sys._getframe(1).f_code.co_name != "_build_plan":
            calls.append(threading.current_thread().name)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Tokenizer, "to_str", counting)
    tm = make_tokenizer_manager(glm_tokenizer)
    asyncio.run(tm._tokenize_texts(LARGE_TEXT))
    (first,) = tm._tokenizer_processes
    first.kill()
    asyncio.run(tm._tokenize_texts(LARGE_TEXT))  # a fallback, then...
    asyncio.run(tm._tokenize_texts(LARGE_TEXT))  # ...a replacement child

    assert len(calls) == 1, f"the backend was serialized {len(calls)} times, on {calls}"


@pytest.fixture
def short_deadlines(monkeypatch) -> Callable[[], None]:
    """Call it to give every later child call a 2 s deadline (children started before keep
    theirs: a GLM-size tokenizer takes a while to load on a busy host)."""
    def apply() -> None:
        from glm53_offload import offload_process

        monkeypatch.setattr(offload_process, "DEADLINE_BASE_S", 2.0)
        monkeypatch.setattr(offload_process, "DEADLINE_S_PER_MB", 0.0)

    return apply


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_stopped_tokenizer_process_is_killed_at_its_deadline(
    make_tokenizer_manager, glm_tokenizer, encode_calls, short_deadlines
):
    """SIGSTOP: the child neither answers nor dies. The lane waits at most the call's deadline,
    kills it, encodes the prompt itself, and the next prompt gets a new child."""
    tm = make_tokenizer_manager(glm_tokenizer)
    expected = glm_tokenizer.encode(LARGE_TEXT)
    asyncio.run(tm._tokenize_texts(LARGE_TEXT))
    (stopped,) = tm._tokenizer_processes
    os.kill(stopped.pid, signal.SIGSTOP)
    short_deadlines()
    encode_calls.clear()
    before = _counts()

    after_stop = asyncio.run(tm._tokenize_texts(LARGE_TEXT))[0]
    replaced = asyncio.run(tm._tokenize_texts(LARGE_TEXT))[0]

    assert after_stop == expected and replaced == expected
    assert stopped._process.returncode == -signal.SIGKILL, stopped._process.returncode
    assert len([c for c in _large_encodes(encode_calls)]) == 1  # only the stopped one's prompt
    delta = _delta(before)
    assert delta["tokenizer_process.deadline_kills"] == 1, delta
    assert delta["tokenizer_process.fallbacks"] == 1 and delta["tokenizer_process.uses"] == 1, delta


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_stopped_json_process_is_killed_at_its_deadline(parse_calls, short_deadlines):
    parser = large_body_parser()
    _one_worker(parser)
    body = _large_chat_body()
    expected = orjson.loads(body)
    assert _parse_as_the_server_does(body) == expected
    (stopped,) = parser._processes
    os.kill(stopped.pid, signal.SIGSTOP)
    short_deadlines()
    parse_calls.clear()
    before = _counts()

    assert _parse_as_the_server_does(body) == expected
    assert parse_calls == [len(body)]  # that one body here, after the kill
    assert _parse_as_the_server_does(body) == expected
    assert parse_calls == [len(body)]  # the next one by a new child

    assert stopped._process.returncode == -signal.SIGKILL
    delta = _delta(before)
    assert delta["json_process.deadline_kills"] == 1 and delta["json_process.restarts"] == 1, delta


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_hung_interpreter_costs_one_start_deadline_and_holds_no_lock(
    make_tokenizer_manager, glm_tokenizer, tmp_path, monkeypatch, caplog
):
    """sys.executable starts but never answers: the lane gives up after START_DEADLINE_S, encodes
    in its thread and does not try again; meanwhile no lock is held (shutdown, another lane).
    The fallback's warning names the deadline it waited."""
    from glm53_offload import offload_process

    started = tmp_path / "started"
    hung = tmp_path / "hung-python"  # starts, says so, never answers (the images have no shell)
    hung.write_text(
        f"#!{sys.executable}\nimport pathlib, time\n"
        f"pathlib.Path({str(started)!r}).touch()\ntime.sleep(600)\n"
    )
    hung.chmod(0o755)
    monkeypatch.setattr(offload_process.sys, "executable", str(hung))
    monkeypatch.setattr(offload_process, "START_DEADLINE_S", 2.0)
    monkeypatch.setattr(offload_process.STATS, "_logged", set())  # warned once per process
    caplog.set_level(logging.WARNING, logger=offload_process.logger.name)
    tm = make_tokenizer_manager(glm_tokenizer)  # the bulk lane starts its child now
    lock_free: List[bool] = []

    async def scenario():
        task = asyncio.create_task(tm._tokenize_texts(LARGE_TEXT))
        for _ in range(3000):  # the child runs: its start is in progress on the lane
            if started.exists() or task.done():
                break
            await asyncio.sleep(0.01)
        assert started.exists(), "the hung interpreter never ran"
        lock_free.append(tm._tokenizer_processes_lock.acquire(blocking=False))
        if lock_free[-1]:
            tm._tokenizer_processes_lock.release()
        return await task

    before = _counts()
    ids = asyncio.run(scenario())
    again = asyncio.run(tm._tokenize_texts(LARGE_TEXT))[0]

    assert lock_free == [True], "the process lock was held while a child started"
    assert ids[0] == glm_tokenizer.encode(LARGE_TEXT) and again == ids[0]
    delta = _delta(before)
    assert delta.get("tokenizer_process.start_failures") == 1, delta
    assert delta.get("tokenizer_process.fallbacks") == 2, delta
    assert all(p.closed for p in tm._tokenizer_processes)
    # The deadline set at run time is the one the child got (bound at class definition, the
    # patched value was ignored and the lane waited out the 60 s default).
    assert any("within 2 s" in r.getMessage() for r in caplog.records), caplog.text


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_large_invalid_body_is_not_parsed_twice(parse_calls):
    """orjson's own error comes from the child's parse: no second, GIL-holding parse here."""
    body = _large_chat_body()[:-1]
    with pytest.raises(orjson.JSONDecodeError) as expected:
        orjson.loads(body)
    parse_calls.clear()

    with pytest.raises(orjson.JSONDecodeError) as got:
        _parse_as_the_server_does(body)

    assert parse_calls == [], f"parsed again in this process: {parse_calls}"
    assert (str(got.value), got.value.pos) == (str(expected.value), expected.value.pos)


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_an_error_the_child_reports_keeps_the_child(parse_calls):
    parser = large_body_parser()
    _one_worker(parser)
    body = _large_chat_body()
    _parse_as_the_server_does(body)
    (child,) = parser._processes
    with pytest.raises(orjson.JSONDecodeError):
        _parse_as_the_server_does(body[:-1])
    assert _parse_as_the_server_does(body) == orjson.loads(body)
    assert parser._processes == [child] and not child.closed


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_deeply_nested_large_body_stays_in_the_child(parse_calls):
    """A value nested 900 deep (orjson accepts 1024): pickling recurses per level."""
    nested = b"[" * 900 + b"1" + b"]" * 900
    body = b'{"deep": ' + nested + b', "pad": "' + b"x" * LARGE_BODY_BYTES + b'"}'
    parse_calls.clear()

    parsed = _parse_as_the_server_does(body)

    assert parse_calls == [], "parsed in this process"
    depth, value = 0, parsed["deep"]
    while isinstance(value, list):
        value, depth = value[0], depth + 1
    assert (depth, value, len(parsed["pad"])) == (900, 1, LARGE_BODY_BYTES)


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_concurrent_bodies_parse_in_a_pool_of_children(parse_calls):
    parser = large_body_parser()
    parser.close()
    parser.workers = 2
    bodies = [_large_chat_body() + b" " * i for i in range(4)]

    async def parse_all():
        from sglang.srt.entrypoints.http_server import ORJSONRequest

        def request(body):
            async def receive():
                return {"type": "http.request", "body": body, "more_body": False}

            return ORJSONRequest({"type": "http", "method": "POST", "path": "/generate",
                                  "headers": [], "query_string": b""}, receive)

        return await asyncio.gather(*(request(b).json() for b in bodies))

    expected = [orjson.loads(b) for b in bodies[:1]] * 4
    parse_calls.clear()
    results = asyncio.run(parse_all())

    assert results == expected
    assert [n for n in parse_calls if n >= LARGE_BODY_BYTES] == []
    assert len(parser._processes) == 2, parser._processes


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_full_body_queue_answers_503(parse_calls):
    """(The body limit's 413 is tested through the real app's routes: test_faults.py.)"""
    from fastapi import HTTPException

    from glm53_offload import offload_process

    body = _large_chat_body()
    parser = large_body_parser()
    busy = parser.workers + parser.max_queued
    offload_process.STATS.add_depth("json_process", busy)
    try:
        with pytest.raises(HTTPException) as full:
            _parse_as_the_server_does(body)
    finally:
        offload_process.STATS.add_depth("json_process", -busy)

    assert full.value.status_code == 503 and "SGLANG_JSON_PARSE_MAX_QUEUED" in full.value.detail
    assert parse_calls == []


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_an_idle_json_child_holds_no_body(parse_calls):
    """After a 64 MB body the idle child is back to its start-up size (target: at most 50 MiB)."""
    parser = large_body_parser()
    _one_worker(parser)
    big = orjson.dumps({"images": ["A" * (1 << 20)] * 64, "n": 1})
    assert _parse_as_the_server_does(big)["n"] == 1
    (child,) = parser._processes

    assert _rss_kib(child.pid) <= 50 * 1024, f"idle JSON child: {_rss_kib(child.pid)} KiB"


def _minor_faults(pid: int) -> int:
    """The process's minor page faults so far (proc(5) stat field 10)."""
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[7])


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_json_child_reuses_its_memory_for_the_next_body(parse_calls):
    """The buffers of an image chat's body (6.3 MB) stay in the JSON child's heap for the next
    body (SGLANG_JSON_PARSE_KEEP_MB): once the heap has grown to them (two bodies), a body faults
    in under a tenth of its pages (none, measured). Handed back after each body, every body
    faulted its pages in, and had the kernel zero them, one and a half times over: most of a
    child's cost per body."""
    parser = large_body_parser()
    _one_worker(parser)
    body = orjson.dumps({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "QUJD" * 787_500}}
        for _ in range(2)]}], "n": 1})
    for _ in range(2):
        assert _parse_as_the_server_does(body)["n"] == 1
    (child,) = parser._processes
    before = _minor_faults(child.pid)
    assert _parse_as_the_server_does(body)["n"] == 1
    faulted = _minor_faults(child.pid) - before
    pages = len(body) // mmap.PAGESIZE
    assert faulted < pages // 10, f"the third {len(body):,}-byte body faulted in {faulted:,} pages ({pages:,} in the body)"


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_offload_counters_are_exported_for_metrics(make_tokenizer_manager, glm_tokenizer):
    import prometheus_client  # sglang's metrics dependency (in the CPU lock)

    from glm53_offload import offload_process

    offload_process.STATS.enable_prometheus({"model_name": "glm"})
    tm = make_tokenizer_manager(glm_tokenizer)
    asyncio.run(tm._tokenize_texts(LARGE_TEXT))

    text = prometheus_client.generate_latest().decode()
    line = [l for l in text.splitlines()
            if l.startswith("sglang:offload_events_total{")
            and 'path="tokenizer_process"' in l and 'event="uses"' in l]
    assert line and float(line[0].rsplit(" ", 1)[1]) >= 1, text[-2000:]
    assert "sglang:offload_queue_depth" in text


# --- aborts during preprocessing ---------------------------------------------------------------


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_abort_while_a_generate_prompt_is_on_its_lane_never_dispatches(
    dispatching, hold_factory, monkeypatch
):
    """abort_request(rid) while the prompt is tokenized on its lane: the scheduler gets neither an
    AbortReq (it would ignore it: the rid is unknown there) nor the request; the next request is
    the first thing it reads, and the aborted one ends as `abort`."""
    from transformers import PreTrainedTokenizerFast

    tm, scheduler, submit_until_dispatch = dispatching
    hold = hold_factory()
    text = SENTENCE * 2000  # 120 K characters: the bulk lane, encoded on its thread
    real = PreTrainedTokenizerFast.__call__

    def held(self, *args, **kwargs):
        if args and args[0] in (text, [text]):
            hold()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(PreTrainedTokenizerFast, "__call__", held)

    async def scenario():
        task = asyncio.create_task(submit_until_dispatch(tm, _request(text, "early")))
        await hold.wait_started()
        tm.abort_request("early")
        hold.released.set()
        await task
        await submit_until_dispatch(tm, _request("hello", "after"))

    asyncio.run(scenario())

    scheduler.assert_first_is("after", "an AbortReq reached the scheduler first")
    state = tm.rid_to_state.get("early")
    assert state is None or state.out_list[-1]["meta_info"]["finish_reason"]["type"] == "abort"


def _held_dispatching_chat(dispatching: Any, hold: Any) -> Any:
    """The real chat serving class over the fixture's manager, its tokenizer held by `hold`
    (the lanes copy it), each converted request submitted until its dispatch."""
    from test_request_preprocessing_off_loop import HeldTokenizer, startup

    from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat

    tm, _, submit_until_dispatch = dispatching
    tm.tokenizer = HeldTokenizer(tm.tokenizer, hold)
    tm.shutdown_request_preprocessing()
    tm.init_request_preprocessing()

    class DispatchingChat(OpenAIServingChat):
        async def _handle_non_streaming_request(self, adapted_request, request, raw_request):
            adapted_request.normalize_batch_and_arguments()
            await submit_until_dispatch(tm, adapted_request)
            return tm.rid_to_state.get(adapted_request.rid)

    with startup(tm):
        return DispatchingChat(tm, TemplateManager())


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_abort_during_the_chat_conversion_never_dispatches(
    dispatching, hold_factory, monkeypatch
):
    """With one tokenizer worker, an abort of a chat request whose template still renders (its
    rid not yet known to the manager) was dropped and the request then ran."""
    tm, scheduler, submit_until_dispatch = dispatching
    hold = hold_factory()
    serving = _held_dispatching_chat(dispatching, hold)

    async def scenario():
        task = asyncio.create_task(
            serving.handle_request(_chat("hello there", rid="chat-early"), RawRequest(200))
        )
        await hold.wait_started()
        tm.abort_request("chat-early")
        hold.released.set()
        await task
        hold.released.set()
        await submit_until_dispatch(tm, _request("hello", "after"))

    asyncio.run(scenario())

    scheduler.assert_first_is("after", "an AbortReq reached the scheduler first")


@pytest.fixture
def ids_freed(monkeypatch) -> List[Tuple[str, int]]:
    """(thread, ids freed) of every `_drop_ids` call."""
    freed: List[Tuple[str, int]] = []
    real = tokenizer_manager_global("_drop_ids")
    assert real is not None, "this TokenizerManager frees no ids list on a lane (no _drop_ids)"

    def recording(held):
        count = real(held)
        freed.append((threading.current_thread().name, count))
        return count

    patch_tokenizer_manager_global(monkeypatch, "_drop_ids", recording)
    return freed


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_huge_prompts_ids_list_is_freed_on_a_lane_not_on_the_loop(dispatching, ids_freed):
    """The lab's py-spy trace of a 5 MB /generate: the loop ran 13.8 ms of a 16.4 ms /health
    probe inside `_tokenize_unless_aborted`, freeing the 1.7 M-int ids list when
    `_tokenize_one_request`'s frame returned. The list is now handed to the bulk lane and freed
    there in slices."""
    from sglang.srt.managers.io_struct import GenerateReqInput

    tm, scheduler, submit_until_dispatch = dispatching
    text = SENTENCE * 2000
    ids = len(tm.tokenizer.encode(text))
    assert ids > tokenizer_manager_global("OFF_LOOP_DISPATCH_MIN_IDS"), ids

    obj = GenerateReqInput(text=text, rid="huge", sampling_params={"max_new_tokens": 1})
    obj.normalize_batch_and_arguments()  # no return_prompt_token_ids: the list is not kept

    asyncio.run(submit_until_dispatch(tm, obj))
    tm._preprocessing_lanes["bulk"].submit(lambda: None).result()  # the lane ran the drop

    assert scheduler.receive().rid == "huge"
    assert len(ids_freed) == 1, ids_freed
    thread, count = ids_freed[0]
    assert thread.startswith("sglang-preprocess"), f"freed on {thread}"
    assert count == ids, f"freed {count} of the prompt's {ids} ids: another reference held the list"


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_finished_requests_prompt_ids_list_is_freed_on_a_lane(dispatching, ids_freed, monkeypatch):
    """A chat's rendered prompt reaches generate_request as input_ids, a list the request
    object keeps: when the request ended, its handler's frames returned on the loop and freed
    it there (the lab's py-spy trace of a 4.7 MB chat: the loop ran 11.7 ms of a 16.5 ms /health
    probe in starlette's Response.__call__). Now generate_request hands it to the bulk lane."""
    from sglang.srt.managers.io_struct import AbortReq, GenerateReqInput

    tm, scheduler, _ = dispatching
    _answerable(tm, monkeypatch)
    ids = tokenizer_manager_global("OFF_LOOP_DISPATCH_MIN_IDS") + 4000
    obj = GenerateReqInput(input_ids=list(range(1000, 1000 + ids)), rid="chat-ids",
                           sampling_params={"max_new_tokens": 1})

    async def scenario():
        answers = tm.generate_request(obj)
        first = asyncio.ensure_future(answers.__anext__())
        assert (await asyncio.to_thread(scheduler.receive)).rid == "chat-ids"
        tm._handle_abort_req(AbortReq(rid="chat-ids"))  # the scheduler's answer: it ended
        await asyncio.wait_for(first, 10)
        with pytest.raises(StopAsyncIteration):
            await answers.__anext__()

    asyncio.run(scenario())
    tm._preprocessing_lanes["bulk"].submit(lambda: None).result()  # the lane ran the drop

    assert [count for _, count in ids_freed] == [ids], ids_freed
    assert ids_freed[0][0].startswith("sglang-preprocess"), f"freed on {ids_freed[0][0]}"


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_abort_of_one_request_of_a_batch_on_its_lane_never_dispatches_it(
    dispatching, hold_factory, monkeypatch
):
    """/generate with a batch of prompts: abort_request of the first one while it is tokenized
    on its lane. The previous v3 sent an AbortReq the scheduler read before the request (and
    ignored), then the request; now the scheduler's first message is the batch's second
    request and the first ends as `abort`."""
    from transformers import PreTrainedTokenizerFast

    from sglang.srt.managers.io_struct import GenerateReqInput

    tm, scheduler, _ = dispatching
    hold = hold_factory()
    text = SENTENCE * 2000  # the bulk lane
    real = PreTrainedTokenizerFast.__call__

    def held(self, *args, **kwargs):
        if args and args[0] in (text, [text]):
            hold()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(PreTrainedTokenizerFast, "__call__", held)
    obj = GenerateReqInput(
        text=[text, "hello"], rid=["batch-first", "batch-second"],
        sampling_params={"max_new_tokens": 1}, stream=True,  # answers as each request ends
    )
    obj.normalize_batch_and_arguments()
    tm._init_req_state(obj)
    _answerable(tm, monkeypatch)

    async def scenario():
        # 0.5.23 also takes the request and the batch's states (for its failure cleanup).
        takes_states = "request_states" in inspect.signature(tm._handle_batch_request).parameters
        responses = tm._handle_batch_request(obj, *((None, {}) if takes_states else ()))
        first = asyncio.ensure_future(responses.__anext__())
        await hold.wait_started()
        tm.abort_request("batch-first")
        hold.released.set()
        received = await asyncio.to_thread(scheduler.receive)
        answer = await asyncio.wait_for(first, 10)  # the aborted request's
        await responses.aclose()
        return received, answer

    received, answer = asyncio.run(scenario())

    assert type(received).__name__ != "AbortReq", "an AbortReq reached the scheduler first"
    assert received.rid == "batch-second", f"the scheduler got {received.rid!r} first"
    assert answer["meta_info"]["id"] == "batch-first", answer
    assert answer["meta_info"]["finish_reason"]["type"] == "abort", answer


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_generate_request_answers_a_request_aborted_before_dispatch_as_aborted(
    dispatching, hold_factory, monkeypatch
):
    """generate_request's own path: the previous v3 removed the aborted request's state
    (_handle_abort_req) before it built the request's waiter, which then raised KeyError (a
    500 for the client) instead of answering `abort`."""
    from transformers import PreTrainedTokenizerFast

    tm, scheduler, _ = dispatching
    hold = hold_factory()
    text = SENTENCE * 2000
    real = PreTrainedTokenizerFast.__call__

    def held(self, *args, **kwargs):
        if args and args[0] in (text, [text]):
            hold()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(PreTrainedTokenizerFast, "__call__", held)
    _answerable(tm, monkeypatch)

    async def scenario():
        answers = tm.generate_request(_request(text, "single-early"))
        first = asyncio.ensure_future(answers.__anext__())
        await hold.wait_started()
        tm.abort_request("single-early")
        hold.released.set()
        answer = await asyncio.wait_for(first, 10)
        await answers.aclose()
        return answer

    answer = asyncio.run(scenario())

    assert answer["meta_info"]["finish_reason"]["type"] == "abort", answer
    assert not scheduler.pull.poll(0), "something reached the scheduler"


def _answerable(tm: Any, monkeypatch: Any) -> None:
    """What generate_request and the answer path read that the dispatching fixture leaves
    unset."""
    monkeypatch.setattr(tm.request_logger, "log_finished_request", lambda *a, **k: None,
                        raising=False)
    monkeypatch.setattr(tm.request_logger, "log_received_request", lambda *a, **k: None,
                        raising=False)
    tm.incremental_streaming_output = False
    tm.request_metrics_exporter_manager = SimpleNamespace(exporter_enabled=lambda: False)
    monkeypatch.setattr(tm, "auto_create_handle_loop", lambda: None, raising=False)
    monkeypatch.setattr(tm, "_set_default_priority", lambda obj: None, raising=False)
    tm.elastic_worker_count = 1
    tm.is_pause = False
    tm.is_pause_cond = asyncio.Condition()
    tm.model_update_lock = SimpleNamespace(reader_lock=contextlib.nullcontext())


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_abort_during_an_anthropic_messages_conversion_never_dispatches(
    dispatching, hold_factory
):
    """/v1/messages converts on a lane too: the previous v3 did not watch it (the request had no
    rid yet), so an abort during the conversion was dropped and the request ran. Now the rid is
    given before the conversion (a uuid4 hex, as GenerateReqInput gives one) and watched."""
    from sglang.srt.entrypoints.anthropic.protocol import AnthropicMessagesRequest
    from sglang.srt.entrypoints.anthropic.serving import AnthropicServing

    tm, scheduler, submit_until_dispatch = dispatching
    hold = hold_factory()
    serving = AnthropicServing(_held_dispatching_chat(dispatching, hold))
    request = AnthropicMessagesRequest(
        model="tiny", max_tokens=8, messages=[{"role": "user", "content": "hello there"}]
    )

    async def scenario():
        task = asyncio.create_task(serving.handle_messages(request, RawRequest(200)))
        await hold.wait_started()
        watched = list(tm.__dict__.get("_undispatched", {}))
        for rid in watched:
            tm.abort_request(rid)
        hold.released.set()
        await task
        hold.released.set()
        await submit_until_dispatch(tm, _request("hello", "after"))
        return watched

    watched = asyncio.run(scenario())

    assert len(watched) == 1, f"the conversion watched {watched} for aborts"
    scheduler.assert_first_is("after", "the aborted Messages request reached the scheduler")


# --- 0.5.19's contracts the patch keeps ---------------------------------------------------------


@pytest.mark.detects_previous_v3
def test_sock_send_is_send_pyobj_for_every_other_process(monkeypatch):
    """Only the off-loop dispatch sends pre-encoded bytes; sock_send, which every sglang process
    uses, is 0.5.19's send_pyobj."""
    from sglang.srt.managers import io_struct

    monkeypatch.setattr(io_struct, "_USE_PICKLE_IPC", True)
    calls: List[str] = []

    class Socket:
        def send_pyobj(self, obj, flags=0, protocol=None):
            calls.append("send_pyobj")

        def send(self, data, flags=0, copy=True):
            calls.append("send")

    io_struct.sock_send(Socket(), {"x": 1})
    assert calls == ["send_pyobj"]


@pytest.mark.detects_stock_bug
@pytest.mark.parametrize("setting, expected", [(None, 0.001), ("0", 0.005), ("0.002", 0.002)])
def test_the_http_server_entry_shortens_the_switch_interval(setting, expected, monkeypatch):
    """launch_server calls the package's serve_http: the HTTP server process switches threads
    every 1 ms unless SGLANG_HTTP_SERVER_SWITCH_INTERVAL_SECS says otherwise (0: CPython's
    5 ms)."""
    import sys

    from glm53_offload import offload_process

    monkeypatch.setenv(offload_process._HTTP_SERVER_ENV, "0")  # restored after the test
    if setting is None:
        monkeypatch.delenv("SGLANG_HTTP_SERVER_SWITCH_INTERVAL_SECS", raising=False)
    else:
        monkeypatch.setenv("SGLANG_HTTP_SERVER_SWITCH_INTERVAL_SECS", setting)
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)  # CPython's default
    try:
        offload_process.serve_http()
        assert sys.getswitchinterval() == pytest.approx(expected)
    finally:
        sys.setswitchinterval(before)


@pytest.mark.detects_previous_v3
def test_library_mode_keeps_the_switch_interval(make_tokenizer_manager, glm_tokenizer):
    """An Engine in library mode builds the tokenizer manager too: the process-wide GIL switch
    interval is the HTTP server's choice (launch_server), not the manager's."""
    import sys

    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)  # CPython's default
    try:
        make_tokenizer_manager(glm_tokenizer)
        assert sys.getswitchinterval() == 0.005
    finally:
        sys.setswitchinterval(before)


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
@pytest.mark.parametrize("value", ["-5", "20", "10.5"])
def test_a_child_nice_out_of_range_is_refused_at_start(value):
    """SGLANG_OFFLOAD_CHILD_NICE outside 0-19 (or not an integer) stops the server at import
    with an error naming the setting. Unchecked, a negative value kills every child in os.nice
    (it needs CAP_SYS_NICE) and 20 or more is silently clamped to 19. The module runs as the
    children run it (a script, stdlib only): the same module-level check as the server's
    import, without the 5 s import of sglang per value."""
    import subprocess

    from glm53_offload import offload_process

    env = dict(os.environ, SGLANG_OFFLOAD_CHILD_NICE=value)
    run = subprocess.run(
        [sys.executable, "-P", offload_process.__file__, "tokenizer"],
        env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode != 0
    error = run.stderr.splitlines()[-1]
    assert "SGLANG_OFFLOAD_CHILD_NICE=" in error and value in error, run.stderr


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_tokenizer_child_that_grew_is_replaced_after_its_request(
    make_tokenizer_manager, glm_tokenizer, monkeypatch
):
    """The tokenizers crate leaves a large prompt's encoding fragmented in the child's heap; a
    child that grew past the limit is replaced on its lane right after the request, so an idle
    lane's child holds nothing of the last prompt (here the limit is 0 MB: any growth)."""
    from glm53_offload import offload_process

    monkeypatch.setattr(offload_process, "CHILD_GROWTH_LIMIT_MB", 0)
    tm = make_tokenizer_manager(glm_tokenizer)
    expected = glm_tokenizer.encode(LARGE_TEXT)
    before = _counts()

    assert asyncio.run(tm._tokenize_texts(LARGE_TEXT))[0] == expected
    (grown,) = [p for p in tm._tokenizer_processes]
    tm._preprocessing_lanes["bulk"].submit(lambda: None).result()  # the lane ran the recycle
    assert asyncio.run(tm._tokenize_texts(LARGE_TEXT))[0] == expected
    tm._preprocessing_lanes["bulk"].submit(lambda: None).result()

    assert grown._process.returncode is not None, "the grown child still runs"
    fresh = [p for p in tm._tokenizer_processes if not p.closed]
    assert len(fresh) == 1 and fresh[0].pid != grown.pid, tm._tokenizer_processes
    delta = _delta(before, "tokenizer_process")
    assert delta.get("tokenizer_process.recycles") == 2 and delta.get("tokenizer_process.uses") == 2, delta
    assert "tokenizer_process.fallbacks" not in delta, delta
