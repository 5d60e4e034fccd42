"""Tests for offload-process.diff: a prompt of more than TOKENIZER_PROCESS_MIN_CHARS is encoded
by its preprocessing lane's tokenizer process, and a body of more than LARGE_BODY_MIN_BYTES is
parsed by a JSON process, so no thread of the server process holds the GIL while `tokenizers`
turns millions of ids into a list or orjson parses megabytes.

Real tokenizer and real orjson throughout (the toy BPE of conftest.py; the children run the
same libraries). What is observed is where the work ran: `encode_calls` records every call of
transformers' fast `_encode_plus` in this process and `parse_calls` every `orjson.loads`
(pass-through spies on the real functions), so a large prompt or body handled in this process
shows up there, and one handled by a child does not.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import signal
import threading
from typing import Any, Iterator, List, Tuple

import orjson
import pytest
from test_request_preprocessing_off_loop import (
    TOOLS,
    TOOLS_TEMPLATE,
    ChatServing,
    RawRequest,
    _chat,
)

from sglang.srt.managers import tokenizer_manager
from sglang.srt.parser.template_manager import TemplateManager

LARGE_CHARS = getattr(tokenizer_manager, "TOKENIZER_PROCESS_MIN_CHARS", 256 * 1024) + 4096
SENTENCE = "the quick brown fox jumps over the lazy dog, naïve café 東京 "
LARGE_TEXT = (SENTENCE * (LARGE_CHARS // len(SENTENCE) + 1))[:LARGE_CHARS]


def _chars(text: Any) -> int:
    if isinstance(text, str):
        return len(text)
    return sum(_chars(t) for t in text)


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


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_large_generate_prompt_is_encoded_in_another_process(
    make_tokenizer_manager, tiny_tokenizer, encode_calls
):
    tm = make_tokenizer_manager(tiny_tokenizer)

    input_ids, token_type_ids = asyncio.run(tm._tokenize_texts(LARGE_TEXT))

    in_process = _large_encodes(encode_calls)
    assert in_process == [], f"the {LARGE_CHARS}-character prompt was encoded in this process: {in_process}"
    assert input_ids == tiny_tokenizer.encode(LARGE_TEXT)
    assert token_type_ids is None


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_large_tools_chat_prompt_is_identical_and_encoded_in_another_process(
    make_tokenizer_manager, tiny_tokenizer, encode_calls
):
    tokenizer = copy.deepcopy(tiny_tokenizer)
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
    make_tokenizer_manager, tiny_tokenizer, encode_calls, caplog
):
    tm = make_tokenizer_manager(tiny_tokenizer)
    expected = tiny_tokenizer.encode(LARGE_TEXT)
    encode_calls.clear()
    assert asyncio.run(tm._tokenize_texts(LARGE_TEXT))[0] == expected
    (first,) = tm._tokenizer_processes
    os.kill(first.pid, signal.SIGKILL)
    first._process.wait()

    with caplog.at_level(logging.WARNING, logger=tokenizer_manager.__name__):
        after_kill = asyncio.run(tm._tokenize_texts(LARGE_TEXT))[0]
    fallback = _large_encodes(encode_calls)
    replaced = asyncio.run(tm._tokenize_texts(LARGE_TEXT))[0]

    assert after_kill == expected  # encoded on the lane's thread instead
    assert len(fallback) == 1 and fallback[0][0].startswith("sglang-preprocess"), fallback
    assert any("Tokenizer process failed" in r.getMessage() for r in caplog.records)
    assert replaced == expected
    assert len(tm._tokenizer_processes) == 2 and tm._tokenizer_processes[1].pid != first.pid
    assert _large_encodes(encode_calls) == fallback  # the new process encoded the third


def test_a_tokenizer_with_its_own_encode_keeps_it(make_tokenizer_manager, tiny_tokenizer):
    """A remote-code tokenizer that post-processes its ids is never replaced by its backend."""

    class MarkingTokenizer(tiny_tokenizer.__class__):
        def encode(self, text, *args, **kwargs):
            return super().encode(text, *args, **kwargs) + [0]

    tokenizer = MarkingTokenizer(tokenizer_object=tiny_tokenizer.backend_tokenizer)
    tokenizer.chat_template = tiny_tokenizer.chat_template
    serving = ChatServing(make_tokenizer_manager(tokenizer), TemplateManager())

    result = asyncio.run(serving.handle_request(_chat(LARGE_TEXT), None))

    assert isinstance(result, dict), f"handle_request returned an error: {result!r}"
    assert result["input_ids"][-1] == 0


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_shutdown_ends_the_tokenizer_processes(make_tokenizer_manager, tiny_tokenizer):
    tm = make_tokenizer_manager(tiny_tokenizer)
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
    from sglang.srt.entrypoints import http_server

    parser = getattr(http_server, "_large_body_parser", None)
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
    from sglang.srt.entrypoints import http_server

    body = _large_chat_body()
    expected = orjson.loads(body)
    assert _parse_as_the_server_does(body) == expected
    first = http_server._large_body_parser._process
    os.kill(first.pid, signal.SIGKILL)
    first._process.wait()
    parse_calls.clear()

    with caplog.at_level(logging.WARNING):
        after_kill = _parse_as_the_server_does(body)
    fallback = list(parse_calls)
    replaced = _parse_as_the_server_does(body)

    assert after_kill == expected and fallback == [len(body)]  # parsed here, once
    assert any("JSON parse process failed" in r.getMessage() for r in caplog.records)
    assert replaced == expected and parse_calls == fallback  # a new child parsed the third
    assert http_server._large_body_parser._process.pid != first.pid


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
@pytest.mark.parametrize("failure", ["no-interpreter", "exits-at-once"])
def test_a_child_that_cannot_start_is_tried_once(
    failure, monkeypatch, tmp_path, make_tokenizer_manager, tiny_tokenizer, parse_calls, caplog
):
    """A child that cannot start (no interpreter at sys.executable, or a child that exits before
    it is ready) is not started again for every large request: one attempt per lane and per
    parser, one warning each, and every request still served in-process."""
    from sglang.srt.entrypoints import http_server
    from sglang.srt.managers import offload_process

    if failure == "no-interpreter":
        monkeypatch.setattr(offload_process.sys, "executable", str(tmp_path / "no-python"))
    else:
        script = tmp_path / "exits.py"
        script.write_text("import sys\nsys.exit(3)\n")
        monkeypatch.setattr(offload_process, "__file__", str(script))
    body = _large_chat_body()
    expected_body = orjson.loads(body)
    expected_ids = tiny_tokenizer.encode(LARGE_TEXT)
    parse_calls.clear()

    with caplog.at_level(logging.WARNING):
        tm = make_tokenizer_manager(tiny_tokenizer)
        ids = [asyncio.run(tm._tokenize_texts(LARGE_TEXT))[0] for _ in range(2)]
        bodies = [_parse_as_the_server_does(body) for _ in range(2)]

    assert ids == [expected_ids] * 2 and bodies == [expected_body] * 2
    started = tm._tokenizer_processes
    assert len(started) <= 1, f"a new tokenizer process for every prompt: {len(started)}"
    assert [n for n in parse_calls if n == len(body)] == [len(body)] * 2
    warnings = [r.getMessage() for r in caplog.records if "cannot start" in r.getMessage()]
    assert len(warnings) == 2, warnings  # one for the lane, one for the parser
