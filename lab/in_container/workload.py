"""The lab's requests: seeded synthetic bodies, the same bytes in both arms.

Each request kind builds (path, JSON body bytes) from a seed and a size and reads the prompt
token count back from the server's answer (the fake scheduler reports len(input_ids)).
"""

from __future__ import annotations

import base64
import functools
import json
import random
import struct
import zlib
from dataclasses import dataclass
from typing import Callable

from synthetic_text import text_of_size

MB = 1_000_000
MODEL = "lab"
TOOL_CORPUS_SEED, TOOL_CORPUS_BYTES = 77, 4 * MB


@functools.lru_cache(maxsize=1)
def _tool_corpus() -> str:
    """The text tool chats take their slices from (built once: many requests share it)."""
    return text_of_size(TOOL_CORPUS_SEED, TOOL_CORPUS_BYTES)


@dataclass(frozen=True)
class Request:
    name: str
    path: str
    body: bytes
    # Reads prompt_tokens out of the parsed JSON answer.
    prompt_tokens: Callable[[dict], int]
    images: int = 0  # image parts in the body

    @functools.cached_property
    def prompt_chars(self) -> int:
        """prompt_chars(body), computed once (the session reads it before the quiet period)."""
        return prompt_chars(self.body)


def prompt_chars(body: bytes) -> int:
    """Characters of prompt text in a request body: /generate's `text`, or the text of every
    message (string contents and text parts; images, tools and tool calls not counted).

    A lower bound of the rendered prompt's length (the chat template only adds to it), so a
    request over TOKENIZER_PROCESS_MIN_CHARS here is a prompt v3 encodes in its tokenizer child.
    """
    data = json.loads(body)
    text = data.get("text")
    if isinstance(text, str):
        return len(text)
    if isinstance(text, list):
        return sum(len(t) for t in text if isinstance(t, str))
    total = 0
    for message in data.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(len(part.get("text") or "") for part in content
                         if isinstance(part, dict) and part.get("type") == "text")
    return total


# v3's threshold (tokenizer_manager.TOKENIZER_PROCESS_MIN_CHARS): a prompt longer than this is
# encoded by the preprocessing lane's tokenizer process. The lab's large prompts are 1-5 M
# characters, far above it; its tool chats (about 196 K characters) stay below.
TOKENIZER_PROCESS_MIN_CHARS = 256 * 1024


def _chat_tokens(answer: dict) -> int:
    return int(answer["usage"]["prompt_tokens"])


def _generate_tokens(answer: dict) -> int:
    return int(answer["meta_info"]["prompt_tokens"])


def _encode(body: dict) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode("ascii")


def _fit(make: Callable[[int], dict], total_bytes: int) -> bytes:
    """The body make(n) with n chosen so the encoded body is total_bytes long (or 1 byte less).

    JSON escapes newlines, so the text grows when encoded; shrinking n by the excess converges
    in a few rounds.
    """
    n = total_bytes - len(_encode(make(0)))
    for _ in range(20):
        body = _encode(make(n))
        excess = len(body) - total_bytes
        if -1 <= excess <= 0:
            return body
        n -= excess if excess > 0 else -1
    raise AssertionError(f"could not fit a body to {total_bytes} bytes (last: {len(body)})")


def chat(name: str, seed: int, total_bytes: int) -> Request:
    """One user turn of prose: /v1/chat/completions, the whole body total_bytes long."""

    text = text_of_size(seed, total_bytes)  # make(n) takes prefixes of it

    def make(n: int) -> dict:
        return {
            "model": MODEL,
            "rid": name,
            "messages": [{"role": "user", "content": text[:n]}],
            "max_tokens": 1,
            "temperature": 0,
        }

    return Request(name, "/v1/chat/completions", _fit(make, total_bytes), _chat_tokens)


def conversation(name: str, seed: int, total_bytes: int, turns: int = 7) -> Request:
    """A new multi-turn conversation: user/assistant alternating, first and last turn user."""
    if turns % 2 == 0:
        raise ValueError(f"turns={turns}: use an odd number so the conversation ends with the user")

    def make(n: int) -> dict:
        per_turn = n // turns
        messages = [{"role": "system", "content": "You are the lab's test assistant."}]
        for turn in range(turns):
            role = "user" if turn % 2 == 0 else "assistant"
            messages.append({"role": role, "content": text_of_size(seed * 1000 + turn, per_turn)})
        return {"model": MODEL, "rid": name, "messages": messages, "max_tokens": 1, "temperature": 0}

    # Within `turns` bytes of total_bytes (the text is split evenly over the turns).
    body = _encode(make(total_bytes - len(_encode(make(0)))))
    return Request(name, "/v1/chat/completions", body, _chat_tokens)


def generate(name: str, seed: int, total_bytes: int) -> Request:
    """Native /generate with text, the whole body total_bytes long."""

    text = text_of_size(seed, total_bytes)  # make(n) takes prefixes of it

    def make(n: int) -> dict:
        return {"rid": name, "text": text[:n], "sampling_params": {"max_new_tokens": 1, "temperature": 0}}

    return Request(name, "/generate", _fit(make, total_bytes), _generate_tokens)


def png(width: int, height: int, seed: int) -> bytes:
    """A noisy RGB PNG (stdlib zlib), so no image library is needed to make it."""
    rng = random.Random(seed)
    row_bytes = width * 3
    raw = bytearray()
    for _ in range(height):
        raw.append(0)  # filter: none
        raw += rng.randbytes(row_bytes)
    return _png_file(width, height, zlib.compress(bytes(raw), 1))


def pattern_png(width: int, height: int, seed: int) -> bytes:
    """A large RGB PNG that compresses well: seeded short-period stripes, shifted per row.

    The decoder still inflates and unfilters every pixel (width x height x 3 bytes), so decode
    and resize cost that of a photo of the same size while the request body stays small.
    """
    rng = random.Random(seed)
    period = rng.randbytes(3 * rng.randint(61, 127))  # one stripe pattern, a few hundred bytes
    line = period * (width * 3 // len(period) + 2)
    step = 3 * rng.randint(1, 7)
    packer = zlib.compressobj(1)
    chunks = []
    for y in range(height):
        shift = (y * step) % len(period)
        chunks.append(packer.compress(b"\x00" + line[shift:shift + width * 3]))
    chunks.append(packer.flush())
    return _png_file(width, height, b"".join(chunks))


def _png_file(width: int, height: int, idat: bytes) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def image_part(data: bytes) -> dict:
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(data).decode("ascii")}}


def multimodal_chat(name: str, seed: int, images: int, side: int) -> Request:
    """A chat turn with `images` base64 noise PNGs of side x side pixels and a short text."""
    return images_chat(name, seed, [png(side, side, seed * 100 + index) for index in range(images)])


def images_chat(name: str, seed: int, pngs: list[bytes]) -> Request:
    """A chat turn with the given PNGs (base64 data URLs) after a short text."""
    content: list[dict] = [{"type": "text", "text": text_of_size(seed, 2000)}]
    content += [image_part(data) for data in pngs]
    body = {"model": MODEL, "rid": name, "messages": [{"role": "user", "content": content}],
            "max_tokens": 1, "temperature": 0}
    return Request(name, "/v1/chat/completions", _encode(body), _chat_tokens, images=len(pngs))


MP9, MP48 = (3000, 3000), (8000, 6000)  # 9 and 48 megapixel source images


@functools.lru_cache(maxsize=4)
def large_pngs(size: tuple[int, int], count: int) -> tuple[bytes, ...]:
    """`count` distinct large PNGs of `size`, built once per process (several requests reuse them)."""
    return tuple(pattern_png(size[0], size[1], seed=size[0] * 1000 + index) for index in range(count))


def large_images_chat(name: str, seed: int, size: tuple[int, int], count: int) -> Request:
    return images_chat(name, seed, list(large_pngs(size, count)))


def tools(seed: int, count: int) -> list[dict]:
    """`count` OpenAI function tools with small JSON-schema parameters (seeded names)."""
    rng = random.Random(seed)
    out = []
    for index in range(count):
        words = text_of_size(seed * 31 + index, 60).split()
        out.append({
            "type": "function",
            "function": {
                "name": f"tool_{index}_{rng.randrange(10_000)}",
                "description": " ".join(words[:8]),
                "parameters": {
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": " ".join(words[8:12])},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                    },
                    "required": ["query"],
                },
            },
        })
    return out


def tool_chat(name: str, seed: int, total_bytes: int, tool_count: int = 8) -> Request:
    """A tool-calling conversation: tools, an earlier assistant tool call and its result, a question.

    The lab's chat template renders the tools, so a server that retried the template with the
    tools flattened (serving_chat's fallback) would produce a different prompt.
    """
    per_part = max(1, (total_bytes - 4000) // 3)
    corpus = _tool_corpus()
    rng = random.Random(seed)

    def part() -> str:  # a seeded slice of one shared corpus: cheap to build many requests
        start = rng.randrange(0, max(1, len(corpus) - per_part))
        return corpus[start:start + per_part]

    messages = [
        {"role": "system", "content": "You are the lab's test assistant; call tools when useful."},
        {"role": "user", "content": part()},
        {"role": "assistant", "content": "", "tool_calls": [{
            "id": f"call_{seed}", "type": "function",
            "function": {"name": "lookup", "arguments": json.dumps({"query": text_of_size(seed, 40)})}}]},
        {"role": "tool", "tool_call_id": f"call_{seed}", "content": part()},
        {"role": "user", "content": part()},
    ]
    body = {"model": MODEL, "rid": name, "messages": messages, "tools": tools(seed, tool_count),
            "tool_choice": "auto", "max_tokens": 1, "temperature": 0}
    return Request(name, "/v1/chat/completions", _encode(body), _chat_tokens)


def small_chat(name: str, seed: int) -> Request:
    """A one-line chat: its dispatch delay shows whether small work waits behind large work."""
    body = {"model": MODEL, "rid": name, "messages": [{"role": "user", "content": text_of_size(seed, 200)}],
            "max_tokens": 1, "temperature": 0}
    return Request(name, "/v1/chat/completions", _encode(body), _chat_tokens)
