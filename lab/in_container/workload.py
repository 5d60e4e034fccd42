"""The lab's requests: seeded synthetic bodies, the same bytes in both arms.

Each request kind builds (path, JSON body bytes) from a seed and a size and reads the prompt
token count back from the server's answer (the fake scheduler reports len(input_ids)).
"""

from __future__ import annotations

import base64
import json
import random
import struct
import zlib
from dataclasses import dataclass
from typing import Callable

from synthetic_text import text_of_size

MB = 1_000_000
MODEL = "lab"


@dataclass(frozen=True)
class Request:
    name: str
    path: str
    body: bytes
    # Reads prompt_tokens out of the parsed JSON answer.
    prompt_tokens: Callable[[dict], int]


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
        return {"model": MODEL, "messages": messages, "max_tokens": 1, "temperature": 0}

    # Within `turns` bytes of total_bytes (the text is split evenly over the turns).
    body = _encode(make(total_bytes - len(_encode(make(0)))))
    return Request(name, "/v1/chat/completions", body, _chat_tokens)


def generate(name: str, seed: int, total_bytes: int) -> Request:
    """Native /generate with text, the whole body total_bytes long."""

    text = text_of_size(seed, total_bytes)  # make(n) takes prefixes of it

    def make(n: int) -> dict:
        return {"text": text[:n], "sampling_params": {"max_new_tokens": 1, "temperature": 0}}

    return Request(name, "/generate", _fit(make, total_bytes), _generate_tokens)


def png(width: int, height: int, seed: int) -> bytes:
    """A noisy RGB PNG (stdlib zlib), so no image library is needed to make it."""
    rng = random.Random(seed)
    row_bytes = width * 3
    raw = bytearray()
    for _ in range(height):
        raw.append(0)  # filter: none
        raw += rng.randbytes(row_bytes)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(bytes(raw), 1)) + chunk(b"IEND", b"")


def multimodal_chat(name: str, seed: int, images: int, side: int) -> Request:
    """A chat turn with `images` base64 PNGs of side x side pixels and a short text."""
    content: list[dict] = [{"type": "text", "text": text_of_size(seed, 2000)}]
    for index in range(images):
        data = base64.b64encode(png(side, side, seed * 100 + index)).decode("ascii")
        content.append({"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}})
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 1, "temperature": 0}
    return Request(name, "/v1/chat/completions", _encode(body), _chat_tokens)
