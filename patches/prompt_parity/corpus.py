"""The prompt-parity corpus: fixed chat requests whose prompt ids a bump must not change unseen.

Stdlib only: imported on the host (the gate's tests) and inside the base images (render_ids.py).
Every entry is a literal request body, so the corpus is the same in every process; the one long
text comes from glm_tokenizer.english_like_text, which is seeded (see that module).

Kinds:
  - "chat": an OpenAI /v1/chat/completions body, rendered by OpenAIServingChat._process_messages;
  - "anthropic": an Anthropic /v1/messages body, converted by the version's own
    AnthropicServing._convert_to_chat_completion_request, then rendered the same way.
`multimodal` entries are rendered with is_multimodal=True (image parts collected, not decoded).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MODEL = "glm-5.3"

# A 1x1 PNG: image parts are only collected by the chat path, never decoded, but keep it valid.
PNG_1X1 = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEA"
    "W9yq6QAAAABJRU5ErkJggg=="
)


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str  # "chat" | "anthropic"
    body: dict[str, Any]
    multimodal: bool = False


def _fn(name: str, description: str, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name, "description": description}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


WEATHER = _fn("get_weather", "Current weather for a city.", {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
    "required": ["city"],
})
SEARCH = _fn("search_docs", "Search the internal documentation.", {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "free text"},
        "filters": {
            "type": "object",
            "properties": {
                "tags": {"type": "array", "items": {"type": "string"}},
                "since": {"type": "string", "format": "date"},
            },
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": 50},
    },
    "required": ["query"],
})
# Parameters written in a non-canonical key order, as some clients send them.
CREATE_TICKET = {"type": "function", "function": {
    "parameters": {"required": ["title"], "type": "object", "properties": {
        "title": {"type": "string"}, "priority": {"type": "integer"}}},
    "name": "create_ticket",
    "description": "Open a ticket.",
}}
NO_PARAMS = _fn("get_time", "The server's current time.")
STRICT = {"type": "function", "function": {
    "name": "set_flag", "description": "Set a feature flag.", "strict": True,
    "parameters": {"type": "object", "properties": {"flag": {"type": "string"}, "on": {"type": "boolean"}},
                   "required": ["flag", "on"], "additionalProperties": False},
}}

SYSTEM = {"role": "system", "content": "You are a careful assistant. Call tools when they help."}


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _chat(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": messages, "max_tokens": 1, "temperature": 0, **extra}


def _tool_entries() -> list[Entry]:
    weather_call = _call("call_1", "get_weather", '{"city": "Paris", "unit": "c"}')
    return [
        Entry("tool/single", "chat", _chat(
            [{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER])),
        Entry("tool/three_shapes", "chat", _chat(
            [SYSTEM, {"role": "user", "content": "Find the on-call runbook and open a ticket."}],
            tools=[WEATHER, SEARCH, CREATE_TICKET], tool_choice="auto")),
        Entry("tool/no_parameters", "chat", _chat(
            [{"role": "user", "content": "What time is it?"}], tools=[NO_PARAMS])),
        Entry("tool/strict", "chat", _chat(
            [{"role": "user", "content": "Turn on dark_mode."}], tools=[STRICT, WEATHER])),
        Entry("tool/call_and_result", "chat", _chat([
            SYSTEM,
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [weather_call]},
            {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21, "sky": "clear"}'},
        ], tools=[WEATHER])),
        Entry("tool/parallel_calls", "chat", _chat([
            {"role": "user", "content": "Weather in Paris and in Oslo?"},
            {"role": "assistant", "content": None, "tool_calls": [
                weather_call, _call("call_2", "get_weather", '{"city": "Oslo"}')]},
            {"role": "tool", "tool_call_id": "call_1", "content": "21 C, clear"},
            {"role": "tool", "tool_call_id": "call_2", "content": "4 C, snow"},
        ], tools=[WEATHER])),
        Entry("tool/multi_turn", "chat", _chat([
            SYSTEM,
            {"role": "user", "content": "Search for 'deploy rollback'."},
            {"role": "assistant", "content": "Searching.", "tool_calls": [
                _call("call_a", "search_docs", '{"query": "deploy rollback", "limit": 3}')]},
            {"role": "tool", "tool_call_id": "call_a", "content": "runbook/rollback.md"},
            {"role": "assistant", "content": "The runbook is runbook/rollback.md."},
            {"role": "user", "content": "Open a ticket to update it, priority 2."},
            {"role": "assistant", "content": "", "tool_calls": [
                _call("call_b", "create_ticket", '{"title": "Update rollback runbook", "priority": 2}')]},
            {"role": "tool", "tool_call_id": "call_b", "content": '{"id": "T-17"}'},
        ], tools=[SEARCH, CREATE_TICKET])),
        Entry("tool/nested_unicode_args", "chat", _chat([
            {"role": "user", "content": "Suche Dokumente über Zürich, Tags: ops, 夜间."},
            {"role": "assistant", "content": "", "tool_calls": [_call(
                "call_u", "search_docs",
                '{"query": "Zürich", "filters": {"tags": ["ops", "夜间"], "since": "2026-01-01"}}')]},
            {"role": "tool", "tool_call_id": "call_u", "content": "keine Treffer ✓"},
        ], tools=[SEARCH])),
        Entry("tool/result_as_parts", "chat", _chat([
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [weather_call]},
            {"role": "tool", "tool_call_id": "call_1",
             "content": [{"type": "text", "text": "21 C"}, {"type": "text", "text": ", clear"}]},
        ], tools=[WEATHER])),
        Entry("tool/reasoning_then_call", "chat", _chat([
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "reasoning_content": "The user wants Paris.",
             "tool_calls": [weather_call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "21 C"},
        ], tools=[WEATHER])),
        Entry("tool/choice_required", "chat", _chat(
            [{"role": "user", "content": "Weather in Rome?"}], tools=[WEATHER, SEARCH],
            tool_choice="required")),
        Entry("tool/choice_named", "chat", _chat(
            [{"role": "user", "content": "Look up 'gpu quotas'."}], tools=[WEATHER, SEARCH],
            tool_choice={"type": "function", "function": {"name": "search_docs"}})),
        Entry("tool/choice_none", "chat", _chat(
            [{"role": "user", "content": "Just say hi."}], tools=[WEATHER], tool_choice="none")),
    ]


def _multimodal_entries() -> list[Entry]:
    image = {"type": "image_url", "image_url": {"url": PNG_1X1}}
    return [
        Entry("mm/one_image", "chat", _chat([{"role": "user", "content": [
            {"type": "text", "text": "What is in this picture?"}, image]}]), multimodal=True),
        Entry("mm/two_images_interleaved", "chat", _chat([{"role": "user", "content": [
            {"type": "text", "text": "Compare the first"}, image,
            {"type": "text", "text": "with the second"}, image,
            {"type": "text", "text": "in one sentence."}]}]), multimodal=True),
        Entry("mm/image_only", "chat", _chat([{"role": "user", "content": [image]}]), multimodal=True),
        Entry("mm/image_multi_turn", "chat", _chat([
            SYSTEM,
            {"role": "user", "content": [image, {"type": "text", "text": "Describe it."}]},
            {"role": "assistant", "content": "A single grey pixel."},
            {"role": "user", "content": [{"type": "text", "text": "And this one?"}, image]},
        ]), multimodal=True),
        Entry("mm/image_with_tools", "chat", _chat([{"role": "user", "content": [
            {"type": "text", "text": "Where was this taken? Check the weather there."}, image]}],
            tools=[WEATHER]), multimodal=True),
    ]


def _plain_entries(long_text: str) -> list[Entry]:
    return [
        Entry("plain/single_user", "chat", _chat([{"role": "user", "content": "Hello!"}])),
        Entry("plain/system_user", "chat", _chat([
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "Good morning."}])),
        Entry("plain/multi_turn", "chat", _chat([
            {"role": "user", "content": "Name a prime."},
            {"role": "assistant", "content": "7"},
            {"role": "user", "content": "Another one, larger."}])),
        Entry("plain/text_parts", "chat", _chat([{"role": "user", "content": [
            {"type": "text", "text": "Part one. "}, {"type": "text", "text": "Part two."}]}])),
        Entry("plain/unicode_whitespace", "chat", _chat([{"role": "user", "content":
            "  Привет, 世界! 👋\n\n\tTabs, trailing spaces   \nand <|user|> typed by a user."}])),
        Entry("plain/reasoning_history", "chat", _chat([
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4", "reasoning_content": "Simple sum."},
            {"role": "user", "content": "3+3?"}])),
        Entry("plain/long_prose", "chat", _chat([{"role": "user", "content": long_text}])),
    ]


def _anthropic_entries() -> list[Entry]:
    tool = {"name": "get_weather", "description": "Current weather for a city.", "input_schema": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
    return [
        Entry("anthropic/plain", "anthropic", {
            "model": MODEL, "max_tokens": 1, "system": "Be brief.",
            "messages": [{"role": "user", "content": "Hello there."}]}),
        Entry("anthropic/tool_use_and_result", "anthropic", {
            "model": MODEL, "max_tokens": 1, "tools": [tool],
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                                                   "name": "get_weather", "input": {"city": "Paris"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                              "content": "21 C, clear"}]},
            ]}),
    ]


def entries(long_text: str = "") -> list[Entry]:
    """The corpus in a fixed order. `long_text` is the seeded prose of plain/long_prose (the
    renderer passes glm_tokenizer.english_like_text(0, 400, 1); the host tests need none)."""
    out = _tool_entries() + _multimodal_entries() + _plain_entries(long_text) + _anthropic_entries()
    names = [e.name for e in out]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate corpus entry names: {sorted(n for n in names if names.count(n) > 1)}")
    return out
